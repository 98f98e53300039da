"""The written answers of a batch, as the review desk shows them: read through the batch's own
store (graders/batch/store.py, gradebook.load_rows), kept in memory, and read again only for the
students whose results.json changed on disk (a regrade, a merge, the desk's own publishing).

Nothing here is mutable state of the desk: an `Index` is a snapshot, replaced whole when the
batch changes, so a request that holds one sees one consistent batch.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from graders.batch import store
from graders.batch.gradebook import display_name, load_rows
from graders.batch.merge import answer_sha256, is_written_answer
from graders.reports.html import visible_text
from graders.reports.summary import merged_by_hand


@dataclass(frozen=True)
class Answer:
    key: str  # opaque and stable: the answer's address in the desk's pages (no student id in a URL)
    student_id: str
    name: str
    check_id: str
    text: str
    sha256: str  # of the text: a grade is for this text
    hand: dict | None  # the hand score results.json holds ({"score": float, "comment"}), if any
    title: str  # the question, as this grade recorded it
    rubric: str  # the pack's model answer, as this grade recorded it (not for a blank answer)
    max_score: float


@dataclass(frozen=True)
class Question:
    check_id: str
    title: str
    rubric: str
    max_score: float
    keys: tuple[str, ...]  # its answers, in the desk's order


@dataclass
class Index:
    questions: dict[str, Question]  # in the rubric's order
    answers: dict[str, dict[str, Answer]]  # check_id -> key -> answer
    assignment: str | None  # the pack the batch graded
    signatures: dict[str, tuple | None]  # student_id -> its results.json's stat, when read
    by_student: dict[str, list[Answer]]

    def question(self, check_id: str) -> Question | None:
        return self.questions.get(check_id)

    def answer(self, check_id: str, key: str) -> Answer | None:
        return self.answers.get(check_id, {}).get(key)


def answer_key(check_id: str, student_id: str) -> str:
    """A student's answer to one question, named without the student: the desk's order of
    answers is the order of these keys, which follows no name."""
    return hashlib.sha256(f"{check_id}\0{student_id}".encode()).hexdigest()[:16]


def _signature(out: Path, student_id: str) -> tuple | None:
    try:
        status = os.stat(store.result_dir(out, student_id) / "results.json")
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size, status.st_ino


def written_answers_of(student_id: str, name: str, results: dict) -> list[Answer]:
    """The written answers of one graded submission (none of a rejected or failed one)."""
    if store.outcome_of(results) != store.GRADED:
        return []
    answers = []
    for part in results.get("parts") or []:
        for check in part.get("checks") or []:
            if not isinstance(check, dict) or not isinstance(check.get("id"), str) or not is_written_answer(check):
                continue
            details = check.get("details") if isinstance(check.get("details"), dict) else {}
            hand = ({"score": _points(details["manual"].get("score")), "comment": str(details.get("comment") or "")}
                    if merged_by_hand(check) else None)
            answers.append(Answer(
                key=answer_key(check["id"], student_id), student_id=student_id, name=visible_text(name),
                check_id=check["id"], text=visible_text(str(details.get("answer") or "")),
                sha256=answer_sha256(check), hand=hand,
                title=visible_text(str(details.get("question") or check.get("title") or check["id"])),
                rubric=visible_text(str(details.get("rubric") or "")), max_score=_points(check.get("max_score"))))
    return answers


def _points(value) -> float:
    """A number of points from a results.json (0 for anything that is not a finite number)."""
    try:
        number = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def load_index(out: Path, previous: Index | None = None) -> Index:
    """The batch's written answers now: `previous` where a student's results.json is as it was
    read then, the others read again (all of them without a previous index)."""
    out = Path(out)
    folders = [folder.name for folder in store.result_folders(out)]
    signatures = {student_id: _signature(out, student_id) for student_id in folders}
    if previous is not None and signatures == previous.signatures:
        return previous
    if previous is None:
        by_student = {row["student_id"]: written_answers_of(row["student_id"], display_name(row), row["results"])
                      for row in load_rows(out)}
    else:
        by_student = {}
        for student_id in folders:
            if previous.signatures.get(student_id) == signatures[student_id] and student_id in previous.by_student:
                by_student[student_id] = previous.by_student[student_id]
                continue
            results = store.read_results(out, student_id)
            if results is not None:
                row = {"results": results, "marker": store.read_marker(out, student_id) or {}}
                by_student[student_id] = written_answers_of(student_id, display_name(row), results)
    return _assemble(out, by_student, signatures, previous)


def _assemble(out: Path, by_student: dict[str, list[Answer]], signatures, previous: Index | None) -> Index:
    answers: dict[str, dict[str, Answer]] = {}
    titles: dict[str, str] = {}
    rubrics: dict[str, str] = {}
    maxima: dict[str, Counter] = {}
    for student_id in sorted(by_student):
        for answer in by_student[student_id]:
            answers.setdefault(answer.check_id, {})[answer.key] = answer
            titles[answer.check_id] = titles.get(answer.check_id) or answer.title
            rubrics[answer.check_id] = rubrics.get(answer.check_id) or answer.rubric
            maxima.setdefault(answer.check_id, Counter())[answer.max_score] += 1
    questions = {check_id: Question(check_id=check_id, title=titles[check_id], rubric=rubrics[check_id],
                                    max_score=maxima[check_id].most_common(1)[0][0], keys=tuple(sorted(answers[check_id])))
                 for check_id in answers}
    assignment = previous.assignment if previous is not None and previous.assignment else _assignment_of(out, by_student)
    return Index(questions=questions, answers=answers, assignment=assignment, signatures=signatures,
                 by_student=by_student)


def _assignment_of(out: Path, by_student: dict[str, list[Answer]]) -> str | None:
    """The name of the pack the batch graded (its results say it)."""
    for student_id in sorted(by_student):
        results = store.read_results(out, student_id) or {}
        name = (results.get("assignment") or {}).get("name") if isinstance(results.get("assignment"), dict) else None
        if isinstance(name, str):
            return name
    return None
