"""Assignment packs: everything the engine grades that belongs to one homework.

A pack is a folder holding an `assignment.toml` manifest and the Python modules it names (its
checks, worker tasks and oracle computations); its solution and student template are folders
of the project that the manifest names. The engine (graders/) takes every module name, part,
point, diagnosis and task of an assignment from here and knows none itself. docs/authoring.md
walks through writing one.

Packs are found in graders/packs/ (each a package, `graders.packs.<name>`), or given by the path
of their folder (`grade --assignment path/to/pack`), which is then imported as the package
`_assignment_<name>_<hash of the folder>`. Paths in a manifest are relative to the pack's folder.

The assignment a command grades: `--assignment NAME|PATH` where it is given, otherwise the only
installed pack, otherwise the pack whose files a student's folder or zip holds (`for_submission`).
The command line decides it once (graders/cli.py) and passes the `Assignment` down as a value:
no function of the engine reads a process-wide choice, and a child process is given the pack's
folder (a batch job's spec, a worker's packages).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

from graders.scoring import Part, Rubric

PACKS_DIR = Path(__file__).resolve().parent / "packs"
MANIFEST = "assignment.toml"


class PackError(ValueError):
    """A pack that cannot be found or whose manifest is not usable; the message names the file and the entry."""


@dataclass(frozen=True, eq=False)  # one object per pack (load caches it): hashed by identity
class Assignment:
    name: str
    title: str
    folder: Path  # the pack's folder, holding assignment.toml
    package: str  # the import name of the pack's folder
    rubric: Rubric
    modules: dict[str, tuple[str, ...]]  # {file a student hands in: the public names graded in it}
    reference_dir: Path
    template_dir: Path
    check_modules: tuple[str, ...]  # import names
    task_modules: tuple[str, ...]  # import names of the modules registering worker tasks
    oracle_module: str | None  # computations the checks ask the oracle for besides reference functions
    answers_file: str | None  # the questions file, read by the grader (never run)
    questions: dict[tuple[str, str], tuple[str, ...]]  # {(section, key): other ids a notebook may head it with}
    diagnoses: dict[str, str]
    secrets: tuple[Path, ...]  # what the worker must never read, besides the reference
    bundle_name: str  # the student bundle's top folder and zip name
    grader_options: str | None  # a module adding the pack's own command-line options (fine-tuning)
    mutants_module: str | None  # mistakes and alternatives the checks are tested with (never shipped to students)
    space_module: str | None = None  # the contract's argument space: a Contract per callable (graders/checks/space.py)
    # distributions the pack's checks, tasks or oracle import beyond the engine's own
    # (graders/dependencies.py): the bundle and the Gradescope kit install these too
    runtime_dependencies: tuple[str, ...] = ()

    @property
    def golden_dir(self) -> Path:
        return self.folder / "golden"

    @property
    def expected_files(self) -> tuple[str, ...]:
        return tuple(self.modules)

    @property
    def mutants_path(self) -> Path | None:
        """The file or folder of the pack's mutants: edits of the solution, kept from students and workers."""
        if not self.mutants_module:
            return None
        place = self.folder.joinpath(*self.mutants_module.removeprefix(f"{self.package}.").split("."))
        return place if place.is_dir() else place.with_suffix(".py")

    @property
    def installed(self) -> bool:
        return self.package.startswith("graders.packs.")

    def ensure_importable(self) -> None:
        if not self.installed:
            import_package(self.package, self.folder)

    def reference_module(self, module: str) -> ModuleType:
        """A module of the solution, imported in this (trusted) process under a name of its own."""
        package = f"_reference_{self.name}_{_digest(self.reference_dir)}"
        import_package(package, self.reference_dir)
        return importlib.import_module(f"{package}.{module}")

    def all_diagnoses(self) -> dict[str, str]:
        """The engine's diagnoses and the pack's: every id its checks may name."""
        from graders.diagnoses import DIAGNOSES

        return {**DIAGNOSES, **self.diagnoses}

    def registry(self) -> dict[str, list]:
        """{part id: [Check]} of this pack, in its manifest's order of parts."""
        from graders.checks.framework import REGISTRY

        modules = set(self.import_checks())
        ours = {part: [c for c in checks if c.func.__module__ in modules] for part, checks in REGISTRY.items()}
        order = [part.id for part in self.rubric.parts] + list(REGISTRY)  # the manifest's order first
        return {part: ours[part] for part in dict.fromkeys(order) if ours.get(part)}

    def import_checks(self) -> tuple[str, ...]:
        """Import the pack's checks (registering them) and its oracle computations."""
        _register_diagnoses(self)
        self.ensure_importable()
        for name in (*self.check_modules, *([self.oracle_module] if self.oracle_module else [])):
            importlib.import_module(name)
        return self.check_modules

    def import_tasks(self) -> None:
        """Register the pack's worker tasks here too (the consistency check and in-process tests read them)."""
        self.ensure_importable()
        for name in self.task_modules:
            importlib.import_module(name)

    def computations(self) -> dict:
        if not self.oracle_module:
            return {}
        self.ensure_importable()
        return dict(getattr(importlib.import_module(self.oracle_module), "COMPUTATIONS", {}))

    def contracts(self) -> list:
        """The pack's `Contract`s (its space module's CONTRACTS): every callable a student writes."""
        return list(getattr(self._space(), "CONTRACTS", []))

    def given_names(self) -> dict[str, str]:
        """{"module.Name": why no contract is needed} for public names the template gives whole."""
        return dict(getattr(self._space(), "GIVEN", {}))

    def _space(self) -> ModuleType | None:
        if not self.space_module:
            return None
        self.ensure_importable()
        return importlib.import_module(self.space_module)

    def options_module(self) -> ModuleType | None:
        if not self.grader_options:
            return None
        self.ensure_importable()
        return importlib.import_module(self.grader_options)


# ------------------------------------------------------------------------------ loading

def installed() -> dict[str, Path]:
    """{name: folder} of the packs in graders/packs/."""
    if not PACKS_DIR.is_dir():
        return {}
    return {path.parent.name: path.parent for path in sorted(PACKS_DIR.glob(f"*/{MANIFEST}"))}


def load(name_or_path: str | os.PathLike) -> Assignment:
    """The pack named so in graders/packs/, or the pack in the folder at that path."""
    text = str(name_or_path)
    packs = installed()
    if text in packs:
        return _load_folder(packs[text], installed=True)
    folder = Path(text).expanduser()
    if (folder / MANIFEST).is_file():
        folder = folder.resolve()
        return _load_folder(folder, installed=folder.parent == PACKS_DIR)
    known = ", ".join(packs) or "none"
    raise PackError(f"no assignment {text!r}: give the name of an installed pack ({known}) "
                    f"or the path of a folder holding {MANIFEST}")


def resolve(name_or_path: str | os.PathLike | None) -> Assignment:
    """The pack a command was given (`--assignment NAME|PATH`), else the only installed pack."""
    if name_or_path is not None:
        return load(name_or_path)
    packs = installed()
    if len(packs) == 1:
        return load(next(iter(packs)))
    raise PackError(f"{len(packs)} assignments are installed ({', '.join(packs) or 'none'}): "
                    "choose one with --assignment NAME")


def given_or_only(name_or_path: str | os.PathLike | None) -> Assignment | None:
    """The pack given, else the only installed pack, else None (what needs no pack, such as
    checking the sandbox, goes on without one)."""
    if name_or_path is None and len(installed()) != 1:
        return None
    return resolve(name_or_path)


def given_or_all(name_or_path: str | os.PathLike | None) -> list[Assignment]:
    """The pack given, else every installed pack (`grade build` builds them all)."""
    return [load(name_or_path)] if name_or_path is not None else [load(name) for name in installed()]


class UnrecognisedSubmission(PackError):
    """A hand-in in which no installed pack's files or names are found (several packs being
    installed and none given). `reason` says why in a rejection's words, found by reading it as
    each pack's hand-in (graders/ingest.py): a damaged zip, an empty one, a notebook that is not
    JSON, or none of any pack's files."""

    def __init__(self, message: str, path: Path, packs: list[str]):
        super().__init__(message)
        self.path, self.packs = path, packs

    @functools.cached_property
    def reason(self) -> str:
        from graders.ingest import rejection_as

        reasons = {name: rejection_as(self.path, load(name)) for name in self.packs}
        said = list(dict.fromkeys(reason for reason in reasons.values() if reason))
        if len(said) == 1 and all(reasons.values()):
            return said[0]
        return "; ".join(f"as a {name} hand-in: {reason or 'it would be graded'}" for name, reason in reasons.items())


def for_submission(path: str | os.PathLike, given: str | os.PathLike | None = None) -> Assignment:
    """The assignment a student's folder, zip or notebook belongs to: the pack given, else the only
    installed pack, else the one whose files (in the folder that ingest would grade: the shallowest
    one holding them) and, in a notebook, whose graded names it holds the most of (a tie asks for
    --assignment; none of them raises UnrecognisedSubmission, whose reason says why)."""
    packs = installed()
    if given is not None or len(packs) <= 1:
        return resolve(given)
    files, defined = _contents(Path(path))
    overlap = {}
    for name in packs:
        pack = load(name)
        graded = {n for names in pack.modules.values() for n in names}
        overlap[name] = len(_found_files(files, set(pack.expected_files)) | (defined & graded))
    best = max(overlap.values())
    candidates = [name for name, count in overlap.items() if count == best]
    if best == 0:
        raise UnrecognisedSubmission(
            f"{path} holds no file or graded name of the installed assignments ({', '.join(packs)}): "
            "choose one with --assignment NAME", Path(path), list(packs))
    if len(candidates) > 1:
        raise PackError(f"{path} could belong to {' or '.join(candidates)}: choose with --assignment NAME")
    return load(candidates[0])


def _found_files(files: list[PurePosixPath], expected: set[str]) -> set[str]:
    """The expected files in the shallowest folder holding any of them: the folder ingest grades."""
    holding = [file for file in files if file.name in expected]
    if not holding:
        return set()
    shallowest = min(len(file.parts) for file in holding)
    return {file.name for file in holding if len(file.parts) == shallowest}


def _contents(path: Path) -> tuple[list[PurePosixPath], set[str]]:
    """(the paths of a folder's or zip's files, relative to it; the names its notebooks define),
    read behind ingest's guards (a bounded walk, the zip's directory and at most a few notebooks
    of it, nothing extracted to disk), or a notebook's names. Notebooks are parsed, never run."""
    from graders.ingest import hand_in_listing
    from graders.notebook import defined_names

    if path.suffix == ".ipynb" and path.is_file():
        return [], defined_names(path)
    return hand_in_listing(path)


def import_package(name: str, folder: Path) -> None:
    """Import the package in `folder` as `name` (its modules then import each other relatively)."""
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, Path(folder) / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    if spec is None or spec.loader is None or not (Path(folder) / "__init__.py").is_file():
        raise PackError(f"{folder}: not a Python package (it needs an __init__.py)")
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    try:
        spec.loader.exec_module(package)
    except BaseException:
        del sys.modules[name]
        raise


_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_DISTRIBUTION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a bare name: the version is the lock's


def _digest(folder: Path) -> str:
    """A short name part for `folder`: two copies of one pack (or of one reference) in different
    folders are imported apart."""
    return hashlib.sha256(str(folder).encode()).hexdigest()[:8]


@functools.cache
def _load_folder(folder: Path, installed: bool) -> Assignment:
    path = folder / MANIFEST
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise PackError(f"{path}: not readable TOML ({error})") from None
    where = _Where(path)
    head = where.table(data, "assignment")
    parts = where.table(data, "parts")
    modules = where.table(data, "modules")
    answers = data.get("answers", {})
    bundle = data.get("bundle", {})
    runtime = data.get("dependencies", {}).get("runtime", [])
    if not isinstance(runtime, list) or not all(isinstance(name, str) and _DISTRIBUTION.match(name) for name in runtime):
        raise PackError(f"{path}: [dependencies] runtime must be a list of distribution names (\"transformers\")")

    name = where.text(head, "name", "assignment")
    if not _NAME.match(name):
        raise PackError(f"{path}: [assignment] name {name!r} must be lower-case letters, digits and _")
    package = f"graders.packs.{folder.name}" if installed else f"_assignment_{name}_{_digest(folder)}"

    def module(entry: str) -> str:
        return f"{package}.{entry}"

    def pack_path(key: str) -> Path:
        value = head.get(key)
        if not isinstance(value, str):
            raise PackError(f"{path}: [assignment] {key} must be a path relative to the pack's folder")
        return (folder / value).resolve()

    rubric = Rubric(int(head.get("seed", 0)), [
        Part(part_id, where.text(spec, "title", f"parts.{part_id}"), where.text(spec, "module", f"parts.{part_id}"),
             float(where.number(spec, "points", f"parts.{part_id}")), dict(spec.get("weights", {})),
             bool(spec.get("own_worker", False)), tuple(spec.get("preload", ())))
        for part_id, spec in parts.items()], hashlib.sha256(raw).hexdigest())
    for part in rubric.parts:
        file = part.module if "." in part.module else f"{part.module}.py"
        if file not in modules:
            raise PackError(f"{path}: [parts.{part.id}] module {part.module!r} is not in [modules]")
    answers_file = answers.get("file")
    if answers_file is not None and answers_file not in modules:
        raise PackError(f"{path}: [answers] file {answers_file!r} is not in [modules]")
    return Assignment(
        name=name, title=where.text(head, "title", "assignment"), folder=folder, package=package, rubric=rubric,
        modules={file: tuple(names) for file, names in modules.items()},
        reference_dir=pack_path("reference"), template_dir=pack_path("template"),
        check_modules=tuple(module(name) for name in head.get("checks", ())),
        task_modules=tuple(module(name) for name in head.get("tasks", ())),
        oracle_module=module(head["oracle"]) if head.get("oracle") else None,
        answers_file=answers_file,
        questions={(section, key): tuple(aliases) for section, keys in answers.get("questions", {}).items()
                   for key, aliases in keys.items()},
        diagnoses=_read_diagnoses(folder, head.get("diagnoses")),
        secrets=tuple((folder / p).resolve() for p in head.get("secrets", ())),
        bundle_name=bundle.get("name", f"{name}-homework"),
        grader_options=module(head["options"]) if head.get("options") else None,
        mutants_module=module(head["mutants"]) if head.get("mutants") else None,
        space_module=module(head["space"]) if head.get("space") else None,
        runtime_dependencies=tuple(runtime))


@dataclass
class _Where:
    path: Path

    def table(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key)
        if not isinstance(value, dict) or not value:
            raise PackError(f"{self.path}: [{key}] is missing or empty")
        return value

    def text(self, data: dict[str, Any], key: str, table: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise PackError(f"{self.path}: [{table}] {key} must be a non-empty string")
        return value

    def number(self, data: dict[str, Any], key: str, table: str) -> float:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise PackError(f"{self.path}: [{table}] {key} must be a number, 0 or more")
        return value


def _read_diagnoses(folder: Path, name: str | None) -> dict[str, str]:
    if not name:
        return {}
    path = folder / name
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise PackError(f"{path}: not readable ({error})") from None
    entries = {}
    for group in data.values():  # tables group the catalogue by topic; ids are unique across them
        for key, text in (group.items() if isinstance(group, dict) else ()):
            if not isinstance(text, str):
                raise PackError(f"{path}: diagnosis {key!r} must be a string")
            entries[key] = text
    return entries


def _register_diagnoses(assignment: Assignment) -> None:
    """Give the pack's checks its catalogue of diagnoses (results read their text from it)."""
    from graders.checks.framework import CATALOGUES

    CATALOGUES[assignment.package] = assignment.diagnoses
