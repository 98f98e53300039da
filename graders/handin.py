"""What a hand-in of an assignment is, and how much of one the grader reads: shared by the intake
(graders/ingest.py) and the notebook reader it calls (graders/notebook.py), so that neither
imports the other back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MiB = 1024 * 1024

# The student bundle's homework/conftest.py (graders/bundle.py): plain `pytest` there runs the
# public checks (graders/pytest_plugin.py). A hand-in zipped from homework/, as the bundle's README
# says, holds it: the integrity scan knows it as the bundle's own (graders/integrity.py).
STUDENT_CONFTEST = '''"""Lets plain `pytest` in this folder run the public checks of the assignment (like `grade check`).

One test per public check; the folder is graded once, the results also go to .grade/.
"""

from graders.pytest_plugin import pytest_collect_file, pytest_terminal_summary  # noqa: F401
'''


def is_bundle_file(name: str, data: bytes) -> bool:
    """Whether a hand-in's file is the student bundle's own, unchanged (line endings and trailing
    blanks aside, which an editor or a zip tool on Windows may change)."""
    def normal(text: bytes) -> bytes:
        return b"\n".join(line.rstrip() for line in text.replace(b"\r\n", b"\n").split(b"\n")).strip()

    return name.rsplit("/", 1)[-1] == "conftest.py" and normal(data) == normal(STUDENT_CONFTEST.encode())


class Rejected(Exception):
    """The input cannot be graded at all; `reason` says why, in words for a TA."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class IngestLimits:
    max_total_bytes: int = 50 * MiB
    max_files: int = 200
    max_file_bytes: int = 10 * MiB
    max_compression_ratio: float = 200.0
    # Every entry counts here: files, folders and ignored system files (a .git/ folder, the
    # __MACOSX/ copies). Files to grade are held to `max_files` besides. Without this, a zip of
    # ~950,000 folder entries (under 50 MiB) costs 12 s and 700 MB before any other limit is hit.
    max_entries: int = 10_000


@dataclass(frozen=True)
class SubmissionLayout:
    """What a hand-in of one assignment holds (its manifest's [modules] and [answers])."""
    expected_files: tuple[str, ...]  # every file a student hands in
    # The public names each module defines. A notebook definition goes to the first module that
    # lists its name.
    module_names: dict[str, tuple[str, ...]]
    answers_file: str | None  # the questions file, or None
    # The ids a notebook's markdown cell may be headed with to answer a question (docs/submissions.md):
    # its key and the ids the manifest lists for it, with or without the questions file's stem as
    # a prefix (`answers.`); each maps to its (section, key) in the questions file.
    answer_headings: dict[str, tuple[str, str]]

    @classmethod
    def of(cls, assignment) -> SubmissionLayout:
        prefixes = ("", f"{Path(assignment.answers_file).stem}.") if assignment.answers_file else ("",)
        headings = {f"{prefix}{name}": question
                    for question, aliases in assignment.questions.items()
                    for name in (question[1], *aliases) for prefix in prefixes}
        return cls(assignment.expected_files,
                   {file: names for file, names in assignment.modules.items() if file.endswith(".py")},
                   assignment.answers_file, headings)
