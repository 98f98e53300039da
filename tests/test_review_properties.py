"""The review desk against a model of it, over random sequences of what TAs do (hypothesis'
stateful testing): make, apply, remove, change and delete rubric items, adjust, comment, clear,
import a CSV row, and writes from stale pages. After every step the desk must say what the model
says; whenever the batch is published (a step of its own, and after the whole sequence), each
results.json and gradebook.csv too: the same score for every answer, the same items and comment,
the same totals. A refused write must change nothing."""

from __future__ import annotations

import csv
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import review_samples
from graders.batch import store
from graders.batch.merge import MergeReport
from graders.review.desk import BAD_INPUT, GONE, STALE, Desk, ReviewError
from graders.review.publish import Publisher

pytestmark = pytest.mark.slow  # tens of seconds: each publishing writes and syncs every changed file

QUESTIONS = tuple(review_samples.QUESTIONS)
STUDENTS = 3
MAX = 5.0
POINTS = st.sampled_from([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0, 5.0, 6.0, -5.5])  # the last two out of range
ANSWER = st.integers(0, STUDENTS - 1)


def clamp(value: float) -> float:
    return round(min(max(value, 0.0), MAX), 4)


class DeskModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="review-model-"))
        self.out = self.folder / "batch"
        review_samples.publish_batch(self.out, STUDENTS, QUESTIONS)
        self.desk = Desk(self.out)
        self.publisher = Publisher(self.desk)
        self.publisher.sync()
        self.automatic = {sid: float(row["total"]) for sid, row in self.gradebook().items()}
        self.items: dict[int, dict] = {}  # id -> {"question", "points", "text", "deleted"}
        self.grades: dict[tuple[str, str], dict] = {}  # (student, question) -> {"items", "adjustment", "comment"}

    def teardown(self):
        try:
            self.publish_and_compare()  # after the whole sequence, whatever it was
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------------ helpers

    def key(self, question: str, number: int) -> str:
        return self.desk.index.questions[question].keys[number]

    def student(self, question: str, number: int) -> str:
        return self.desk.index.answer(question, self.key(question, number)).student_id

    def seen(self, question: str, number: int) -> dict:
        view = self.desk.view(question, self.key(question, number))
        return {"revision": view["grade"]["revision"], "answer_sha256": view["answer"]["sha256"]}

    def grade(self, question: str, number: int) -> dict:
        return self.grades.setdefault((self.student(question, number), question),
                                      {"items": set(), "adjustment": None, "comment": ""})

    def snapshot(self):
        with self.desk.db.read() as connection:
            return [tuple(row) for table in ("items", "grades", "applied")
                    for row in connection.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]

    def refused(self, status: int, attempt) -> None:
        before = self.snapshot()
        try:
            attempt()
        except ReviewError as refusal:
            assert refusal.status == status, refusal.message
        else:
            raise AssertionError("the write was not refused")
        assert self.snapshot() == before

    def expected(self, student_id: str, question: str) -> tuple[float | None, list]:
        grade = self.grades.get((student_id, question))
        if grade is None:
            return None, []
        held = sorted(i for i in grade["items"] if not self.items[i]["deleted"])
        if not held and grade["adjustment"] is None:
            return None, []
        score = clamp(sum(self.items[i]["points"] for i in held) + (grade["adjustment"] or 0.0))
        return score, [{"text": self.items[i]["text"], "points": self.items[i]["points"]} for i in held]

    def gradebook(self):
        return {row["student_id"]: row for row in csv.DictReader((self.out / "gradebook.csv").read_text().splitlines())}

    # ------------------------------------------------------------------------ what TAs do

    @rule(question=st.sampled_from(QUESTIONS), points=POINTS, number=ANSWER, apply=st.booleans(),
          text=st.sampled_from(["names the axis", "no formula", "vanishing gradients", "<b>bold</b>"]))
    def create_item(self, question, points, number, apply, text):
        apply_to = {"key": self.key(question, number), **self.seen(question, number)} if apply else None
        if abs(points) > MAX:
            self.refused(BAD_INPUT, lambda: self.desk.create_item("Ann", question, points=points, text=text,
                                                                  apply_to=apply_to))
            return
        made = self.desk.create_item("Ann", question, points=points, text=text, apply_to=apply_to)
        item_id = made["items"][-1]["id"] if apply else made["id"]
        self.items[item_id] = {"question": question, "points": points, "text": text, "deleted": False}
        if apply:
            self.grade(question, number)["items"].add(item_id)

    @precondition(lambda self: self.items)
    @rule(data=st.data(), number=ANSWER)
    def toggle(self, data, number):
        item_id = data.draw(st.sampled_from(sorted(self.items)))
        item = self.items[item_id]
        question = data.draw(st.sampled_from(QUESTIONS))
        grade = self.grade(question, number)
        action = "remove" if item_id in grade["items"] else "apply"
        attempt = lambda: self.desk.act("Bob", question, self.key(question, number), **self.seen(question, number),  # noqa: E731
                                        action=action, item=item_id)
        if item["deleted"] or item["question"] != question:
            self.refused(GONE, attempt)
            return
        attempt()
        (grade["items"].discard if action == "remove" else grade["items"].add)(item_id)

    @rule(question=st.sampled_from(QUESTIONS), number=ANSWER, value=st.none() | POINTS)
    def adjust(self, question, number, value):
        attempt = lambda: self.desk.act("Ann", question, self.key(question, number), **self.seen(question, number),  # noqa: E731
                                        action="adjust", adjustment=value)
        if value is not None and abs(value) > MAX:
            self.refused(BAD_INPUT, attempt)
            return
        attempt()
        self.grade(question, number)["adjustment"] = value

    @rule(question=st.sampled_from(QUESTIONS), number=ANSWER, text=st.sampled_from(["", "say why", "good"]))
    def comment(self, question, number, text):
        self.desk.act("Ann", question, self.key(question, number), **self.seen(question, number), action="comment",
                      comment=text)
        self.grade(question, number)["comment"] = text

    @rule(question=st.sampled_from(QUESTIONS), number=ANSWER)
    def clear(self, question, number):
        self.desk.act("Bob", question, self.key(question, number), **self.seen(question, number), action="clear")
        grade = self.grade(question, number)
        grade["items"].clear()
        grade["adjustment"] = None

    @rule(question=st.sampled_from(QUESTIONS), number=ANSWER)
    def write_from_a_stale_page(self, question, number):
        seen = self.seen(question, number)
        self.refused(STALE, lambda: self.desk.act("Ann", question, self.key(question, number),
                                                  revision=seen["revision"] + 1, answer_sha256=seen["answer_sha256"],
                                                  action="adjust", adjustment=1))

    @precondition(lambda self: any(not item["deleted"] for item in self.items.values()))
    @rule(data=st.data(), points=POINTS, stale=st.booleans())
    def change_item(self, data, points, stale):
        item_id = data.draw(st.sampled_from(sorted(i for i, item in self.items.items() if not item["deleted"])))
        item = self.desk.item(item_id)
        uses = item["uses"] + 1 if stale else item["uses"]
        attempt = lambda: self.desk.update_item("Cy", item_id, version=item["version"], uses=uses, points=points,  # noqa: E731
                                                text=f"{item['text']}!")
        if stale or abs(points) > MAX:
            self.refused(BAD_INPUT if abs(points) > MAX else STALE, attempt)
            return
        attempt()
        self.items[item_id].update(points=points, text=f"{item['text']}!")

    @precondition(lambda self: any(not item["deleted"] for item in self.items.values()))
    @rule(data=st.data())
    def delete_item(self, data):
        item_id = data.draw(st.sampled_from(sorted(i for i, item in self.items.items() if not item["deleted"])))
        item = self.desk.item(item_id)
        self.desk.delete_item("Cy", item_id, version=item["version"], uses=item["uses"])
        self.items[item_id]["deleted"] = True
        for grade in self.grades.values():
            grade["items"].discard(item_id)

    @rule(question=st.sampled_from(QUESTIONS), number=ANSWER, score=st.sampled_from([0.0, 2.5, 4.0, 5.0, 7.0]))
    def import_a_csv_row(self, question, number, score):
        student = self.student(question, number)
        self.desk.import_grades("grade merge", {student: {question: {"score": score, "comment": "csv", "line": 2}}},
                                MergeReport())
        grade = self.grade(question, number)
        held = [self.items[i]["points"] for i in grade["items"] if not self.items[i]["deleted"]]
        given = clamp(score)
        grade["adjustment"] = None if held and clamp(sum(held)) == given else round(given - sum(held), 4)
        grade["comment"] = "csv"

    # ------------------------------------------------------------------------ what must hold

    @invariant()
    def the_desk_says_what_the_model_says(self):
        for question in QUESTIONS:
            for number in range(STUDENTS):
                score, _ = self.expected(self.student(question, number), question)
                grade = self.desk.view(question, self.key(question, number))["grade"]
                assert grade["graded"] is (score is not None) and grade["score"] == score

    @rule()
    def publish_and_compare(self):
        """Published (as the server does after each action), the results and the gradebook say
        what the model says."""
        assert self.publisher.sync()
        rows = self.gradebook()
        for student_id, automatic in self.automatic.items():
            results = store.read_results(self.out, student_id)
            checks = {c["id"]: c for part in results["parts"] for c in part["checks"]}
            total = automatic
            pending = 0
            for question in QUESTIONS:
                score, items = self.expected(student_id, question)
                check = checks[question]
                if score is None:
                    assert "manual" not in check.get("details", {})
                    pending += check["status"] == "pending_manual"
                    continue
                assert check["score"] == score and check["details"]["manual"].get("items", []) == items
                assert check["details"].get("comment", "") == self.grades[(student_id, question)]["comment"]
                total += score
            assert float(rows[student_id]["total"]) == round(total, 2) == round(results["score"], 2)
            assert int(rows[student_id]["pending_manual"]) == pending


TestDeskModel = DeskModel.TestCase
TestDeskModel.settings = settings(max_examples=20, stateful_step_count=10, deadline=None, derandomize=True)
