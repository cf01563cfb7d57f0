"""What the sandbox's interpreter needs from the host: its runtime files, bound as one tree, and its modules' bytecode.

The sandbox holds only the interpreter, the shared libraries it and the stdlib's extension modules link, and the
standard library without site-packages (:func:`find_runtime`, cached per interpreter by :func:`runtime`). The
keeper binds them as one directory of hard links (:func:`runtime_root`), and the agent's modules are copied into
``/app`` with hash-checked bytecode (:func:`bytecode`): what a sandbox's start costs is on a step's critical path
when hundreds of trials start together (``docs/performance.md``). Everything is cached in the caller's own
``~/.cache/rl-assets`` (0700), never a shared temp dir, since it decides what every sandbox runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from rl_assets.sandbox.keeper import runtime_tree

_SYSCONFIG = (
    "import json, sysconfig; print(json.dumps([sysconfig.get_path(k) for k in "
    "('stdlib', 'platstdlib', 'purelib', 'platlib')]))"
)
Runtime = tuple[tuple[tuple[str, str], ...], tuple[str, ...], str]


RUNTIME_FORMAT = 2
"""Part of the runtime cache's key: a new format (2: without tkinter's libraries) finds the runtime again."""


@functools.cache
def runtime(interpreter: str) -> Runtime:
    """(binds, hidden dirs, interpreter), cached per user: finding the libraries costs seconds on a loaded machine.

    The cache is in the caller's own ``~/.cache/rl-assets`` (0700), never a shared temp dir, since it decides
    what is bound into every sandbox; it is keyed by the interpreter's and its stdlib's identity.
    """
    interpreter = os.path.realpath(interpreter)
    identity = f"{RUNTIME_FORMAT}|{interpreter}|{os.stat(interpreter).st_mtime_ns}|{sys.version}"
    key = hashlib.sha256(identity.encode()).hexdigest()
    cache = Path.home() / ".cache" / "rl-assets" / f"sandbox-runtime-{key[:16]}.json"
    with contextlib.suppress(OSError, ValueError):
        binds, hidden, cached = json.loads(cache.read_text())
        if all(os.path.exists(source) for source, _ in binds):
            return tuple(map(tuple, binds)), tuple(hidden), cached
    found = find_runtime(interpreter)
    with contextlib.suppress(OSError):
        cache.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging = cache.with_suffix(f".{os.getpid()}.tmp")
        staging.write_text(json.dumps(found))
        os.replace(staging, cache)
    return found


def find_runtime(interpreter: str) -> Runtime:
    """The interpreter, its shared libraries and those of the stdlib's extension modules, the stdlib.

    Not ``_tkinter``'s (Tk, X11, fonts: 18 of the 42 libraries this CPython links): no sandbox has a display,
    so tkinter could not run in one anyway, and every bind is a mount that bubblewrap remounts read-only after
    reading the whole mount table again (``benchmarks/sandbox_cpu.py``: 0.86x of the CPU per attempt).
    """
    binds = {interpreter: interpreter}
    paths = json.loads(
        subprocess.run([interpreter, "-I", "-S", "-c", _SYSCONFIG], capture_output=True, check=True).stdout
    )
    dynload = Path(paths[1], "lib-dynload")
    extensions = sorted(str(p) for p in dynload.glob("*.so") if not p.name.startswith("_tkinter"))
    ldd = subprocess.run(["ldd", interpreter, *extensions], capture_output=True, text=True).stdout
    for line in ldd.splitlines():  # the shared libraries of the interpreter and of the stdlib's extension modules
        match = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
        if match:
            binds[match.group(1)] = os.path.realpath(match.group(1))
    hidden: list[str] = []
    for stdlib in dict.fromkeys(paths[:2]):
        binds[stdlib] = os.path.realpath(stdlib)
        for site in (*paths[2:], os.path.join(stdlib, "site-packages")):
            if site.startswith(stdlib + os.sep) and os.path.isdir(site) and site not in hidden:
                hidden.append(site)
    return tuple((source, dest) for dest, source in binds.items()), tuple(hidden), interpreter


def _key(identity: object) -> str:
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]


def _built_once(name: str, build: Callable[[Path], bool]) -> Path | None:
    """``~/.cache/rl-assets/<name>``, made by ``build`` in a private staging directory and moved into place whole,
    so no process ever sees half of it (another may have moved the same one first). None where this uid has no
    cache of its own (another uid's home) or ``build`` said no."""
    target = Path.home() / ".cache" / "rl-assets" / name
    try:
        if target.is_dir():
            return target
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{name}.", dir=target.parent))
    except OSError:
        return None
    try:
        if not build(staging):
            return None
        with contextlib.suppress(OSError):  # another process made the same one first
            os.replace(staging, target)
    except OSError:
        return None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target if target.is_dir() else None


@functools.cache
def runtime_root(binds: tuple[tuple[str, str], ...]) -> str | None:
    """A directory holding the runtime's files at their own paths, and an empty directory wherever one of its
    directories (the stdlib) is bound: what the keeper binds whole instead of a mount per file.

    Its files are hard links to the runtime's (copies where a link is refused: another filesystem, or a
    non-root caller under ``fs.protected_hardlinks``), so it costs no space as root. Built once per runtime in
    the caller's own ``~/.cache/rl-assets`` (0700; the tree itself 0755, for the sandbox's uid), keyed by each
    file's identity (device, inode, size, mtime): an upgraded library is a new tree. None where it cannot be
    built (a home this uid cannot write): the keeper then binds each file, as before.
    """
    placed, _ = runtime_tree([list(b) for b in binds])
    identity: list[object] = [RUNTIME_FORMAT]
    for source, rel in placed:
        st = os.stat(source)
        identity.append([source, rel, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns])

    def build(staging: Path) -> bool:
        staging.chmod(0o755)
        for source, rel in placed:
            point = staging / rel
            for parent in reversed(point.relative_to(staging).parents[:-1]):
                if not (staging / parent).is_dir():
                    (staging / parent).mkdir()
                    (staging / parent).chmod(0o755)
            if os.path.isdir(source):
                point.mkdir()
                point.chmod(0o755)
                continue
            try:
                os.link(source, point)
            except OSError:
                shutil.copy2(source, point)
                point.chmod(0o755 if os.access(source, os.X_OK) else 0o644)
        return True

    root = _built_once(f"sandbox-root-{_key(identity)}", build)
    return None if root is None else str(root)


_COMPILE = (
    "import json, py_compile, sys\n"
    "for source, pyc, shown in json.loads(sys.stdin.read()):\n"
    "    py_compile.compile(source, pyc, shown, doraise=True, "
    "invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)\n"
    "print(sys.implementation.cache_tag)\n"
)


@functools.cache
def bytecode(files: tuple[tuple[str, str], ...], entry: str, interpreter: str) -> tuple[tuple[str, str], ...]:
    """The agent's modules compiled once by its own interpreter, as (host ``.pyc``, path under ``/app``) pairs.

    ``/app`` is a fresh read-only copy per attempt, so without them every sandbox compiled the agent's modules
    from source (the reference agent's: about 3 ms of its 25 ms start). They are hash-checked: the sandbox's
    interpreter uses one only if it was compiled from the very source copied beside it, and compiles any other.
    Cached in the caller's own ``~/.cache/rl-assets`` (0700), like the runtime, keyed by the interpreter and the
    sources' identities. The entry script is compiled by every start (Python never reads a script's bytecode).
    None of them where they cannot be compiled (a syntax error: the agent then fails in its sandbox, saying so)
    or cached (a home this uid cannot write): the sandbox compiles them, as before.
    """
    modules = [(source, rel) for source, rel in files if rel.endswith(".py") and rel != entry]
    if not modules:
        return ()
    interpreter = os.path.realpath(interpreter)
    identity: list[object] = [RUNTIME_FORMAT, interpreter, os.stat(interpreter).st_mtime_ns, sys.version]
    identity += [(source, rel, os.stat(source).st_mtime_ns, os.stat(source).st_size) for source, rel in modules]

    def build(staging: Path) -> bool:
        jobs = [(source, str(staging / f"{i}.pyc"), f"/app/{rel}") for i, (source, rel) in enumerate(modules)]
        done = subprocess.run(
            [interpreter, "-I", "-S", "-c", _COMPILE], input=json.dumps(jobs), capture_output=True, text=True
        )
        (staging / "cache_tag").write_text(done.stdout.strip())
        return done.returncode == 0

    cache = _built_once(f"agent-bytecode-{_key(identity)}", build)
    try:
        tag = None if cache is None else (cache / "cache_tag").read_text()
    except OSError:
        tag = None
    if cache is None or not tag:
        return ()
    return tuple(
        (str(cache / f"{i}.pyc"), str(Path(rel).parent / "__pycache__" / f"{Path(rel).stem}.{tag}.pyc"))
        for i, (_, rel) in enumerate(modules)
    )
