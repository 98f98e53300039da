"""Gradescope's autograder results.json, rendered from our results.json.

Outputs are Markdown. Text that may come from the student (messages, counterexamples,
tracebacks, captured output, answers) goes into fenced code blocks, where Markdown and HTML are
not interpreted; the few inline strings are backslash-escaped.

Choices Gradescope's format leaves to us:
- hidden checks are exported with visibility "after_due_date", so students see them after the
  deadline and not before. Nothing else may give them away: while any test is hidden, the
  top-level `score` (always shown) is left out, so that Gradescope totals the tests itself under
  their own visibility, and the top-level `output` (always shown) is computed from the visible
  checks alone (`visible_only`): their parts, points, count of passed checks and provisional
  points;
- a written answer, blank or written, is exported as a 0-point test: its points belong to a
  manually graded question on Gradescope, so they never enter the autograder's score, also once
  `grade merge` has recorded them (counted there and in the question, they would count twice),
  and the autograder's maximum is the same for every submission. It has no status; a merged one
  says what was given;
- `stdout_visibility` is "hidden": the autograder's stdout is the instructor's summary, with the
  hidden checks' outcomes;
- skipped and error checks are "failed": they earned nothing.
"""

from __future__ import annotations

import math
import re

from .figures import Points, checks_of, figures
from .summary import (
    all_checks,
    clip,
    format_points,
    headline,
    is_graded_by_hand,
    is_rejected,
    isolation_warning,
    merged_by_hand,
    ungraded_title,
    one_line,
    points_text,
    provisional_note,
    provisional_reason,
    rejection_reason,
    visible_only,
)

# Gradescope stores and shows results.json whole; keep each test's output small enough that
# ~100 tests with tracebacks stay far below its size limit.
# The autograder's stdout is the instructor's terminal summary, hidden checks' outcomes included:
# students never see it.
STDOUT_VISIBILITY = "hidden"
LIMITS = {"message": 2_000, "counterexample": 1_500, "traceback": 3_000, "output": 1_500, "answer": 6_000}


def to_gradescope(results: dict) -> dict:
    if is_rejected(results):
        return _with_time(
            {
                "score": 0,
                "output": (
                    f"{ungraded_title(results)}: {rejection_reason(results)}\n\n"
                    "Nothing in it was graded, so the score is 0. Fix the problem and submit again."
                ),
                "output_format": "text",
                "stdout_visibility": STDOUT_VISIBILITY,
                "tests": [],
            },
            results,
        )
    tests = [
        _test(f"{p}.{c}", part, check, results)
        for p, part in enumerate(results.get("parts") or [], start=1)
        for c, check in enumerate(part.get("checks") or [], start=1)
    ]
    export = {"output": _overview(results), "output_format": "md", "stdout_visibility": STDOUT_VISIBILITY, "tests": tests}
    if not any(test["visibility"] != "visible" for test in tests):
        # The tests' points, as the other outputs total them (each test's are rounded on their own).
        export["score"] = figures(results).automatic.score
    return _with_time(export, results)


def is_hand_graded(check: dict) -> bool:
    """A written answer: blank, pending, or given its points by `grade merge`. A blank one is
    no failed autograder test either: were it one, the autograder's maximum would move with the
    number of blank answers."""
    return is_graded_by_hand(check) or merged_by_hand(check)


def _visible(check: dict) -> bool:
    return check.get("visibility") != "hidden"


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return round(number, 4) if math.isfinite(number) else 0.0


def _with_time(export: dict, results: dict) -> dict:
    timings = results.get("timings") if isinstance(results.get("timings"), dict) else {}
    total = timings.get("total_s")
    if isinstance(total, (int, float)) and not isinstance(total, bool) and math.isfinite(total):
        export["execution_time"] = round(total, 3)
    return export


def md_inline(text) -> str:
    """One line of literal text: every ASCII punctuation mark escaped (CommonMark allows it)."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", one_line(text, 500))


def md_code(text) -> str:
    """A fence longer than any backtick run inside, so the text cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _overview(results: dict) -> str:
    hidden = sum(1 for c in all_checks(results) if not _visible(c))
    results = visible_only(results)
    warning = isolation_warning(results)
    lines = [*([f"**{md_inline(warning)}**", ""] if warning else []), f"**{md_inline(headline(results))}**", ""]
    for part, points in zip(results.get("parts") or [], figures(results).parts):
        shown = [c for c in part.get("checks") or [] if _visible(c) and not is_hand_graded(c)]
        if not shown:
            continue
        automatic = points - Points(sum(_number(c.get("score")) for c in checks_of(part) if is_hand_graded(c)),
                                    sum(_number(c.get("max_score")) for c in checks_of(part) if is_hand_graded(c)))
        line = f"- {md_inline(part.get('title') or part.get('id'))}: {points_text(automatic.score, automatic.max_score)}"
        if part.get("provisional"):
            line += f" (provisional: {md_inline(provisional_reason(part))})"
        lines.append(line)
    provisional = provisional_note(results)
    if provisional:
        lines += ["", f"Provisional: {md_inline(provisional)}"]
    checks = list(all_checks(results))
    if hidden:
        lines += ["", f"{hidden} more {'check is' if hidden == 1 else 'checks are'} graded now and shown after the due date."]
    manual_points = sum(_number(c.get("max_score")) for c in checks if is_hand_graded(c) and _visible(c))
    if manual_points:
        lines += ["", f"Written answers ({format_points(manual_points)} points) are graded by hand, "
                      "in their own question."]
    return "\n".join(lines)


def _provisional_counted(results: dict) -> bool:
    provisional = results.get("provisional")
    return isinstance(provisional, dict) and provisional.get("counted") is True


def _test(number: str, part: dict, check: dict, results: dict) -> dict:
    diagnosis = check.get("diagnosis") if isinstance(check.get("diagnosis"), dict) else {}
    part_title = one_line(part.get("title") or part.get("id"), 200)
    check_title = one_line(check.get("title") or check.get("id"), 200)
    test = {
        "name": f"{part_title}: {check_title}",
        "number": number,
        "output": _test_output(part, check, diagnosis, results),
        "output_format": "md",
        "visibility": "after_due_date" if check.get("visibility") == "hidden" else "visible",
        "tags": [str(part.get("id"))] + ([str(diagnosis["id"])] if diagnosis.get("id") else []),
    }
    if is_hand_graded(check):
        test.update(score=0, max_score=0)
        return test
    counted = not part.get("provisional") or _provisional_counted(results)
    test.update(
        score=_number(check.get("score")) if counted else 0,
        max_score=_number(check.get("max_score")) if counted else 0,
        status="passed" if check.get("status") == "passed" else "failed",
    )
    return test


def _test_output(part: dict, check: dict, diagnosis: dict, results: dict) -> str:
    details = check.get("details") if isinstance(check.get("details"), dict) else {}
    blocks = []
    if is_hand_graded(check):
        given = details.get("manual") if isinstance(details.get("manual"), dict) else {}
        graded = (f" Graded: {format_points(given.get('score'))} / {format_points(given.get('max_score'))}."
                  if given else "")
        blocks.append(
            f"Written answer, graded by hand ({format_points(check.get('max_score'))} points, "
            f"recorded in its own question, not in the autograder score).{graded}"
        )
    if part.get("provisional"):
        earned = points_text(check.get("score"), check.get("max_score"))
        earned = "" if _provisional_counted(results) else f" {md_inline(f'Earned {earned}, not counted in the score.')}"
        blocks.append(f"_Provisional:_ {md_inline(provisional_reason(part))}{earned}")
    if diagnosis.get("text"):
        blocks.append(f"**Likely cause:** {md_inline(diagnosis['text'])}")
    numbers = _numbers_line(details.get("numbers"))
    if numbers:
        blocks.append(numbers)
    for title, text, limit in (
        ("What happened", check.get("message"), LIMITS["message"]),
        ("Smallest input that shows it", check.get("counterexample"), LIMITS["counterexample"]),
        ("Your answer", details.get("answer"), LIMITS["answer"]),
        ("Traceback", details.get("traceback"), LIMITS["traceback"]),
        ("Captured output", details.get("output"), LIMITS["output"]),
    ):
        if text:
            blocks.append(f"**{title}:**\n\n{md_code(clip(text, limit))}")
    return "\n\n".join(blocks)


NUMBER_LABELS = {
    "expected_shape": "expected shape",
    "got_shape": "got shape",
    "expected_dtype": "expected dtype",
    "got_dtype": "got dtype",
    "max_abs_error": "largest absolute error",
    "max_rel_error": "largest relative error",
    "first_mismatch_index": "first mismatch at",
}


def _numbers_line(numbers) -> str:
    if not isinstance(numbers, dict):
        return ""
    shown = [f"{label} {md_inline(numbers[key])}" for key, label in NUMBER_LABELS.items() if key in numbers]
    return " · ".join(shown)
