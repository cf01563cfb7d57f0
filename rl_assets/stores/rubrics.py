"""The rubric registry: built-in rubrics plus JSON (or TOML) files in the home's ``rubrics/`` folder.

A rubric is identified by its content hash, and a name stands for one content
forever: the first time a rubric is used its hash is pinned in Postgres, and a
file that later reuses the name with other weights is refused (a changed
rubric needs a new name, e.g. ``v3``), so results recorded under a name never
silently change meaning. A file is ``<name>.json`` (or ``<name>.toml``) holding
the rubric's fields: the reference judge's weights, or an LLM judge's
``template`` and ``scale`` (:class:`~rl_assets.domain.judge_rubric.JudgeRubric`);
an invalid file is reported by name and never used.
"""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from rl_assets.domain.hashing import content_hash
from rl_assets.domain.judge_rubric import JudgeRubric
from rl_assets.domain.models import Rubric
from rl_assets.domain.names import InvalidNameError, check_rubric_name, shown
from rl_assets.domain.rubrics import BUILTIN_RUBRICS, AnyRubric, UnknownRubricError
from rl_assets.domain.validation import in_words

if TYPE_CHECKING:  # the registry is read before any service starts; the database driver (and Dagster) can wait
    from rl_assets.stores.database import Database

MAX_RUBRIC_FILE_BYTES = 64 * 1024
"""A rubric is four fields; a bigger file is not a rubric, and is not read."""
_FIELDS = ", ".join(Rubric.model_fields)
_JUDGE_FIELDS = ", ".join(f for f, i in JudgeRubric.model_fields.items() if i.is_required())
SUFFIXES = (".json", ".toml")


class RubricError(ValueError):
    """A rubric file is invalid, or conflicts with a rubric of the same name.

    Messages name the file, the field and what is wrong with it, never the
    file's bytes: a file can be any file the process can read.
    """


def _not_json_constant(token: str) -> float:
    raise ValueError(f"{token} is not a JSON number")


def _read_json(path: Path) -> object:
    try:
        if path.stat().st_size > MAX_RUBRIC_FILE_BYTES:
            raise RubricError(f"{path.name}: larger than {MAX_RUBRIC_FILE_BYTES} bytes; not a rubric file")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RubricError(f"{path.name}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RubricError(f"{path.name}: not readable as UTF-8 text ({type(err).__name__})") from None
    if path.suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise RubricError(f"{path.name}: not TOML ({err})") from None
    try:
        return json.loads(text, parse_constant=_not_json_constant)  # the stdlib would accept NaN and Infinity
    except json.JSONDecodeError as err:  # its message is positional only ("Expecting value: line 1 column 2")
        raise RubricError(f"{path.name}: not JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except ValueError as err:
        raise RubricError(f"{path.name}: not JSON ({err})") from None


def parse_rubric_file(path: Path) -> AnyRubric:
    """The rubric in ``path``, or a :class:`RubricError` naming the file and the problem.

    A file with a ``template`` is an LLM judge's rubric; any other is the reference judge's weights.
    """
    data = _read_json(path)
    if not isinstance(data, dict):
        raise RubricError(
            f"{path.name}: must be a JSON object with the fields {_FIELDS} (or, for an LLM judge, {_JUDGE_FIELDS})"
        )
    kind: type[Rubric] | type[JudgeRubric] = JudgeRubric if "template" in data else Rubric
    try:
        rubric = kind.model_validate(data, strict=True)  # a weight must be a JSON number, not "1.5" or true
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "rubric"
        raise RubricError(f"{path.name}: {field}: {in_words(first)}") from None
    if path.stem != rubric.name:
        raise RubricError(f"{path.name}: the file must be named after its rubric ({rubric.name}{path.suffix})")
    return rubric


class RubricRegistry:
    def __init__(self, folder: Path, db: Database | None = None) -> None:
        self.folder = folder
        self.db = db
        self._pinned: set[tuple[str, str]] = set()
        """The (name, hash) pairs the database has confirmed: a pin is never changed or removed, so a confirmed
        one holds for good, and a rollout run's trials (each looking its rubric up) ask once, not a transaction
        each. A file changed since has another hash, which is asked again (and refused)."""

    def _files(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted(p for suffix in SUFFIXES for p in self.folder.glob(f"*{suffix}"))

    def _file(self, name: str) -> Path | None:
        """The registry's file of rubric ``name`` (a name has one file: two are refused), or None."""
        found = [self.folder / f"{name}{suffix}" for suffix in SUFFIXES if (self.folder / f"{name}{suffix}").exists()]
        if len(found) > 1:
            raise RubricError(f"{name}: both {found[0].name} and {found[1].name} exist; keep one")
        return found[0] if found else None

    def problems(self) -> list[str]:
        """Why each unusable file in the folder is unusable."""
        out = []
        for path in self._files():
            try:
                self._check_builtin_clash(parse_rubric_file(path))
            except RubricError as err:
                out.append(str(err))
        return out

    @staticmethod
    def _check_builtin_clash(rubric: AnyRubric) -> None:
        builtin = BUILTIN_RUBRICS.get(rubric.name)
        if builtin is not None and builtin != rubric:
            raise RubricError(f"{rubric.name}.json: {rubric.name!r} is a built-in rubric with other weights")

    def all(self) -> dict[str, AnyRubric]:
        """Every usable rubric by name (built-ins first); unusable files are left out."""
        rubrics = dict(BUILTIN_RUBRICS)
        for path in self._files():
            try:
                rubric = parse_rubric_file(path)
                self._check_builtin_clash(rubric)
            except RubricError:
                continue
            rubrics.setdefault(rubric.name, rubric)
        return rubrics

    def get(self, name: str) -> AnyRubric:
        """The rubric called ``name``, pinned to its hash; a clear error if unknown, invalid or changed.

        Every rubric lookup (CLI, launchpad, run tags, the audit) comes here,
        and the name is checked against its pattern before it names a file.
        """
        try:
            check_rubric_name(name)
        except InvalidNameError as err:
            raise RubricError(f"rubric name {shown(name)}: {err}") from None
        path = self._file(name)
        if name in BUILTIN_RUBRICS:
            rubric = BUILTIN_RUBRICS[name]
            if path is not None:
                self._check_builtin_clash(parse_rubric_file(path))
        elif path is not None:
            rubric = parse_rubric_file(path)
        else:
            known = ", ".join(sorted(self.all()))
            raise UnknownRubricError(f"unknown rubric {name!r} (known: {known})")
        self._pin(rubric)
        return rubric

    def check(self, source: Path) -> AnyRubric:
        """The rubric in ``source`` if it can be added (the file alone, and against the folder); nothing changes."""
        rubric = parse_rubric_file(source)
        self._check_builtin_clash(rubric)
        target = self._file(rubric.name)
        if target is not None and parse_rubric_file(target) != rubric:
            raise RubricError(f"{source.name}: a different rubric named {rubric.name!r} is already registered")
        return rubric

    def add(self, source: Path) -> AnyRubric:
        """Validate ``source`` and write it into the registry as JSON; nothing changes if it is refused."""
        rubric = self.check(source)
        target = self.folder / f"{rubric.name}.json"
        self._pin(rubric)
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._file(rubric.name) is None:  # what was validated is written, not whatever the source holds by now
            fd, partial = tempfile.mkstemp(dir=self.folder, prefix=f".{target.name}.", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(rubric.model_dump_json(indent=2) + "\n")
            os.replace(partial, target)
        return rubric

    def version(self) -> str:
        """One hash of every usable rubric: what the ``rubrics`` source asset reports as its data version."""
        return content_hash({name: r.content_hash for name, r in self.all().items()})

    def _pin(self, rubric: AnyRubric) -> None:
        if self.db is None or (rubric.name, rubric.content_hash) in self._pinned:
            return
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO rl_rubrics (name, content_hash, rubric) VALUES (%s, %s, %s) ON CONFLICT (name) DO NOTHING",
                (rubric.name, rubric.content_hash, rubric.model_dump_json()),
            )
            cur.execute("SELECT content_hash FROM rl_rubrics WHERE name = %s", (rubric.name,))
            pinned = cur.fetchone()[0]
        if pinned != rubric.content_hash:
            raise RubricError(
                f"rubric {rubric.name!r} was first used with hash {pinned}, and its file now has other weights "
                f"(hash {rubric.content_hash}); give the changed rubric a new name"
            )
        self._pinned.add((rubric.name, rubric.content_hash))
