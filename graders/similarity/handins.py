"""The hand-ins a similarity report compares, read the way they were graded.

A batch is read through its store (graders/batch/store.py, gradebook.load_rows): each graded
submission's done-marker names its input, which goes through the same intake as its grade
(graders/ingest.py: zips, folders and notebooks alike); the intake's hash of it must still be the
one its results.json recorded, so the code compared is exactly the code that was graded. The
reference solution and a corpus folder (earlier years, public solutions: entries like a batch's
submissions) are read through the same intake.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
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
    jobs, skipped = [], []
    for row in load_rows(out):
        student_id, results, marker = row["student_id"], row["results"], row["marker"]
        outcome = store.outcome_of(results)
        if outcome != store.GRADED:
            skipped.append(NotCompared(student_id, STUDENT, f"not graded ({outcome}): no code was graded"))
            continue
        source = Path(str(marker.get("source") or ""))
        if not marker.get("source") or not source.exists():
            skipped.append(NotCompared(student_id, STUDENT, f"its input {source.name or '(unrecorded)'} is no longer "
                                                            "where it was graded"))
            continue
        jobs.append(_Job(student_id, STUDENT, source, (results.get("submission") or {}).get("sha256")))
    hand_ins, unread = _read_all(jobs, assignment, course)
    return hand_ins, skipped + unread


def read_reference(assignment, course: Course) -> HandIn:
    return HandIn("reference", REFERENCE, read_hand_in(assignment.reference_dir, course))


def read_corpus(folder: Path, assignment, course: Course) -> tuple[list[HandIn], list[NotCompared]]:
    """Every entry of `folder` (a zip, a folder or a notebook; names starting with `.` left out)."""
    jobs = [_Job(entry.name.removesuffix(".zip").removesuffix(".ipynb"), CORPUS, entry, None)
            for entry in sorted(Path(folder).iterdir()) if not entry.name.startswith(".")]
    return _read_all(jobs, assignment, course)


@dataclass(frozen=True)
class _Job:
    id: str
    kind: str
    source: Path
    graded_sha256: str | None  # the intake's hash the grade recorded: the input must still have it


# Reading is most of the work (the intake, the parse, the streams): shared among the cores when
# there are enough hand-ins to pay for the processes' start. The order of the results is the
# jobs', whatever the processes' speed.
PARALLEL_FROM = 32
MAX_PROCESSES = 8


def _read_all(jobs: list[_Job], assignment, course: Course) -> tuple[list[HandIn], list[NotCompared]]:
    processes = min(len(os.sched_getaffinity(0)), MAX_PROCESSES) if len(jobs) >= PARALLEL_FROM else 1
    if processes > 1:
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_set_context, initargs=(assignment, course)) as pool:
            outcomes = list(pool.map(_read_in_process, jobs, chunksize=4))
    else:
        outcomes = [_read_job(job, assignment, course) for job in jobs]
    return ([o for o in outcomes if isinstance(o, HandIn)], [o for o in outcomes if isinstance(o, NotCompared)])


_CONTEXT: dict = {}


def _set_context(assignment, course: Course) -> None:
    _CONTEXT.update(assignment=assignment, course=course)


def _read_in_process(job: _Job) -> HandIn | NotCompared:
    return _read_job(job, _CONTEXT["assignment"], _CONTEXT["course"])


def _read_job(job: _Job, assignment, course: Course) -> HandIn | NotCompared:
    try:
        return _read(job.id, job.kind, job.source, assignment, course, expected_sha256=job.graded_sha256)
    except _Changed:
        return NotCompared(job.id, job.kind, f"its input {job.source.name} changed after it was graded: "
                                             "grade the batch again to compare it")
    except Rejected as rejected:
        reason = rejected.reason if job.kind == CORPUS else f"its input cannot be read any more: {rejected.reason}"
        return NotCompared(job.id, job.kind, reason)


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
