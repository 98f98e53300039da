"""Manual scores of written answers, merged into the results without regrading.

    grade merge MANUAL.csv --out DIR

MANUAL.csv has the columns student_id, check_id, score, comment (comment optional; other
columns, such as those `grade answers` writes, are passed over, and so is a row whose score is
empty). check_id is a check's id as in results.json (`<part>.<question>`); the part's prefix may
be left out.
For each row, the check (status pending_manual, or graded by hand before) gets the score, clamped
to [0, its max_score], status passed when the score is at least half its max and failed below,
the comment in details.comment; the part's score and the total follow. The student's reports
are rendered again and the gradebook and summary rebuilt. Merging the same file twice changes
nothing; a later row for the same (student, check) wins.

The merged scores are also kept in DIR/manual.json with the hash of the input they were given
for, so a regrade of the same input (a new grader version) gets them back automatically; a new
input from the student leaves the answer pending again.

The review desk (`grade review`, graders/review/) writes through the same functions: its scores
also carry the rubric items given and the answer's hash (kept after a regrade while the answer
is unchanged), and a grade it takes back is withdrawn (`withdraw_one`).
"""

from __future__ import annotations

import codecs
import copy
import csv
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from graders.atomic import write_atomically
from graders.batch import store
from graders.batch.gradebook import rebuild
from graders.scoring import totals

MANUAL = "pending_manual"
MANUAL_JSON = "manual.json"
PREFIX = "answers."
# What a written answer says before a person grades it, as graders/checks/questions.py writes it
# (whose text the golden answers' fingerprint covers): withdraw_one puts it back.
WAITING_FOR_A_GRADER = "waiting for a grader"
BLANK_ANSWER = "no answer written for: {question}"


@dataclass
class MergeReport:
    applied: list[tuple[str, str, float]] = field(default_factory=list)  # changed a results.json
    unchanged: list[tuple[str, str]] = field(default_factory=list)  # already so
    clamped: list[str] = field(default_factory=list)
    unknown_students: list[str] = field(default_factory=list)
    unknown_checks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unreadable rows, checks that are not written answers
    rewritten: list[str] = field(default_factory=list)  # students whose reports were rendered again
    not_graded: list[str] = field(default_factory=list)  # rows whose score is still empty
    blank_kept: list[str] = field(default_factory=list)  # of those, blank answers (`grade answers`' status): 0 stays

    @property
    def ok(self) -> bool:
        return not (self.unknown_students or self.unknown_checks or self.problems)

    def lines(self) -> list[str]:
        out = [f"merged {len(self.applied)} score(s) into {len(self.rewritten)} submission(s); "
               f"{len(self.unchanged)} already up to date"]
        if self.not_graded or self.blank_kept:
            said = [f"{len(self.not_graded)} written answer(s) not graded yet"] if self.not_graded else []
            said += [f"{len(self.blank_kept)} left blank, which keep 0 points"] if self.blank_kept else []
            out.append(f"{len(self.not_graded) + len(self.blank_kept)} row(s) without a score passed over: "
                       + ", ".join(said))
        for label, items in (("clamped", self.clamped), ("unknown student ids", self.unknown_students),
                             ("unknown check ids", self.unknown_checks), ("problems", self.problems)):
            if items:
                out.append(f"{label} ({len(items)}):")
                out.extend(f"  {item}" for item in items)
        return out


def spreadsheet_text(path: Path) -> str:
    """A CSV's text as a spreadsheet saves it: UTF-8 (with Excel's byte-order mark or not), or
    UTF-16 ("Unicode Text"); ValueError, with the fix, for another encoding."""
    data = Path(path).read_bytes()
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 (byte 0x{data[error.start]:02x} at {error.start}): save it from the "
                         "spreadsheet as CSV UTF-8") from None


def read_manual_csv(path: Path, report: MergeReport) -> dict[str, dict[str, dict]]:
    text = spreadsheet_text(path)
    # A spreadsheet set to a language whose decimal mark is a comma saves ";"; "Unicode Text" is tab-separated.
    header = text.splitlines()[0] if text else ""
    delimiter = max((",", ";", "\t"), key=header.count)
    reader = csv.DictReader(text.splitlines(), delimiter=delimiter)
    needed = {"student_id", "check_id", "score"}
    if not reader.fieldnames or not needed <= {f.strip() for f in reader.fieldnames}:
        raise ValueError(f"{path}: the columns must be student_id, check_id, score[, comment]")
    grades: dict[str, dict[str, dict]] = {}
    for number, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None}
        sid, cid, raw = row.get("student_id", ""), row.get("check_id", ""), row.get("score", "")
        if not sid and not cid and not raw:
            continue
        if sid and cid and not raw:  # a row of `grade answers` nobody has graded yet
            (report.blank_kept if row.get("status") == "blank" else report.not_graded).append(f"{sid}: {cid}")
            continue
        try:
            score = float(raw if delimiter == "," else raw.replace(",", "."))  # 3,5 where ";" separates
            if not math.isfinite(score):
                raise ValueError
        except ValueError:
            report.problems.append(f"line {number}: score {raw!r} of {sid}/{cid} is not a number")
            continue
        if not sid or not cid:
            report.problems.append(f"line {number}: empty student_id or check_id")
            continue
        grades.setdefault(sid, {})[cid] = {"score": score, "comment": row.get("comment", ""), "line": number}
    return grades


def _find_check(results: dict, check_id: str):
    for part in results.get("parts") or []:
        for chk in part.get("checks") or []:
            if chk.get("id") in (check_id, PREFIX + check_id):
                return part, chk
    return None, None


def is_written_answer(chk: dict) -> bool:
    """A written answer: pending, merged before, or left blank or unreadable (failed, but a
    person's to grade all the same)."""
    return chk.get("status") == MANUAL or chk.get("graded_by_hand") is True or "manual" in (chk.get("details") or {})


def apply_one(results: dict, check_id: str, score: float, comment: str, items=()) -> tuple[bool, float]:
    """Set one written answer's score in `results` (in place). (changed?, the score used).
    `items`: the rubric items it was given ({"text", "points"} each; `grade review`), shown
    with their points in the reports."""
    part, chk = _find_check(results, check_id)
    maximum = float(chk.get("max_score") or 0.0)
    given = round(min(max(score, 0.0), maximum), 4)
    before = copy.deepcopy(chk)
    details = dict(chk.get("details") or {})
    details["manual"] = {"score": given, "max_score": maximum, "given": score}
    if items:
        details["manual"]["items"] = [{"text": str(item["text"]), "points": float(item["points"])} for item in items]
    if comment:
        details["comment"] = comment
    else:
        details.pop("comment", None)
    chk["details"] = details
    chk["score"] = given
    chk["status"] = "passed" if maximum > 0 and given >= maximum / 2 else "failed"
    chk["message"] = f"graded by hand: {given:g} / {maximum:g}" + (f" ({comment})" if comment else "")
    if chk == before:
        return False, given
    _rescore(results, part)
    return True, given


def withdraw_one(results: dict, check_id: str) -> bool:
    """Take a hand score back (in place): the written answer is pending again, or blank as the
    grade left it. Whether anything changed."""
    part, chk = _find_check(results, check_id)
    details = dict(chk.get("details") or {})
    if "manual" not in details:
        return False
    details.pop("manual")
    details.pop("comment", None)
    chk["details"] = details
    chk["score"] = 0.0
    if details.get("answer"):
        chk["status"], chk["message"] = MANUAL, WAITING_FOR_A_GRADER
    else:
        chk["status"] = "failed"
        chk["message"] = BLANK_ANSWER.format(question=details.get("question") or chk.get("title") or "")
    _rescore(results, part)
    return True


def answer_sha256(chk: dict) -> str:
    """The hash of a written answer's text: a hand score is for this text (a regrade that leaves
    it unchanged keeps the score)."""
    details = chk.get("details") if isinstance(chk.get("details"), dict) else {}
    return hashlib.sha256(str(details.get("answer") or "").encode()).hexdigest()


def _rescore(results: dict, part: dict) -> None:
    """The part's score again, and the totals by the one definition of a grade's
    (graders.scoring.totals): a provisional part stays out of them unless the grade counted it."""
    checks = part.get("checks") or []
    maximum = sum(float(c.get("max_score") or 0) for c in checks)
    earned = sum(float(c.get("score") or 0) for c in checks)
    points = float(part.get("max_score") or 0)
    part["score"] = round(points * earned / maximum, 4) if maximum > 0 else 0.0
    provisional = results.get("provisional")
    results.update(totals(results.get("parts") or [], isinstance(provisional, dict) and provisional.get("counted") is True))


def apply_stored_manual(out: Path, student_id: str, results: dict) -> int:
    """Re-apply the merged manual scores of `student_id` to fresh results of the same input, or
    of the same answer where the score records the answer's hash (`grade review`'s)."""
    stored = load_stored(out).get(student_id) or {}
    applied = 0
    sha = (results.get("batch") or {}).get("input_sha256")
    for check_id, grade in stored.items():
        _, chk = _find_check(results, check_id)
        if chk is None or not is_written_answer(chk):
            continue
        same = grade["answer_sha256"] == answer_sha256(chk) if grade.get("answer_sha256") else grade.get("input_sha256") == sha
        if same:
            apply_one(results, check_id, grade["score"], grade.get("comment", ""), grade.get("items") or ())
            applied += 1
    return applied


def load_stored(out: Path) -> dict:
    try:
        return json.loads((Path(out) / MANUAL_JSON).read_text())
    except (OSError, ValueError):
        return {}


def replace_stored(out: Path, grades: dict[str, dict[str, dict | None]]) -> None:
    """Set the stored manual scores of some answers, {student_id: {check_id: entry, or None to
    remove it}}, the others left as they are."""
    stored = load_stored(out)
    for student_id, entries in grades.items():
        for check_id, entry in entries.items():
            if entry is None:
                stored.get(student_id, {}).pop(check_id, None)
            else:
                stored.setdefault(student_id, {})[check_id] = entry
        if stored.get(student_id) == {}:
            del stored[student_id]
    _save_stored(out, stored)


def _save_stored(out: Path, stored: dict) -> None:
    write_atomically(Path(out) / MANUAL_JSON, json.dumps(stored, indent=1, sort_keys=True))


def merge_manual(csv_path: Path, out: Path, assignment=None) -> MergeReport:
    """Merge the manual scores of `csv_path` into the batch at `out`, and rebuild its gradebook
    (its parts in `assignment`'s rubric order, where it is known)."""
    out = Path(out)
    report = MergeReport()
    grades = read_manual_csv(Path(csv_path), report)
    with store.RunLock(out):
        stored = load_stored(out)
        for student_id in sorted(grades):
            folder = store.result_dir(out, student_id)
            try:
                results = json.loads((folder / "results.json").read_text())
            except (OSError, ValueError):
                report.unknown_students.append(student_id)
                continue
            if store.outcome_of(results) != store.GRADED:
                report.problems.append(f"{student_id}: the submission was not graded ({store.outcome_of(results)}); "
                                       "nothing to merge into")
                continue
            changed = False
            sha = (results.get("batch") or {}).get("input_sha256") or (results.get("submission") or {}).get("sha256")
            for check_id, grade in grades[student_id].items():
                _, chk = _find_check(results, check_id)
                if chk is None:
                    report.unknown_checks.append(f"{student_id}: {check_id} (line {grade['line']})")
                    continue
                if not is_written_answer(chk):
                    report.problems.append(f"{student_id}: {chk.get('id')} is graded automatically, not by hand "
                                           f"(line {grade['line']})")
                    continue
                did, given = apply_one(results, chk["id"], grade["score"], grade["comment"])
                if given != grade["score"]:
                    report.clamped.append(f"{student_id}: {chk['id']}: {grade['score']:g} -> {given:g}")
                stored.setdefault(student_id, {})[chk["id"]] = {"score": grade["score"], "comment": grade["comment"],
                                                                "input_sha256": sha, "merged_at": time.time()}
                if did:
                    changed = True
                    report.applied.append((student_id, chk["id"], given))
                else:
                    report.unchanged.append((student_id, chk["id"]))
            if changed:
                store.rewrite(folder, results)
                report.rewritten.append(student_id)
        _save_stored(out, stored)
        rebuild(out, assignment)
    return report
