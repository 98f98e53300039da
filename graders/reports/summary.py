"""Wording and small text helpers shared by every renderer.

All renderers read the same results.json, so they must also say the same thing about it: the
headline sentence, how points are written and how student-supplied text is clipped live here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graders.scoring import totals

from .figures import MANUAL, Points, check_points, checks_of, figures, is_graded_by_hand, is_rejected, number

# Written answers wait for a person (MANUAL): they are neither passed nor failed checks.
STATUS_LABELS = {
    "passed": "passed",
    "failed": "failed",
    "error": "error",
    "skipped": "skipped",
    MANUAL: "awaiting manual grading",
}
# How the reports show a written answer a person has given points (`grade merge`): its points say
# how it went, and 2 / 5 is partial credit, not a failure.
GRADED_BY_HAND = "graded by hand"


def merged_by_hand(check: dict) -> bool:
    """A written answer that a person has graded (`grade merge` recorded its points)."""
    details = check.get("details")
    return isinstance(details, dict) and isinstance(details.get("manual"), dict)


@dataclass(frozen=True)
class CheckCounts:
    automatic: int  # checks graded by the machine (everything but written answers)
    passed: int
    manual: int
    hidden: int


def all_checks(results: dict):
    for part in results.get("parts") or []:
        yield from part.get("checks") or []


def count_checks(results: dict) -> CheckCounts:
    """Written answers, written or blank, are never among the automatic checks: a blank one
    counted as a failed check would make the template's denominator larger than a perfect copy's."""
    checks = list(all_checks(results))
    automatic = [c for c in checks if not is_graded_by_hand(c)]
    return CheckCounts(
        automatic=len(automatic),
        passed=sum(1 for c in automatic if c.get("status") == "passed"),
        manual=len(checks) - len(automatic),
        hidden=sum(1 for c in checks if c.get("visibility") == "hidden"),
    )


def ungraded_title(results: dict) -> str:
    if results.get("status") == "error":
        return "Not graded: the grading infrastructure failed (it will be retried)"
    return "Submission rejected"


UNSAFE_WARNING = ("NOT ISOLATED: graded with --unsafe-no-sandbox; the student's code ran without full "
                  "isolation and could have changed this result")


def isolation_warning(results: dict) -> str | None:
    """The warning every output of an unsafe instructor grade carries, or None."""
    sandbox = results.get("sandbox")
    return UNSAFE_WARNING if isinstance(sandbox, dict) and sandbox.get("unsafe") is True else None


def provisional_note(results: dict) -> str | None:
    """How the provisional points (smoke-mode fine-tuning) stand to the total, or None."""
    provisional = results.get("provisional")
    if not isinstance(provisional, dict) or is_rejected(results):
        return None
    points = f"{format_points(provisional.get('score'))} / {format_points(provisional.get('max_score'))}"
    if provisional.get("counted"):
        return f"the total includes {points} provisional points, which may still change"
    return f"plus {points} provisional points, not in the total (they may still change)"


def provisional_reason(part: dict) -> str:
    """Why a provisional part's score may still change (its `note`), without a "Provisional:" of
    its own at the start: every renderer puts its own label before it."""
    note = one_line(part.get("note"), 2_000)
    return re.sub(r"^provisional\s*[:.-]\s*", "", note, flags=re.IGNORECASE) or "its score may still change"


def visible_only(results: dict) -> dict:
    """`results` as a student may see them before the due date: hidden checks taken out, the
    points of a part that has some summed over the visible checks that remain (a part without
    one keeps its `figures`), and the totals over those parts (graders.scoring.totals,
    provisional points apart as the grade had them). Everything a student is shown before the
    due date is computed from it, so that resubmitting cannot tell a student how a hidden check
    went."""
    if is_rejected(results):
        return results
    parts = []
    for part, points in zip(results.get("parts") or [], figures(results).parts):
        if not isinstance(part, dict):
            continue
        every = checks_of(part)
        checks = [c for c in every if c.get("visibility") != "hidden"]
        if len(checks) < len(every):
            points = Points(round(sum(check_points(c).score for c in checks), 4),
                            round(sum(check_points(c).max_score for c in checks), 4))
        parts.append({**part, "checks": checks, "score": points.score, "max_score": points.max_score})
    provisional = results.get("provisional")
    view = {key: value for key, value in results.items() if key != "provisional"}
    shown_parts = [part for part in parts if part["checks"]]
    return {**view, "parts": shown_parts,
            **totals(shown_parts, isinstance(provisional, dict) and provisional.get("counted") is True)}


def is_self_check(results: dict) -> bool:
    return results.get("mode") == "self-check"


def rejection_reason(results: dict) -> str:
    return str(results.get("reason") or "no reason was recorded")


def headline(results: dict) -> str:
    """One sentence saying how the checks went.

    In self-check mode only public checks ran, so the sentence says so: a student who reads
    "all tests passed" and then loses points to hidden checks feels cheated (otter-grader #138).
    """
    if is_rejected(results):
        return f"Submission rejected: {rejection_reason(results)}"
    counts = count_checks(results)
    if is_self_check(results):
        sentence = (
            f"{counts.passed}/{counts.automatic} public checks passed"
            " — hidden checks run after the deadline"
        )
    else:
        sentence = f"{counts.passed}/{counts.automatic} checks passed"
    blank = sum(1 for c in all_checks(results) if is_graded_by_hand(c) and c.get("status") == "failed"
                and not merged_by_hand(c))
    if counts.manual - blank:
        noun = "answer awaits" if counts.manual - blank == 1 else "answers await"
        sentence += f"; {counts.manual - blank} written {noun} manual grading"
    if blank:
        sentence += f"; {blank} written answer{'s' if blank != 1 else ''} not written yet"
    numeric = [entry for entry in after_deadline(results) if entry.get("kind") == "numeric"]
    if numeric:
        points = format_points(sum(number(entry.get("points")) for entry in numeric))
        unread = sum(1 for entry in numeric if entry.get("state") != NUMBER_PENDING)
        sentence += (f"; {len(numeric)} numeric answer{'s' if len(numeric) != 1 else ''} ({points} points) graded "
                     f"after the due date" + (f", {unread} not yet a number" if unread else ""))
    for entry in after_deadline(results):
        if entry.get("kind") == "part":
            sentence += f"; {one_line(entry.get('title'), 80)} ({format_points(entry.get('points'))} points) graded after the due date"
    return sentence


# A numeric answer that reads as a number: the self-check cannot say more (whether it is right
# is a hidden check's outcome).
NUMBER_PENDING = "graded after the due date"


def after_deadline(results: dict) -> list[dict]:
    """What a self-check left to the instructor's grade, each with its points (graders.selfcheck.
    after_the_deadline): numeric answers and parts without a public check; [] otherwise."""
    if not is_self_check(results) or is_rejected(results):
        return []
    return [entry for entry in results.get("after_deadline") or [] if isinstance(entry, dict)]


def after_deadline_rows(results: dict) -> list[tuple[str, str, str]]:
    """(title, points, what happens to it) for each thing a self-check left to the instructor."""
    rows = []
    for entry in after_deadline(results):
        points = f"{format_points(entry.get('points'))} points"
        state = as_text(entry.get("state"))
        if entry.get("kind") == "numeric":
            answer = one_line(entry.get("answer"), 40)
            if state == NUMBER_PENDING:
                state = f"{answer}: a number, {state}"
            elif answer:
                state = f"{answer!r}: {state}; write the whole number alone, e.g. 1,234,567"
        else:
            checks = "; ".join(one_line(title, 200) for title in entry.get("checks") or [])
            state = f"{state}, on the course's data and machine ({checks})" if checks else state
            state += "; " + rehearsal_text(entry.get("part"), (results.get("rehearsals") or {}).get(entry.get("part")))
        rows.append((one_line(entry.get("title") or entry.get("id"), 200), points, state))
    return rows


def rehearsal_text(part_id, rehearsed) -> str:
    """What a self-check says of a part graded after the deadline: how to rehearse it here, or
    how its rehearsal went (a smoke run of the student's code, with its figures; never a score)."""
    part = one_line(part_id, 40)
    if not isinstance(rehearsed, list) or not rehearsed:
        return f"`grade check {part}` rehearses it here, in smoke mode (about half a minute; never a score)"
    said = []
    for check in rehearsed:
        if not isinstance(check, dict):
            continue
        curve = (check.get("details") or {}).get("training_curve") or {}
        epochs = [f"epoch {epoch}: loss {_figure(loss)}, validation {_percent(valid)}"
                  for epoch, loss, valid in zip(curve.get("epoch") or [], curve.get("train_loss") or [],
                                                curve.get("valid_acc") or [])]
        said.append(f"{as_text(check.get('status'))}: {one_line(check.get('message'), 300)}"
                    + (f" ({'; '.join(epochs[:10])})" if epochs else ""))
    return "rehearsed here in smoke mode, not a score: " + " | ".join(said)


def _figure(value) -> str:
    return f"{value:.3f}" if type(value) in (int, float) else "?"


def _percent(value) -> str:
    return f"{value:.0%}" if type(value) in (int, float) else "?"


def shown_total(results: dict) -> tuple[float, float]:
    """(score, max_score) as the reports show them (`figures`).

    A self-check totals the automatic public checks only: written answers are graded by hand
    after the deadline, and counting their points as missing would make a perfect homework
    look unfinished. They are listed apart, with their points. An instructor's grade is the
    whole total of results.json."""
    figured = figures(results)
    total = figured.automatic if is_self_check(results) and not is_rejected(results) else figured.total
    return total.score, total.max_score


def score_label(results: dict) -> str:
    return "Score on public automatic checks" if is_self_check(results) else "Score"


def format_points(value) -> str:
    """8.0 -> "8", 7.5 -> "7.5", 0.1 + 0.2 -> "0.3"."""
    try:
        return f"{round(float(value), 2):g}"
    except (TypeError, ValueError):
        return "?"


def points_text(score, max_score) -> str:
    return f"{format_points(score)} / {format_points(max_score)}"


def fraction(score, max_score) -> float:
    try:
        score, max_score = float(score), float(max_score)
    except (TypeError, ValueError):
        return 0.0
    if max_score <= 0:
        return 1.0
    return min(max(score / max_score, 0.0), 1.0)


def as_text(value) -> str:
    return "" if value is None else str(value)


def clip(text, limit: int) -> str:
    """Keep the head and the tail of a long text: a traceback's or a log's end says most."""
    text = as_text(text)
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n… [{cut:,} characters cut] …\n{text[-tail:]}"


def one_line(text, limit: int) -> str:
    """Flatten to one printable line.

    Control characters go too: a student's message may carry terminal escape codes, and they
    must not reach the instructor's terminal.
    """
    flat = "".join(ch if ch.isprintable() else " " for ch in as_text(text))
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def printable(line) -> str:
    """One line of a block (a traceback) with its spacing kept: only characters that are not
    printable become spaces, so that escape codes never reach the terminal."""
    return "".join(ch if ch.isprintable() else " " for ch in as_text(line)).rstrip()


def check_summary_line(check: dict) -> str:
    """What a reader should act on first: the diagnosis, else the message."""
    diagnosis = check.get("diagnosis") or {}
    return as_text(diagnosis.get("text")) or as_text(check.get("message"))
