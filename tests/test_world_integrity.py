"""Sealed worlds: the per-attempt check reads metadata only, catches edits, and the audit catches the rest.

No services: real worlds on the real filesystem. What the cheap check cannot
see (a forged seal record) is shown to be caught by the audit's full re-hash.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rl_assets.worlds.local import LocalWorlds, WorldTamperedError, tree_manifest

MIB = 1 << 20


@pytest.fixture
def worlds(tmp_path: Path) -> LocalWorlds:
    w = LocalWorlds(tmp_path / "worlds", tmp_path / "forks")
    w.ensure_built("w0")
    return w


def _writable(path: Path) -> None:
    path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _read_bytes_of(fn) -> int:
    """Bytes this process read (``rchar`` of /proc/self/io) while running ``fn``."""

    def rchar() -> int:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
        raise AssertionError("no rchar in /proc/self/io")

    before = rchar()
    fn()
    return rchar() - before


def test_the_per_attempt_check_reads_no_contents_and_the_audit_reads_them_all(worlds):
    world = worlds.world_dir("w0")
    for path in (world, world / "docs"):
        _writable(path)
    with open(world / "docs" / "big.bin", "wb") as f:
        f.write(os.urandom(64 * MIB))
    digest = worlds.reseal("w0")

    cheap = _read_bytes_of(lambda: worlds.verified_hash("w0"))
    full = _read_bytes_of(lambda: worlds.audited_hash("w0"))

    assert worlds.verified_hash("w0") == worlds.audited_hash("w0") == digest
    assert cheap < 64 * 1024, f"the per-attempt check read {cheap} bytes of a 64 MiB world"
    assert full >= 64 * MIB


@pytest.mark.parametrize(
    "tamper",
    [
        "edit-and-restore-mtime",
        "chmod-writable",
        "add-file",
        "remove-file",
        "replace-by-rename",
    ],
)
def test_the_per_attempt_check_catches_edits_through_the_filesystem(worlds, tamper):
    world = worlds.world_dir("w0")
    docs = world / "docs"
    victim = sorted(docs.iterdir())[0]
    st = victim.stat()
    if tamper == "edit-and-restore-mtime":  # same size, mode, mtime and directory: only the file's ctime moves
        _writable(victim)
        victim.write_text(victim.read_text().replace("report", "rEport"))
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
        victim.chmod(st.st_mode)
        after = victim.stat()
        assert (after.st_size, after.st_mode, after.st_mtime_ns) == (st.st_size, st.st_mode, st.st_mtime_ns)
    elif tamper == "chmod-writable":
        _writable(victim)
    elif tamper == "add-file":
        _writable(docs)
        (docs / "extra.txt").write_text("planted")
    elif tamper == "remove-file":
        _writable(docs)
        victim.unlink()
    else:  # the same bytes, mode and mtime under the same name, in a new inode
        _writable(docs)
        replacement = docs / ".new"
        replacement.write_text(victim.read_text())
        os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
        replacement.chmod(st.st_mode)
        os.replace(replacement, victim)

    with pytest.raises(WorldTamperedError, match="was modified after it was sealed"):
        worlds.verified_hash("w0")
    digest, built_now = worlds.ensure_built("w0")
    assert built_now and worlds.verified_hash("w0") == digest == worlds.audited_hash("w0")


def test_a_forged_seal_record_passes_the_cheap_check_and_is_caught_by_the_audit(worlds):
    """The honest limit: whoever can write the home can re-seal an edited world; the full re-hash still sees it."""
    world = worlds.world_dir("w0")
    victim = sorted((world / "docs").iterdir())[0]
    _writable(victim)
    victim.write_text("the secret is elsewhere\n")
    victim.chmod(victim.stat().st_mode & ~stat.S_IWUSR)
    seal_file = worlds.worlds_root / "w0.seal"
    seal = json.loads(seal_file.read_text())
    seal_file.write_text(json.dumps({**seal, "manifest": tree_manifest(world)}))

    assert worlds.verified_hash("w0") == seal["content_hash"], "the cheap check trusts the seal record"
    with pytest.raises(WorldTamperedError, match="was modified after it was sealed"):
        worlds.audited_hash("w0")
    digest, built_now = worlds.ensure_built("w0")  # a build re-hashes fully, so it rebuilds
    assert built_now and digest == seal["content_hash"] and worlds.audited_hash("w0") == digest
    assert "the secret is elsewhere" not in victim.read_text()


def test_a_world_sealed_before_seal_records_is_hashed_once_and_sealed(worlds):
    seal_file = worlds.worlds_root / "w0.seal"
    seal_file.unlink()
    recorded = (worlds.worlds_root / "w0.sha256").read_text()

    assert worlds.verified_hash("w0") == recorded
    assert json.loads(seal_file.read_text())["content_hash"] == recorded
    assert _read_bytes_of(lambda: worlds.verified_hash("w0")) < 64 * 1024
