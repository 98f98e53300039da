"""Checks of a pack's questions file: numeric answers graded automatically against the
reference's own questions file (which never ships to students), written answers shown to a
grader (`pending_manual`).

A pack's check module declares its questions and registers them under its own name (its checks
are then the pack's: listed with its parts, explained from its catalogue of diagnoses):

    numeric_question(__name__, "answers.width", "width", "Parameters of the first layer", context="d = 16")
    written_question(__name__, "answers.why", "why", "Why does it work?")
"""

import re

from graders.checks.framework import HIDDEN, CheckFailed, CheckOutcome, CheckSkipped, check


def parse_count(value):
    """1234567, "1,234,567", "1 234 567" and "1_234_567" all read as 1234567."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        digits = re.sub(r"[\s,_']", "", value)
        if re.fullmatch(r"\d+", digits):
            return int(digits)
    return None


def _answers(ctx, section):
    if ctx.answers is None:
        raise CheckSkipped("the questions file is missing or could not be read")
    return ctx.answers.get(section, {})


def numeric_question(module, check_id, key, title, *, context):
    """A hidden check: `[numeric] key` must be the whole number the reference gives. `context`
    (the configuration the number is of) is shown with every message."""

    def run(ctx):
        expected = parse_count(ctx.reference_answers["numeric"][key])
        given = _answers(ctx, "numeric").get(key, "")
        if given in ("", None):
            raise CheckFailed(f"no answer given for {key} ({context})")
        count = parse_count(given)
        if count is None:
            raise CheckFailed(f"{key} = {given!r} is not a whole number")
        if count != expected:
            raise CheckFailed(f"{key} = {count:,}, expected a different count ({context})", diagnosis="numeric_answer_wrong",
                              details={"got": f"{count:,}"})

    run.__module__ = module
    return check(check_id, f"{title} ({context})", visibility=HIDDEN)(run)


def written_question(module, check_id, key, question):
    """A check waiting for a grader: `[written] key` must not be empty; the reference's own text
    goes to the grader as the rubric."""

    def run(ctx):
        text = _answers(ctx, "written").get(key, "")
        if not isinstance(text, str) or not text.strip():
            raise CheckFailed(f"no answer written for: {question}")
        details = {"answer": text.strip()[:5000], "question": question}
        if ctx.oracle.kind == "reference":
            details["rubric"] = ctx.reference_answers.get("written", {}).get(key, "").strip()
        return CheckOutcome(fraction=None, message="waiting for a grader", details=details)

    run.__module__ = module
    return check(check_id, question, manual=True)(run)
