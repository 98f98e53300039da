"""Mutants and alternatives: small edits of an assignment's reference that its checks must tell apart.

A Mutant is a realistic student mistake: graded, it must lose points in its own part, and
should be named by `diagnosis`. An Alternative is a different correct implementation: it must
get full marks in every part it touches. A pack lists them in the module its manifest names
under `mutants` (`MUTANTS` and `ALTERNATIVES`); they hold solution text, so they never go into
a student bundle. tests/test_mutation.py grades the course's; docs/authoring.md shows how to
write them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graders.assignment import Assignment


@dataclass(frozen=True)
class Edit:
    file: str  # a module of the reference, e.g. "model.py"
    find: str  # exact text that occurs once in the reference file
    replace: str


@dataclass(frozen=True)
class Mutant:
    id: str
    part: str  # the rubric part that must lose points
    edits: tuple
    diagnosis: str | None = None  # the diagnosis id a careful TA would give (None: no diagnosis expected)


def one_edit(id: str, part: str, file: str, find: str, replace: str, diagnosis: str | None) -> Mutant:
    """A mutant made of a single edit (most are)."""
    return Mutant(id, part, (Edit(file, find, replace),), diagnosis)


@dataclass(frozen=True)
class Alternative:
    id: str
    parts: tuple  # rubric parts that must keep full marks
    edits: tuple
    notes: str = field(default="")


def apply_edits(folder: str | Path, edits: Iterable[Edit]) -> None:
    """Apply edits in place to a copy of the reference in `folder`; each `find` must occur exactly once."""
    for edit in edits:
        path = Path(folder) / edit.file
        text = path.read_text()
        count = text.count(edit.find)
        if count != 1:
            raise AssertionError(f"{edit.file}: {edit.find!r} occurs {count} times, expected once")
        path.write_text(text.replace(edit.find, edit.replace))


def collect(assignment: Assignment) -> tuple[list[Mutant], list[Alternative]]:
    """The pack's mutants and alternatives: from its `mutants` module, or from every module of
    that package."""
    if not assignment.mutants_module:
        return [], []
    assignment.ensure_importable()
    root = importlib.import_module(assignment.mutants_module)
    modules = [root] + [importlib.import_module(f"{root.__name__}.{info.name}")
                        for info in pkgutil.iter_modules(getattr(root, "__path__", []))]
    mutants = [m for module in modules for m in getattr(module, "MUTANTS", [])]
    alternatives = [a for module in modules for a in getattr(module, "ALTERNATIVES", [])]
    return mutants, alternatives
