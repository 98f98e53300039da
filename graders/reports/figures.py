"""The points every output shows, computed once from a results.json.

A check's score is what a grade is made of; a part's score is its checks' (graders/scoring.py
shares the part's points among them), and the totals are the parts' (provisional parts apart,
unless counted). Every renderer takes its points from `figures(results)`: the terminal summary,
report.html, feedback.html (over the checks a student may see: `summary.visible_only`),
gradescope.json, the batch's gradebook, summary and LMS exports. So no output can show a total
another does not. A results.json whose own figures disagree with its checks (one edited by hand:
a total of 999, a check given 50 of its 0.89 points) is named by `inconsistencies`: `grade
report` refuses it, and its figures are those its checks give (each check's points held to
[0, its max_score]).

Nothing here assumes a type: a results.json may be hostile or malformed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# A written answer waits for a person; `grade merge` gives it its points.
MANUAL = "pending_manual"
# How far a part's stored points may sit from the sum of its checks' (each rounded to 4 decimals,
# a written answer's rescaled by `grade merge`) before they disagree: far below what a report shows.
TOLERANCE = 0.01


@dataclass(frozen=True)
class Points:
    score: float
    max_score: float

    def __sub__(self, other: Points) -> Points:
        return Points(round(self.score - other.score, 4), round(self.max_score - other.max_score, 4))


@dataclass(frozen=True)
class Figures:
    total: Points  # the grade's: provisional parts left out unless counted; 0 of its maximum when rejected
    parts: tuple[Points, ...]  # each part of results["parts"], in order (a malformed entry: 0 of 0)
    by_hand: Points  # the written answers of the counted parts: a person's points, not the autograder's
    provisional: Points | None  # the provisional parts', whether counted or not; None without any

    @property
    def automatic(self) -> Points:
        """What the autograder itself gives: the total without the written answers (Gradescope's score)."""
        return self.total - self.by_hand


def number(value) -> float:
    """A finite number from a results.json value, 0 for anything else."""
    if isinstance(value, bool):
        return 0.0
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) else 0.0


def is_rejected(results: dict) -> bool:
    """No checks ran: the input was refused, or (status "error") the grading itself failed."""
    return results.get("status") in ("rejected", "error")


def is_graded_by_hand(check: dict) -> bool:
    """A written answer: its points are given by a person, never by the machine (a results.json
    older than the `graded_by_hand` key tells it by its status alone)."""
    return check.get("graded_by_hand") is True or check.get("status") == MANUAL


def checks_of(part) -> list[dict]:
    checks = part.get("checks") if isinstance(part, dict) else None
    return [check for check in checks if isinstance(check, dict)] if isinstance(checks, list) else []


def parts_of(results: dict) -> list:
    parts = results.get("parts")
    return parts if isinstance(parts, list) else []


def check_points(check: dict) -> Points:
    """A check's points, its score held to [0, its max_score]."""
    maximum = max(number(check.get("max_score")), 0.0)
    return Points(min(max(number(check.get("score")), 0.0), maximum), maximum)


def _sum(points) -> Points:
    points = list(points)
    return Points(round(sum(p.score for p in points), 4), round(sum(p.max_score for p in points), 4))


def _part_points(part) -> Points:
    """The part's stored points where its checks agree with them, else its checks' sum."""
    from_checks = _sum(check_points(check) for check in checks_of(part))
    if not isinstance(part, dict) or _part_problems(part, from_checks):
        return from_checks
    return Points(number(part.get("score")), number(part.get("max_score")))


def _part_problems(part: dict, from_checks: Points) -> list[str]:
    return _disagreements(part, from_checks, f"part {part.get('id')!s}'s", "its checks add up to")


def _disagreements(stored: dict, computed: Points, whose: str, what: str) -> list[str]:
    """Where `stored`'s score and max_score are not numbers, or not `computed`'s (to TOLERANCE)."""
    problems = []
    for key, figure in (("score", computed.score), ("max_score", computed.max_score)):
        value = stored.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{whose} {key} is {value!r}, not a number")
        elif abs(value - figure) > TOLERANCE:
            problems.append(f"{whose} {key} is {value:g} where {what} {figure:g}")
    return problems


def counted(part, results: dict) -> bool:
    """Whether the part's points are in the totals: a provisional part's only when counted."""
    provisional = results.get("provisional") if isinstance(results.get("provisional"), dict) else {}
    return not (isinstance(part, dict) and part.get("provisional")) or provisional.get("counted") is True


def figures(results: dict) -> Figures:
    """The points of every part and the totals of `results`, as every output shows them."""
    parts = tuple(_part_points(part) for part in parts_of(results))
    in_total = [points for part, points in zip(parts_of(results), parts) if counted(part, results)]
    provisional = [points for part, points in zip(parts_of(results), parts) if isinstance(part, dict)
                   and part.get("provisional")]
    by_hand = _sum(check_points(check) for part in parts_of(results) if counted(part, results)
                   for check in checks_of(part) if is_graded_by_hand(check))
    if is_rejected(results):
        total = Points(0.0, max(number(results.get("max_score")), 0.0))
    elif _total_problems(results, _sum(in_total)):
        total = _sum(in_total)
    else:
        total = Points(number(results.get("score")), number(results.get("max_score")))
    return Figures(total, parts, by_hand, _sum(provisional) if provisional else None)


def _total_problems(results: dict, from_parts: Points) -> list[str]:
    return _disagreements(results, from_parts, "its", "its counted parts add up to")


def inconsistencies(results: dict) -> list[str]:
    """Where a results.json's own figures disagree with its checks, in words ([] where none do):
    a check's score outside [0, its max_score], a part's points that are not its checks' sum, a
    total that is not its counted parts', a rejection with points."""
    problems = []
    for part in parts_of(results):
        for check in checks_of(part):
            score, maximum = number(check.get("score")), number(check.get("max_score"))
            if not 0 <= score <= maximum + TOLERANCE / 100:
                problems.append(f"check {check.get('id')!s} has {score:g} of its {maximum:g} points")
        if isinstance(part, dict):
            problems += _part_problems(part, _sum(check_points(check) for check in checks_of(part)))
    if is_rejected(results):
        if number(results.get("score")) != 0:
            problems.append(f"it was not graded ({results.get('status')}) yet its score is {results.get('score')!r}")
        return problems
    figured = figures(results)
    in_total = [points for part, points in zip(parts_of(results), figured.parts) if counted(part, results)]
    return problems + _total_problems(results, _sum(in_total))
