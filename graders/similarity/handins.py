"""The hand-ins a similarity report compares, read the way they were graded.

A batch is read through its store (graders/batch/store.py, gradebook.load_rows): each graded
submission's done-marker names its input, which goes through the same intake as its grade
(graders/ingest.py: zips, folders and notebooks alike); the intake's hash of it must still be the
one its results.json recorded, so the code compared is exactly the code that was graded. The
reference solution and a corpus folder (earlier years, public solutions: entries like a batch's
submissions) are read through the same intake.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from graders.batch import store
from graders.batch.gradebook import load_rows
from graders.ingest import Ingested, Rejected, ingest
from graders.notebook import cells_of_lines
from graders.similarity.code import Course, read_hand_in
from graders.similarity.compare import CORPUS, REFERENCE, STUDENT, HandIn


@dataclass(frozen=True)
class NotCompared:
    id: str
    kind: str
    reason: str


def read_batch(out: Path, assignment, course: Course) -> tuple[list[HandIn], list[NotCompared]]:
    """The graded submissions of the batch folder `out`, and the ones that cannot be compared."""
    hand_ins, skipped = [], []
    for row in load_rows(out):
        student_id, results, marker = row["student_id"], row["results"], row["marker"]
        outcome = store.outcome_of(results)
        if outcome != store.GRADED:
            skipped.append(NotCompared(student_id, STUDENT, f"not graded ({outcome}): no code was graded"))
            continue
        source = Path(str(marker.get("source") or ""))
        graded_hash = (results.get("submission") or {}).get("sha256")
        if not marker.get("source") or not source.exists():
            skipped.append(NotCompared(student_id, STUDENT, f"its input {source.name or '(unrecorded)'} is no longer "
                                                            "where it was graded"))
            continue
        try:
            hand_in = _read(student_id, STUDENT, source, assignment, course, expected_sha256=graded_hash)
        except _Changed:
            skipped.append(NotCompared(student_id, STUDENT, f"its input {source.name} changed after it was graded: "
                                                            "grade the batch again to compare it"))
            continue
        except Rejected as rejected:
            skipped.append(NotCompared(student_id, STUDENT, f"its input cannot be read any more: {rejected.reason}"))
            continue
        hand_ins.append(hand_in)
    return hand_ins, skipped


def read_reference(assignment, course: Course) -> HandIn:
    return HandIn("reference", REFERENCE, read_hand_in(assignment.reference_dir, course))


def read_corpus(folder: Path, assignment, course: Course) -> tuple[list[HandIn], list[NotCompared]]:
    """Every entry of `folder` (a zip, a folder or a notebook; names starting with `.` left out)."""
    hand_ins, skipped = [], []
    for entry in sorted(Path(folder).iterdir()):
        if entry.name.startswith("."):
            continue
        name = entry.name.removesuffix(".zip").removesuffix(".ipynb")
        try:
            hand_ins.append(_read(name, CORPUS, entry, assignment, course))
        except Rejected as rejected:
            skipped.append(NotCompared(name, CORPUS, rejected.reason))
    return hand_ins, skipped


class _Changed(Exception):
    pass


def _read(hand_in_id: str, kind: str, source: Path, assignment, course: Course, *,
          expected_sha256: str | None = None) -> HandIn:
    with tempfile.TemporaryDirectory(prefix="similarity-") as scratch:
        ingested = ingest(source, Path(scratch) / "in", assignment=assignment)
        if expected_sha256 is not None and ingested.sha256 != expected_sha256:
            raise _Changed(hand_in_id)
        code = read_hand_in(ingested.root, course)
    notebook, cells = _notebook_cells(ingested, code.modules)
    return HandIn(hand_in_id, kind, code, source_kind=ingested.kind, notebook=notebook, cells=cells)


def _notebook_cells(ingested: Ingested, modules: dict[str, str]) -> tuple[str | None, dict[str, list[int | None]]]:
    if ingested.kind != "notebook" or not ingested.origin:
        return None, {}
    return str(ingested.origin.get("notebook")), {module: cells_of_lines(text) for module, text in modules.items()}
