"""Mutants and alternatives: small edits of the reference that the checks must tell apart.

A Mutant is a realistic student mistake: graded, it must lose points in its own part, and
should be named by `diagnosis`. An Alternative is a different correct implementation: it must
get full marks in every part it touches.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Edit:
    file: str  # a module of the reference, e.g. "attention.py"
    find: str  # exact text that occurs once in the reference file
    replace: str


@dataclass(frozen=True)
class Mutant:
    id: str
    part: str  # the rubric part that must lose points
    edits: tuple
    diagnosis: str | None = None  # the diagnosis id a careful TA would give (None: no diagnosis expected)


@dataclass(frozen=True)
class Alternative:
    id: str
    parts: tuple  # rubric parts that must keep full marks
    edits: tuple
    notes: str = field(default="")


def apply_edits(folder, edits):
    """Apply edits in place to a copy of the reference in `folder`; each `find` must occur exactly once."""
    from pathlib import Path

    for edit in edits:
        path = Path(folder) / edit.file
        text = path.read_text()
        count = text.count(edit.find)
        if count != 1:
            raise AssertionError(f"{edit.file}: {edit.find!r} occurs {count} times, expected once")
        path.write_text(text.replace(edit.find, edit.replace))
