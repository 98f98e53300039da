"""Batches for the review desk's tests and benchmark, made without grading anything: results
published through the batch's own store (graders/batch/store.py), as `grade batch` publishes them.

- `synthetic_results`: a small result of the shape a grade writes (an automatic part, and the
  written answers part with pending, blank and long answers);
- `publish_batch`: a batch of such results, one per student, answers varied;
- `copies_of`: a real result (the built-in example's) copied once per student, its written
  answers varied (what the benchmark grades at course scale).
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

from graders.batch import store
from graders.scoring import totals

QUESTIONS = {
    "answers.residual_connection": "Why is the residual connection crucial in the Transformer architecture?",
    "answers.layer_norm": "Why is Layer Normalization important in the Transformer architecture?",
}
MODEL_ANSWERS = {
    "answers.residual_connection": "It gives the gradient a path around every sub-layer.",
    "answers.layer_norm": "It normalises each token's features, independent of the batch.",
}
PHRASES = ["gradients flow around the sub-layer", "it keeps training stable", "the identity path",
           "it normalises the features", "less sensitive to the learning rate", "I am not sure"]


def written_check(check_id: str, answer: str | None, max_score: float = 5.0) -> dict:
    """A written answer as graders/checks/questions.py writes it: pending, or blank (failed)."""
    question = QUESTIONS.get(check_id, check_id)
    if not answer:
        return {"id": check_id, "title": question, "status": "failed", "score": 0.0, "max_score": max_score,
                "visibility": "public", "message": f"no answer written for: {question}", "graded_by_hand": True,
                "details": {}}
    return {"id": check_id, "title": question, "status": "pending_manual", "score": 0.0, "max_score": max_score,
            "visibility": "public", "message": "waiting for a grader", "graded_by_hand": True,
            "details": {"answer": answer, "question": question, "rubric": MODEL_ANSWERS.get(check_id, "")}}


def synthetic_results(answers: dict[str, str | None], *, automatic: float = 6.0, input_sha256: str = "0" * 64,
                      name: str = "") -> dict:
    """A graded result: an automatic part scoring `automatic` of 8 and one written answer per entry."""
    parts = [
        {"id": "attention", "title": "Attention", "score": automatic, "max_score": 8.0, "checks": [
            {"id": "attention.matches_reference", "title": "matches", "status": "passed" if automatic else "failed",
             "score": automatic, "max_score": 8.0, "visibility": "public", "message": ""}]},
        {"id": "answers", "title": "Written answers", "score": 0.0, "max_score": 5.0 * len(answers),
         "checks": [written_check(check_id, text) for check_id, text in answers.items()]},
    ]
    results = {"schema_version": 1, "status": "graded", "reason": None, "mode": "instructor", "parts": parts,
               "submission": {"sha256": input_sha256, "name": "x.zip", "kind": "zip", "notes": []},
               "assignment": {"name": "bert", "title": "BERT"}, "versions": {"grader": "0.1.0"},
               "timings": {"total_s": 1.0},
               "batch": {"student_id": "", "name": name, "input_sha256": input_sha256, "wall_s": 1.5, "outcome": "graded"}}
    results.update(totals(parts, False))
    return results


def student_answers(number: int, check_ids) -> dict[str, str | None]:
    """Student `number`'s answers: varied phrases, every fifth question-and-student blank."""
    return {check_id: None if (number + n) % 5 == 4 else
            f"{PHRASES[(number + n) % len(PHRASES)]}; {PHRASES[(number * 3 + n) % len(PHRASES)]} (student {number})"
            for n, check_id in enumerate(check_ids)}


def publish_batch(out: Path, count: int = 4, check_ids=tuple(QUESTIONS)) -> list[str]:
    """A batch of `count` students' synthetic results in `out`; their ids."""
    ids = []
    for number in range(count):
        student_id = f"s{number:03d}"
        sha = hashlib.sha256(student_id.encode()).hexdigest()
        results = synthetic_results(student_answers(number, check_ids), automatic=float(number % 9),
                                    input_sha256=sha, name=f"Student {number}")
        results["batch"]["student_id"] = student_id
        store.publish(out, student_id, results, {"key": student_id, "name": f"Student {number}"})
        ids.append(student_id)
    return ids


def copies_of(results: dict, out: Path, count: int) -> list[str]:
    """`results` (a real grade) published `count` times, each copy's written answers varied."""
    ids = []
    for number in range(count):
        student_id = f"student{number:03d}"
        copied = copy.deepcopy(results)
        sha = hashlib.sha256(student_id.encode()).hexdigest()
        copied["batch"] = {"student_id": student_id, "name": f"Student {number}", "input_sha256": sha, "wall_s": 60.0,
                           "outcome": "graded"}
        for part in copied["parts"]:
            for n, check in enumerate(part["checks"]):
                details = check.get("details") if isinstance(check.get("details"), dict) else None
                if check.get("status") == "pending_manual" and details is not None:
                    if (number + n) % 17 == 16:
                        check.update(status="failed", message=f"no answer written for: {check['title']}", details={})
                    else:
                        details["answer"] = f"{details['answer']} {PHRASES[(number + n) % len(PHRASES)]} ({number})"
        store.publish(out, student_id, copied, {"key": student_id, "name": f"Student {number}"})
        ids.append(student_id)
    return ids
