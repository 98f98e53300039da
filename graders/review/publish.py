"""From the database to the batch: each graded answer into its results.json through the path of
`grade merge` (graders.batch.merge.apply_one, or withdraw_one for a grade taken back), the
student's reports rendered again (store.rewrite: report.html, feedback.html with the items and
the comment, gradescope.json), the scores kept in manual.json with the answer's hash (so a
regrade that leaves the answer as it was keeps them), and gradebook.csv and summary.html rebuilt.
Nothing is regraded. `grade export` then reads the totals as after a merge.

It writes under the batch's run lock, as `grade merge` does: while a `grade batch` (or a merge)
holds the folder, nothing is written, the database keeps every action, and the next attempt
publishes them.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback

from graders.batch import store
from graders.batch.gradebook import rebuild
from graders.batch.merge import apply_one, replace_stored, withdraw_one
from graders.review.desk import Desk

POLL_S = 2.0  # how often the batch folder is looked at for a regrade's results
GATHER_S = 0.3  # actions that come in a burst are published together
REVIEWED_BY = "grade review"


class Publisher:
    """Brings the batch folder in line with the desk's database."""

    def __init__(self, desk: Desk, assignment=None):
        self.desk = desk
        self.assignment = assignment  # the gradebook's parts in its rubric's order, as `grade merge` does
        self.published_at: float | None = None
        self.busy = False  # the last attempt found the batch folder held by another command
        self._regraded = False  # the batch changed on disk and that has not been published over yet

    def sync(self, everyone: bool = True) -> bool:
        """Publish the grades of the students the desk marked as changed (everyone's, and the
        gradebook rebuilt whatever changed, when `everyone`). False when the batch folder is
        busy: nothing was written, and they stay marked."""
        out = self.desk.out
        try:
            lock = store.RunLock(out).__enter__()
        except RuntimeError:
            self.busy = True
            return False
        students = self.desk.take_dirty()
        try:
            index = self.desk.refresh()
            everyone = self.desk.adopt_hand_scores() > 0 or everyone
            rewritten = self._write(index, set(index.by_student) if everyone else students)
            if rewritten or everyone:
                rebuild(out, self.assignment)
        except BaseException:
            self.desk.mark_dirty(students)
            raise
        finally:
            lock.__exit__(None, None, None)
        self.desk.refresh()  # the index sees what was just written
        self.busy = False
        self.published_at = time.time()
        return True

    def _write(self, index, students: set[str]) -> int:
        """Each of `students`' results.json as the database says, and manual.json; how many changed."""
        out = self.desk.out
        stored: dict[str, dict[str, dict | None]] = {}
        rewritten = 0
        for student_id, answers in sorted(self.desk.desired(students).items()):
            results = store.read_results(out, student_id)
            if results is None or store.outcome_of(results) != store.GRADED:
                continue
            changed = False
            sha = (results.get("batch") or {}).get("input_sha256") or (results.get("submission") or {}).get("sha256")
            hashes = {answer.check_id: answer.sha256 for answer in index.by_student[student_id]}
            for check_id, (want, when) in answers.items():
                if want is None:
                    changed |= withdraw_one(results, check_id)
                    stored.setdefault(student_id, {})[check_id] = None
                    continue
                did, _ = apply_one(results, check_id, want.score, want.comment, want.entry()["items"])
                changed |= did
                stored.setdefault(student_id, {})[check_id] = {
                    **want.entry(), "input_sha256": sha, "answer_sha256": hashes[check_id], "merged_at": when,
                    "by": REVIEWED_BY}
            if changed:
                store.rewrite(store.result_dir(out, student_id), results)
                rewritten += 1
        if stored:
            replace_stored(out, stored)
        return rewritten

    def publish_waiting(self) -> bool:
        """Publish what the desk marked since the last time, and everything when the batch
        changed on disk meanwhile (a regrade). False when it has to wait (kept for later)."""
        before = self.desk.index
        self._regraded |= self.desk.refresh() is not before
        if not self.desk.waiting and not self._regraded:
            return True
        try:
            done = self.sync(everyone=self._regraded)
        except Exception:  # noqa: BLE001 - the server goes on; the database holds every action
            traceback.print_exc()
            return False
        self._regraded &= not done
        return done


class PublisherThread(threading.Thread):
    """The server's publisher: publishes shortly after each action, and after a regrade."""

    def __init__(self, publisher: Publisher):
        super().__init__(name="review-publisher", daemon=True)
        self.publisher = publisher
        self._stopping = threading.Event()

    def run(self) -> None:
        desk = self.publisher.desk
        while not self._stopping.is_set():
            desk.changed.wait(timeout=POLL_S)
            if self._stopping.is_set():
                break
            time.sleep(GATHER_S)
            desk.changed.clear()
            self.publisher.publish_waiting()

    def stop(self) -> bool:
        """Stop, and publish what is left. False when some could not be (the folder is busy)."""
        self._stopping.set()
        self.publisher.desk.changed.set()
        self.join()
        done = self.publisher.publish_waiting()
        if not done:
            print(f"grade review: {self.publisher.desk.waiting} student(s)' grades are saved in the database but not yet "
                  "in the gradebook (the batch folder is busy): run `grade review DIR --publish` later", file=sys.stderr)
        return done
