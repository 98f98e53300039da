"""What of the machine a worker sees: a list of what is allowed, not of secrets to leave out.

Bubblewrap binds it (full isolation) and the worker's own root mirrors it (container
isolation, graders/sandbox/rootfs.py):

- the system folders (SYSTEM_PATHS);
- the interpreter: the `bin`, `lib*` and `include` folders of its installation and of its
  virtual environment (and `pyvenv.cfg`), their site folders emptied;
- of every folder on the worker's import path (the site folders, and the folders their .pth
  files add), only the files of the distributions installed there (as their RECORD lists them),
  the .pth files, and the packages the worker imports that no distribution there lists: the
  engine (`graders`, from an editable install or a checkout a .pth names) and the packages of its
  task modules;
- of the grader's own distribution, only the engine, never the rest (the wheel's `reference/`);
  and of the engine's packs only those of the worker's task modules (another pack's solution may
  share lines with this one's);
- the caller's `readable_paths` (a feature cache, an encoder), with the folders their links point
  into.

So a folder on the path shows nothing else of itself: a checkout's `.git` (whose history holds
the solution: the empty template scored full marks reading it), its tests, fixtures, reference,
docs, a kit's other files. A folder that is on the path but inside something shown (the site
folder of a virtual environment inside its `lib`) is `hidden`: emptied but for what is shown
inside it. The secrets the grader knows of are masked on top, wherever they lie in what is shown.
A package installed without a record of its files (some distributions' system packages) is not
there: the worker then fails to import it, and `grade doctor` says so.
"""

from __future__ import annotations

import functools
import glob
import importlib.metadata
import importlib.util
import os
import site
import sys
from dataclasses import dataclass
from pathlib import PurePosixPath

import graders

from .audit import pth_folders

# What every program needs, shown read-only.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
# What of an installation prefix the interpreter reads.
INSTALLATION = ("bin", "lib", "lib32", "lib64", "include", "pyvenv.cfg")
ENGINE = "graders"


@dataclass(frozen=True)
class Exposure:
    """`shown`: paths shown whole at their own path, but for the `hidden` folders inside them,
    emptied but for the shown paths inside those. Real paths, parents first."""

    shown: tuple[str, ...]
    hidden: tuple[str, ...]

    def visible(self, path: str) -> bool:
        """Whether `path` is there for the worker: the deepest shown or hidden path above it
        (or it) decides, hidden where both are."""
        rules = [(len(place), shows) for places, shows in ((self.shown, True), (self.hidden, False))
                 for place in places if inside(path, place)]
        if not rules:
            return False
        deepest = max(depth for depth, _ in rules)
        return all(shows for depth, shows in rules if depth == deepest)


def inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.lru_cache(maxsize=16)
def exposure(readable_paths: tuple[str, ...] = (), task_modules: tuple[str, ...] = ()) -> Exposure:
    """What a worker that imports `task_modules` and may read `readable_paths` sees."""
    shown: set[str] = set()
    hidden: set[str] = set()
    installations = {os.path.realpath(prefix) for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for prefix in installations:
        shown.update(path for name in INSTALLATION if os.path.lexists(path := os.path.join(prefix, name)))
        # Its site folders show only the distributions of those on the worker's path (below).
        hidden.update(os.path.realpath(folder) for folder in glob.glob(os.path.join(glob.escape(prefix), "lib*", "python*", "*-packages")))
    shown.add(os.path.dirname(os.path.realpath(sys.executable)))
    engine, packs = engine_folders(task_modules)
    for folder in import_path():
        hidden.add(folder)
        shown.update(os.path.join(folder, name) for name in distributed_entries(folder))
    shown.add(engine)
    hidden.add(os.path.join(engine, "packs"))
    shown.update(packs)
    for module in task_modules:
        top = _package_folder(module.partition(".")[0])
        if top is not None and top != engine:
            shown.add(top)
    for path in readable_paths:
        shown.update(with_link_targets(path))
    # Inside a system folder, only what a hidden folder there empties needs showing again.
    shown = {path for path in shown if not any(inside(path, system) for system in SYSTEM_PATHS)
             or any(inside(path, folder) and path != folder for folder in hidden)}
    return Exposure(tuple(sorted(shown)), tuple(sorted(hidden)))


def import_path() -> list[str]:
    """The folders the worker imports from besides its standard library (it runs with -s: no
    user site): the site folders and what their .pth files add."""
    folders = site.getsitepackages()
    candidates = [*folders, *(added for folder in folders for added in pth_folders(folder))]
    return sorted({os.path.realpath(folder) for folder in candidates if os.path.isdir(folder)})


def engine_folders(task_modules) -> tuple[str, list[str]]:
    """The engine's folder and the folders (and the `__init__.py`) of the packs inside it that
    `task_modules` belong to."""
    engine = os.path.dirname(os.path.realpath(graders.__file__))
    packs = os.path.join(engine, "packs")
    needed = [os.path.join(packs, "__init__.py")] if os.path.exists(os.path.join(packs, "__init__.py")) else []
    for module in task_modules:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        origin = os.path.realpath(spec.origin) if spec is not None and spec.origin else ""
        if inside(origin, packs) and origin != packs:
            needed.append(os.path.join(packs, os.path.relpath(origin, packs).split(os.sep)[0]))
    return engine, sorted(set(needed))


def _package_folder(name: str) -> str | None:
    """The folder (or file) of the top-level package or module `name`, where the grader finds it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return os.path.realpath(next(iter(spec.submodule_search_locations)))
    return os.path.realpath(spec.origin) if spec.origin and os.path.exists(spec.origin) else None


def distributed_entries(folder: str) -> list[str]:
    """The names in `folder` that belong to the distributions installed there (each one's
    metadata folder and the first part of every file its RECORD lists; without a RECORD, its
    top_level.txt), and its .pth files. The grader's own distribution gives none but its
    metadata and its .pth (and an editable install's finder): the engine is added filtered."""
    names = {os.path.basename(path) for path in glob.glob(os.path.join(glob.escape(folder), "*.pth"))}
    for distribution in importlib.metadata.distributions(path=[folder]):
        metadata = getattr(distribution, "_path", None)
        if metadata is not None:
            names.add(os.path.basename(os.fspath(metadata)))
        tops = _top_names(distribution)
        if tops is None:
            names.update((distribution.read_text("top_level.txt") or "").split())
            continue
        if ENGINE in tops:  # the grader's own: its files beside the engine are not the worker's
            tops = {top for top in tops if top.endswith((".dist-info", ".pth"))
                    or (top.endswith(".py") and not os.path.isdir(os.path.join(folder, top)))}
        names.update(top for top in tops if top not in ("..", "") and not top.startswith("/"))
    return sorted(name for name in names if os.path.lexists(os.path.join(folder, name)))


def _top_names(distribution: importlib.metadata.Distribution) -> set[str] | None:
    """The first part of every path the distribution's RECORD lists (read as text: parsing
    torch's into paths took most of a second), or of its other list of files; None without one."""
    record = distribution.read_text("RECORD")
    if record is not None:
        return {line.split(",", 1)[0].strip('"').split("/", 1)[0] for line in record.splitlines() if line.strip()}
    files = distribution.files
    return None if files is None else {PurePosixPath(file).parts[0] for file in files if PurePosixPath(file).parts}


def with_link_targets(path: str | os.PathLike) -> list[str]:
    """`path` and the folders that the symbolic links inside it point into (a Hugging Face
    cache's snapshot links each file to its blob folder)."""
    root = os.path.realpath(path)
    if not os.path.exists(root):
        return []
    found = {root}
    for directory, _, files in os.walk(root):
        for name in files:
            if os.path.islink(os.path.join(directory, name)):
                target = os.path.realpath(os.path.join(directory, name))
                if os.path.exists(target):
                    found.add(os.path.dirname(target))
    return sorted(found)
