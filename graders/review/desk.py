"""What a TA does at the desk, as operations on the database and the batch's answers: no web
here (app.py serves these), so the same operations back the pages, the CSV import and the tests.

Every write names what the page it came from showed: the grade's revision (and the answer's
hash), an item's version and how many answers it is applied to. When the database holds
something else (another TA changed it meanwhile, a regrade changed the answer, an item was
deleted), the write changes nothing and raises `ReviewError` with the state as it is now.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from graders.batch.gradebook import histogram_svg
from graders.batch.merge import PREFIX, MergeReport
from graders.review.database import Database
from graders.review.index import Answer, Index, Question, load_index
from graders.reports.html import visible_text
from graders.reports.summary import format_points

BAD_INPUT, GONE, STALE = 400, 404, 409
COMMENT_LIMIT = 5000
ITEM_TEXT_LIMIT = 500
NAME_LIMIT = 60
ITEM_KEYS = "1234567890"  # the keys that apply the first ten items of a question
ADOPTED_BY = "grade merge"  # who gave a hand score the desk found in results.json


class ReviewError(Exception):
    """A write that changed nothing: bad input (400), something gone (404) or a stale page
    (409). `current`: the answer (or item) as it is now, for the page to show."""

    def __init__(self, status: int, message: str, current: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.current = status, message, current


@dataclass(frozen=True)
class Desired:
    """What results.json should say of one graded answer."""

    score: float
    comment: str
    items: tuple[tuple[str, float], ...]  # (text, points) of each item given

    def entry(self) -> dict:
        return {"score": self.score, "comment": self.comment,
                "items": [{"text": text, "points": points} for text, points in self.items]}


def reviewer_name(raw) -> str:
    """The name a TA gives, checked: what every grade of theirs says."""
    name = " ".join(str(raw or "").split())
    if not name or len(name) > NAME_LIMIT:
        raise ReviewError(BAD_INPUT, f"give your name (1 to {NAME_LIMIT} characters): it is shown beside your grades")
    return visible_text(name)


def _number(raw, what: str, limit: float) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or abs(value) > limit:
        raise ReviewError(BAD_INPUT, f"{what} must be a number from {-limit:g} to {limit:g} "
                                     f"(the question is worth {limit:g} points); nothing was changed")
    return round(value, 4)


def _text(raw, what: str, limit: int, *, required: bool) -> str:
    text = str(raw if raw is not None else "").strip()
    if required and not text:
        raise ReviewError(BAD_INPUT, f"{what} is empty; nothing was changed")
    if len(text) > limit:
        raise ReviewError(BAD_INPUT, f"{what} is {len(text)} characters long, more than {limit}; nothing was changed")
    return visible_text(text)


def _when(seconds: float) -> str:
    """When something was done: the time of day if it was today, else the day too."""
    moment = time.localtime(seconds)
    today = time.localtime()
    same_day = (moment.tm_year, moment.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M:%S" if same_day else "%d %b %Y %H:%M", moment)


def score_of(points: list[float], adjustment: float | None, maximum: float) -> float:
    """A grade's score: its items' points and the adjustment, clamped to [0, maximum]."""
    return round(min(max(sum(points) + (adjustment or 0.0), 0.0), maximum), 4)


class Desk:
    """The review desk of the batch at `out`."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.db = Database(self.out)
        self._index_lock = threading.Lock()
        self.index: Index = load_index(self.out)
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self.changed = threading.Event()  # set by every write; the publisher waits on it

    # ------------------------------------------------------------------------ the batch's answers

    def refresh(self) -> Index:
        """Read again what changed in the batch (a regrade, the publisher's own writes)."""
        with self._index_lock:
            self.index = load_index(self.out, self.index)
            return self.index

    def _question(self, index: Index, check_id: str) -> Question:
        question = index.question(check_id)
        if question is None:
            raise ReviewError(GONE, f"the question {check_id} is not in this batch (any more: a regrade without it?); "
                                    "grades given to it stay in the database")
        return question

    def _answer(self, index: Index, check_id: str, key: str) -> Answer:
        self._question(index, check_id)
        answer = index.answer(check_id, key)
        if answer is None:
            raise ReviewError(GONE, f"this answer to {check_id} is not in the batch any more (its submission was "
                                    "regraded or removed); go back to the question")
        return answer

    # ------------------------------------------------------------------------ dirty students

    def mark_dirty(self, student_ids) -> None:
        with self._dirty_lock:
            self._dirty.update(student_ids)
        self.changed.set()

    def take_dirty(self) -> set[str]:
        with self._dirty_lock:
            taken, self._dirty = self._dirty, set()
        return taken

    @property
    def waiting(self) -> int:
        """How many students' changes have not reached their results.json yet."""
        with self._dirty_lock:
            return len(self._dirty)

    # ------------------------------------------------------------------------ reading

    @staticmethod
    def _items(connection, check_id: str) -> list:
        return connection.execute("SELECT * FROM items WHERE check_id = ? AND deleted = 0 ORDER BY id",
                                  (check_id,)).fetchall()

    @staticmethod
    def _grades(connection, check_id: str) -> tuple[dict, dict]:
        """({student_id: grade row}, {student_id: [item ids applied]}) of one question."""
        rows = {row["student_id"]: row for row in
                connection.execute("SELECT * FROM grades WHERE check_id = ?", (check_id,))}
        applied: dict[str, list[int]] = {}
        for row in connection.execute("SELECT student_id, item_id FROM applied WHERE check_id = ? ORDER BY item_id",
                                      (check_id,)):
            applied.setdefault(row["student_id"], []).append(row["item_id"])
        return rows, applied

    @staticmethod
    def _standing(answer: Answer, row, applied: list[int], points: dict[int, float], maximum: float) -> dict:
        """One answer's grade as the desk counts it."""
        current = row is not None and row["answer_sha256"] == answer.sha256
        items = applied if current else []
        adjustment = row["adjustment"] if current else None
        graded = current and (bool(items) or adjustment is not None)
        return {"current": current, "graded": graded, "items": items, "adjustment": adjustment,
                "comment": row["comment"] if current else "",
                "score": score_of([points[i] for i in items if i in points], adjustment, maximum) if graded else None,
                "revision": row["revision"] if row is not None else 0,
                "by": row["updated_by"] if row is not None else None,
                "at": row["updated_at"] if row is not None else None}

    def overview(self) -> list[dict]:
        """Each question: how many answers, how many graded, by whom, the score distribution."""
        index = self.index
        questions = []
        with self.db.read() as connection:
            for question in index.questions.values():
                rows, applied = self._grades(connection, question.check_id)
                points = {row["id"]: row["points"] for row in self._items(connection, question.check_id)}
                answers = index.answers[question.check_id]
                standings = [self._standing(answers[key], rows.get(answers[key].student_id),
                                            applied.get(answers[key].student_id, []), points, question.max_score)
                             for key in question.keys]
                graded = [s for s in standings if s["graded"]]
                scores = [s["score"] for s in graded]
                questions.append({
                    "check_id": question.check_id, "title": question.title, "max_score": format_points(question.max_score),
                    "answers": len(standings), "graded": len(graded),
                    "blank": sum(1 for key in question.keys if not answers[key].text),
                    "by": Counter(s["by"] for s in graded).most_common(),
                    "mean": format_points(sum(scores) / len(scores)) if scores else "",
                    "item_count": len(points),
                    "histogram": histogram_svg(scores, question.max_score or 1.0, bins=_bins(question.max_score),
                                               axis_title="points (bars: number of answers graded)"),
                })
        return questions

    def view(self, check_id: str, key: str, *, names: bool = False) -> dict:
        """Everything the grading page shows of one answer."""
        index = self.index
        question = self._question(index, check_id)
        answer = self._answer(index, check_id, key)
        with self.db.read() as connection:
            items = self._items(connection, check_id)
            rows, applied = self._grades(connection, check_id)
        points = {row["id"]: row["points"] for row in items}
        answers = index.answers[check_id]
        standings = {k: self._standing(answers[k], rows.get(answers[k].student_id), applied.get(answers[k].student_id, []),
                                       points, question.max_score) for k in question.keys}
        uses = Counter(i for standing in standings.values() for i in standing["items"])
        mine = standings[key]
        position = question.keys.index(key)
        ungraded = [k for k in question.keys[position + 1:] + question.keys[:position] if not standings[k]["graded"]]
        row = rows.get(answer.student_id)
        earlier = None
        if row is not None and not mine["current"]:
            earlier = {"by": row["updated_by"], "at": _when(row["updated_at"])}
        return {
            "question": {"check_id": check_id, "title": question.title, "rubric": question.rubric,
                         "max_score": question.max_score, "count": len(question.keys),
                         "graded": sum(1 for s in standings.values() if s["graded"])},
            "answer": {"key": key, "position": position + 1, "text": answer.text, "blank": not answer.text,
                       "sha256": answer.sha256,
                       "student": {"id": answer.student_id, "name": answer.name} if names else None},
            "grade": {"revision": mine["revision"], "graded": mine["graded"], "items": mine["items"],
                      "adjustment": mine["adjustment"], "comment": mine["comment"], "score": mine["score"],
                      "by": mine["by"] if mine["current"] else None,
                      "at": _when(mine["at"]) if mine["current"] and mine["at"] else None, "earlier": earlier},
            "items": [{"id": row["id"], "key": ITEM_KEYS[n] if n < len(ITEM_KEYS) else "", "points": row["points"],
                       "text": row["text"], "version": row["version"], "uses": uses.get(row["id"], 0)}
                      for n, row in enumerate(items)],
            "nav": {"previous": question.keys[position - 1] if position > 0 else None,
                    "next": question.keys[position + 1] if position + 1 < len(question.keys) else None,
                    "next_ungraded": ungraded[0] if ungraded else None},
            "ungraded": len(ungraded) + (0 if mine["graded"] else 1),
        }

    def first_answer(self, check_id: str) -> str:
        """Where grading a question starts: its first answer nobody has graded, else its first."""
        index = self.index
        question = self._question(index, check_id)
        if not question.keys:
            raise ReviewError(GONE, f"the question {check_id} has no answers in this batch")
        view = self.view(check_id, question.keys[0])
        if view["grade"]["graded"] and view["nav"]["next_ungraded"]:
            return view["nav"]["next_ungraded"]
        return question.keys[0]

    # ------------------------------------------------------------------------ grading one answer

    def act(self, who: str, check_id: str, key: str, *, revision, answer_sha256, action: str, item=None,
            comment=None, adjustment=None) -> dict:
        """One change to one answer's grade: apply or remove an item, set the comment or the
        adjustment, or clear the grade. Refused, unchanged, when the page saw another revision."""
        who = reviewer_name(who)
        index = self.index
        question = self._question(index, check_id)
        answer = self._answer(index, check_id, key)
        if action not in ("apply", "remove", "comment", "adjust", "clear"):
            raise ReviewError(BAD_INPUT, f"unknown action {action!r}")
        if action == "comment":
            comment = _text(comment, "the comment", COMMENT_LIMIT, required=False)
        if action == "adjust" and adjustment is not None:
            adjustment = _number(adjustment, "the point adjustment", question.max_score)
        try:
            with self.db.write() as connection:
                self._change(connection, who, answer, revision, answer_sha256, action, item, comment, adjustment)
        except ReviewError as refusal:
            raise self._with_view(refusal, check_id, key) from None
        self.mark_dirty([answer.student_id])
        return self.view(check_id, key)

    def _change(self, connection, who, answer: Answer, revision, answer_sha256, action, item, comment, adjustment) -> None:
        self._check_revision(connection, answer, revision, answer_sha256)
        self._own(connection, who, answer)
        where = (answer.student_id, answer.check_id)
        if action in ("apply", "remove"):
            target = self._live_item(connection, answer.check_id, item)["id"]
            connection.execute("INSERT OR IGNORE INTO applied (student_id, check_id, item_id) VALUES (?, ?, ?)" if action == "apply"
                               else "DELETE FROM applied WHERE student_id = ? AND check_id = ? AND item_id = ?", (*where, target))
        elif action == "comment":
            connection.execute("UPDATE grades SET comment = ? WHERE student_id = ? AND check_id = ?", (comment, *where))
        elif action == "adjust":
            connection.execute("UPDATE grades SET adjustment = ? WHERE student_id = ? AND check_id = ?", (adjustment, *where))
        else:  # clear: ungraded again (the comment stays, for when it is graded)
            connection.execute("DELETE FROM applied WHERE student_id = ? AND check_id = ?", where)
            connection.execute("UPDATE grades SET adjustment = NULL WHERE student_id = ? AND check_id = ?", where)

    @staticmethod
    def _check_revision(connection, answer: Answer, revision, answer_sha256) -> None:
        """Refuse a write based on another state of this answer than the database's."""
        if answer_sha256 != answer.sha256:
            raise ReviewError(STALE, "this answer changed since the page was loaded (its submission was regraded): it is "
                                     "shown as it is now; nothing was changed")
        row = connection.execute("SELECT revision, updated_by, updated_at FROM grades WHERE student_id = ? AND check_id = ?",
                                 (answer.student_id, answer.check_id)).fetchone()
        now = row["revision"] if row is not None else 0
        try:
            seen = int(revision)
        except (TypeError, ValueError):
            raise ReviewError(BAD_INPUT, "the page did not say which revision of the grade it showed: reload it") from None
        if seen != now and row is None:
            raise ReviewError(STALE, "the page showed a grade this answer does not have: it is shown as it is now; "
                                     "nothing was changed")
        if seen != now:
            raise ReviewError(STALE, f"{row['updated_by']} changed this answer's grade at {_when(row['updated_at'])} while "
                                     "you had it open: it is shown as it is now. Your change was not saved; make it "
                                     "again if it is still right")

    def _with_view(self, refusal: ReviewError, check_id: str, key: str) -> ReviewError:
        """`refusal`, carrying the answer as the database holds it now (read after the refused
        transaction was rolled back)."""
        if refusal.current is None:
            try:
                refusal.current = self.view(check_id, key)
            except ReviewError:
                pass  # the answer itself is gone: the message says so
        return refusal

    @staticmethod
    def _own(connection, who: str, answer: Answer) -> None:
        """The grade row this write changes, made for the answer as it is now, its revision moved on."""
        row = connection.execute("SELECT answer_sha256, revision FROM grades WHERE student_id = ? AND check_id = ?",
                                 (answer.student_id, answer.check_id)).fetchone()
        now = time.time()
        if row is None:
            connection.execute("INSERT INTO grades (student_id, check_id, answer_sha256, adjustment, comment, revision, "
                               "updated_by, updated_at) VALUES (?, ?, ?, NULL, '', 1, ?, ?)",
                               (answer.student_id, answer.check_id, answer.sha256, who, now))
            return
        if row["answer_sha256"] != answer.sha256:  # a grade of an earlier answer: this one starts afresh
            connection.execute("DELETE FROM applied WHERE student_id = ? AND check_id = ?", (answer.student_id, answer.check_id))
            connection.execute("UPDATE grades SET answer_sha256 = ?, adjustment = NULL, comment = '' "
                               "WHERE student_id = ? AND check_id = ?", (answer.sha256, answer.student_id, answer.check_id))
        connection.execute("UPDATE grades SET revision = revision + 1, updated_by = ?, updated_at = ? "
                           "WHERE student_id = ? AND check_id = ?", (who, now, answer.student_id, answer.check_id))

    def _live_item(self, connection, check_id: str, item_id) -> dict:
        row = self._item_row(connection, item_id)
        if row["check_id"] != check_id:
            raise ReviewError(GONE, "that rubric item is not one of this question's: reload the page")
        if row["deleted"]:
            raise _deleted(row)
        return row

    # ------------------------------------------------------------------------ rubric items

    def create_item(self, who: str, check_id: str, *, points, text, apply_to: dict | None = None) -> dict:
        """A new rubric item of a question, applied at once to the answer `apply_to` names
        ({"key", "revision", "answer_sha256"}, as for `act`) when given."""
        who = reviewer_name(who)
        index = self.index
        question = self._question(index, check_id)
        points = _number(points, "an item's points", question.max_score)
        text = _text(text, "the item's text", ITEM_TEXT_LIMIT, required=True)
        answer = self._answer(index, check_id, str(apply_to.get("key"))) if apply_to else None
        try:
            with self.db.write() as connection:
                if answer is not None:
                    self._check_revision(connection, answer, apply_to.get("revision"), apply_to.get("answer_sha256"))
                item_id = connection.execute(
                    "INSERT INTO items (check_id, points, text, created_by, updated_by, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (check_id, points, text, who, who, time.time())).lastrowid
                if answer is not None:
                    self._own(connection, who, answer)
                    connection.execute("INSERT INTO applied (student_id, check_id, item_id) VALUES (?, ?, ?)",
                                       (answer.student_id, check_id, item_id))
        except ReviewError as refusal:
            raise self._with_view(refusal, check_id, answer.key) if answer is not None else refusal from None
        if answer is None:
            return self.item(item_id)
        self.mark_dirty([answer.student_id])
        return self.view(check_id, answer.key)

    def _holders(self, connection, index: Index, item) -> list[str]:
        """The students whose grade of the answer they have now holds the item."""
        answers = {a.student_id: a for a in index.answers.get(item["check_id"], {}).values()}
        rows = connection.execute("SELECT g.student_id, g.answer_sha256 FROM applied a JOIN grades g "
                                  "ON g.student_id = a.student_id AND g.check_id = a.check_id WHERE a.item_id = ?",
                                  (item["id"],)).fetchall()
        return sorted(row["student_id"] for row in rows
                      if row["student_id"] in answers and answers[row["student_id"]].sha256 == row["answer_sha256"])

    def item(self, item_id) -> dict:
        """One rubric item, with how many answers hold it (what a change of it re-scores)."""
        with self.db.read() as connection:
            row = self._item_row(connection, item_id)
            holders = self._holders(connection, self.index, row)
        return {"id": row["id"], "check_id": row["check_id"], "points": row["points"], "text": row["text"],
                "version": row["version"], "deleted": bool(row["deleted"]), "uses": len(holders),
                "by": row["updated_by"], "at": _when(row["updated_at"])}

    @staticmethod
    def _item_row(connection, item_id):
        try:
            wanted = int(item_id)
        except (TypeError, ValueError):
            raise ReviewError(BAD_INPUT, "no rubric item named") from None
        row = connection.execute("SELECT * FROM items WHERE id = ?", (wanted,)).fetchone()
        if row is None:
            raise ReviewError(GONE, "there is no such rubric item: reload the page")
        return row

    def update_item(self, who: str, item_id, *, version, uses, points, text) -> dict:
        """Change an item's points or text: every answer that holds it is re-scored. `uses` is
        how many the page said that is; when it is another number now, nothing changes."""
        return self._change_item(who, item_id, version, uses, points=points, text=text)

    def delete_item(self, who: str, item_id, *, version, uses) -> dict:
        """Delete an item: it is taken off every answer that holds it (`uses`, as for update_item)."""
        return self._change_item(who, item_id, version, uses, delete=True)

    def _change_item(self, who, item_id, version, uses, *, points=None, text=None, delete=False) -> dict:
        who = reviewer_name(who)
        index = self.index
        with self.db.read() as connection:
            question = self._question(index, self._item_row(connection, item_id)["check_id"])
        if not delete:
            points = _number(points, "an item's points", question.max_score)
            text = _text(text, "the item's text", ITEM_TEXT_LIMIT, required=True)
        try:
            with self.db.write() as connection:
                row = self._item_row(connection, item_id)
                if row["deleted"]:
                    raise _deleted(row)
                if str(row["version"]) != str(version):
                    raise ReviewError(STALE, f"{row['updated_by']} changed this item at {_when(row['updated_at'])}: it is "
                                             f"now {format_points(row['points'])} points, \"{row['text']}\". Nothing was "
                                             "changed: look at it again")
                holders = self._holders(connection, index, row)
                if str(len(holders)) != str(uses):
                    raise ReviewError(STALE, f"the item is applied to {len(holders)} answers now, not {uses}: nothing was "
                                             "changed; look again before you change it")
                now = time.time()
                if delete:
                    everyone = [r["student_id"] for r in connection.execute(
                        "SELECT student_id FROM applied WHERE item_id = ?", (row["id"],))]
                    connection.execute("DELETE FROM applied WHERE item_id = ?", (row["id"],))
                    connection.executemany("UPDATE grades SET revision = revision + 1, updated_by = ?, updated_at = ? "
                                           "WHERE student_id = ? AND check_id = ?",
                                           [(who, now, sid, row["check_id"]) for sid in everyone])
                    connection.execute("UPDATE items SET deleted = 1, version = version + 1, updated_by = ?, updated_at = ? "
                                       "WHERE id = ?", (who, now, row["id"]))
                else:
                    connection.execute("UPDATE items SET points = ?, text = ?, version = version + 1, updated_by = ?, "
                                       "updated_at = ? WHERE id = ?", (points, text, who, now, row["id"]))
        except ReviewError as refusal:
            if refusal.current is None and refusal.status == STALE:
                refusal.current = self.item(item_id)
            raise
        self.mark_dirty(holders)
        return {"item": self.item(item_id), "rescored": len(holders)}

    # ------------------------------------------------------------------------ the CSV path and the batch

    def import_grades(self, who: str, grades: dict[str, dict[str, dict]], report: MergeReport) -> MergeReport:
        """Scores from a CSV (graders.batch.merge.read_manual_csv's rows) into the database, as
        `grade merge` merges them into results: clamped to [0, the question's points], the
        comment replaced; items already given stay, and the adjustment makes up the rest.
        All rows in one transaction."""
        who = reviewer_name(who)
        index = self.refresh()
        changed: set[str] = set()
        with self.db.write() as connection:
            for student_id in sorted(grades):
                if student_id not in index.signatures:
                    report.unknown_students.append(student_id)
                    continue
                answers = {answer.check_id: answer for answer in index.by_student.get(student_id, [])}
                for check_id, grade in grades[student_id].items():
                    answer = answers.get(check_id) or answers.get(PREFIX + check_id)
                    if answer is None:
                        report.unknown_checks.append(f"{student_id}: {check_id} (line {grade['line']}): not a written "
                                                     "answer of this graded submission")
                        continue
                    if self._import_one(connection, who, index, answer, grade, report):
                        changed.add(student_id)
        report.rewritten = sorted(changed)
        self.mark_dirty(changed)
        return report

    def _import_one(self, connection, who: str, index: Index, answer: Answer, grade: dict, report: MergeReport) -> bool:
        question = index.questions[answer.check_id]
        given = round(min(max(grade["score"], 0.0), question.max_score), 4)
        if given != grade["score"]:
            report.clamped.append(f"{answer.student_id}: {answer.check_id}: {grade['score']:g} -> {given:g}")
        comment = _text(grade.get("comment"), "the comment", COMMENT_LIMIT, required=False)
        rows, applied = self._grades_of_student(connection, answer)
        points = {row["id"]: row["points"] for row in self._items(connection, answer.check_id)}
        standing = self._standing(answer, rows, applied, points, question.max_score)
        if standing["graded"] and standing["score"] == given and standing["comment"] == comment:
            report.unchanged.append((answer.student_id, answer.check_id))
            return False
        self._own(connection, who, answer)
        held = [points[i] for i in standing["items"] if i in points]
        adjustment = None if held and score_of(held, None, question.max_score) == given else round(given - sum(held), 4)
        connection.execute("UPDATE grades SET adjustment = ?, comment = ? WHERE student_id = ? AND check_id = ?",
                           (adjustment, comment, answer.student_id, answer.check_id))
        report.applied.append((answer.student_id, answer.check_id, given))
        return True

    @staticmethod
    def _grades_of_student(connection, answer: Answer) -> tuple:
        row = connection.execute("SELECT * FROM grades WHERE student_id = ? AND check_id = ?",
                                 (answer.student_id, answer.check_id)).fetchone()
        applied = [r["item_id"] for r in connection.execute(
            "SELECT item_id FROM applied WHERE student_id = ? AND check_id = ? ORDER BY item_id",
            (answer.student_id, answer.check_id))]
        return row, applied

    def adopt_hand_scores(self) -> int:
        """Hand scores results.json holds for an answer the desk never graded (merged before
        the desk existed, or by hand): recorded as grades, so that the database stays the one
        record and publishing never takes them back. How many."""
        index = self.index
        adopted = 0
        with self.db.write() as connection:
            for answers in index.answers.values():
                for answer in answers.values():
                    if answer.hand is None:
                        continue
                    row, _ = self._grades_of_student(connection, answer)
                    if row is not None and row["answer_sha256"] == answer.sha256:
                        continue
                    self._own(connection, ADOPTED_BY, answer)
                    connection.execute("UPDATE grades SET adjustment = ?, comment = ? WHERE student_id = ? AND check_id = ?",
                                       (answer.hand["score"], answer.hand["comment"],
                                        answer.student_id, answer.check_id))
                    adopted += 1
        return adopted

    def desired(self, student_ids) -> dict[str, dict[str, tuple[Desired | None, float]]]:
        """What results.json should say of each written answer of these students that the desk
        has a grade row for: {student_id: {check_id: (Desired, or None for "not graded", when)}}.
        Answers the desk never touched are left out (left as they are)."""
        index = self.index
        wanted: dict[str, dict[str, tuple[Desired | None, float]]] = {}
        with self.db.read() as connection:
            items = {row["id"]: row for row in connection.execute("SELECT * FROM items WHERE deleted = 0")}
            rows = {(row["student_id"], row["check_id"]): row for row in connection.execute("SELECT * FROM grades")}
            applied: dict[tuple[str, str], list[int]] = {}
            for row in connection.execute("SELECT * FROM applied ORDER BY item_id"):
                applied.setdefault((row["student_id"], row["check_id"]), []).append(row["item_id"])
        for student_id in sorted(set(student_ids) & set(index.by_student)):
            for answer in index.by_student[student_id]:
                row = rows.get((student_id, answer.check_id))
                if row is None:
                    continue
                question = index.questions[answer.check_id]
                points = {i: items[i]["points"] for i in applied.get((student_id, answer.check_id), []) if i in items}
                standing = self._standing(answer, row, list(points), points, question.max_score)
                want = (Desired(score=standing["score"], comment=standing["comment"],
                                items=tuple((items[i]["text"], items[i]["points"]) for i in standing["items"]))
                        if standing["graded"] else None)
                wanted.setdefault(student_id, {})[answer.check_id] = (want, row["updated_at"])
        return wanted


def _deleted(item) -> ReviewError:
    return ReviewError(GONE, f"the rubric item \"{item['text']}\" was deleted by {item['updated_by']} at "
                             f"{_when(item['updated_at'])}; nothing was changed")


def _bins(maximum: float) -> int:
    """A bar per point of a question worth a few (a bar per half point below 3), ten at most."""
    if maximum <= 0:
        return 1
    return max(1, min(10, int(maximum * 2) if maximum < 3 else int(math.ceil(maximum))))
