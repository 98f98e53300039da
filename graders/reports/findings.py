"""What a student must fix, gathered from the failing checks: the terminal and pytest show it in full.

A table row has room for a status and points, not for the one sentence that says what to fix.
Failing checks are therefore gathered into findings, printed under the tables in full:

- checks that name the same known mistake (a diagnosis) are one finding: the padding mask on
  the wrong axis fails four attention checks, and the student must read the fix once;
- checks stopped by the same untouched function are one line, "not implemented yet: NAME";
- other checks that failed with the very same message (a module that does not import) are one
  finding; every other check is a finding of its own.

Each finding shows the smallest input one of its checks failed on, and what was expected and
what came back there, numbers written to 4 significant digits. Everything here is plain text,
some of it the student's: the renderers keep it out of markup and strip control characters.
A results.json may be malformed (a hand-edited one, an old schema): nothing here assumes a type.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .summary import as_text, clip, merged_by_hand

# A TODO stub raises NotImplementedError("NAME is not implemented yet. TODO: ..."); the check
# reports it as "not implemented: <that message>".
NOT_IMPLEMENTED = re.compile(r"^not implemented: (?:(?P<name>[\w.]+) is not implemented yet\b)?")
TRACEBACK_FRAME = re.compile(r'File "[^"]+", line \d+, in (?P<name>[\w<>]+)')

# Lines of a student's traceback shown by default: the failing line and the exception.
TRACEBACK_TAIL_LINES = 4
# Of what the student's code printed, a finding shows the end (--verbose: up to 4,000 characters).
PRINTED_TAIL_LINES = 8
PRINTED_TAIL_CHARACTERS = 800
VALUE_LIMIT = 400
SIGNIFICANT_DIGITS = 4


@dataclass
class Finding:
    """One thing to fix and the failing checks that show it."""

    headline: str  # the mistake and the fix, or what went wrong when no known mistake matches
    checks: list = field(default_factory=list)
    not_implemented: str | None = None  # the untouched function, when that is all there is to say


def needs_fixing(check: dict) -> bool:
    """A check the student has something to fix for; a written answer a person has graded is
    not one, whatever its points (they are the person's judgement, not a mistake found)."""
    return check.get("status") in ("failed", "error", "skipped") and not merged_by_hand(check)


def not_implemented_name(check: dict) -> str | None:
    """The function a TODO stub left untouched, when that is why the check did not pass."""
    match = NOT_IMPLEMENTED.match(as_text(check.get("message")))
    if not match:
        return None
    if match.group("name"):
        return match.group("name")
    frames = TRACEBACK_FRAME.findall(as_text(_details(check).get("traceback")))
    return frames[-1] if frames else "a function of yours"


def gather(checks, *, merge=True) -> list[Finding]:
    """Findings for the checks that need fixing, in the order their first check comes.
    Without `merge`, every check is a finding of its own (--verbose)."""
    findings: dict[object, Finding] = {}
    for check in checks:
        if not needs_fixing(check):
            continue
        diagnosis = check.get("diagnosis") if isinstance(check.get("diagnosis"), dict) else {}
        untouched = not_implemented_name(check)
        if untouched:
            key, headline = ("todo", untouched), f"not implemented yet: {untouched}"
        elif diagnosis.get("text"):
            key, headline = ("diagnosis", diagnosis.get("id")), as_text(diagnosis["text"])
        else:
            message = as_text(check.get("message")) or f"{check.get('status')} (no message)"
            key, headline = ("message", message), message
        if not merge:
            key = ("check", id(check))
        finding = findings.setdefault(key, Finding(headline, not_implemented=untouched))
        finding.checks.append(check)
    return list(findings.values())


def example_check(finding: Finding) -> dict | None:
    """The check whose failing input and values the finding shows: the smallest input, and
    among equally small ones the check that also says what was expected and what came back;
    a check without an input (a statistical one) when it has measurements to show."""
    shown = [c for c in finding.checks
             if c.get("counterexample") or {"expected", "got", "proportions"} & _details(c).keys()]
    if not shown:
        return None

    def size(check):
        text = as_text(check.get("counterexample"))
        return (not text, len(text), "expected" not in _details(check))

    return min(shown, key=size)


def finding_lines(finding: Finding, *, verbose=False) -> list[tuple[str, str]]:
    """(label, text) lines under a finding's headline; the label is "" for a plain line."""
    if finding.not_implemented and not verbose:
        return []
    example = example_check(finding)
    # The check whose input is shown comes last, so that its input, expected and got follow
    # its own message: they are values of that check (attention weights, say), not of all.
    listed = sorted(finding.checks, key=lambda check: check is example)
    lines, unexplained = [], []
    for check in listed:
        message = as_text(check.get("message"))
        if message and message != finding.headline:
            lines.append(("", f"{check.get('id')}: {message}"))
        else:  # the headline says it all: only which checks
            unexplained.append(as_text(check.get("id")))
    if unexplained:
        lines.append(("checks" if len(unexplained) > 1 else "check", ", ".join(unexplained)))
    shown = finding.checks if verbose else [example] if example else []
    for check in shown:
        if verbose and len(finding.checks) > 1:
            lines.append(("", f"{check.get('id')}:"))
        lines += check_detail_lines(check, verbose=verbose)
    if not verbose:
        lines += where_lines(finding.checks)
    return lines


def check_detail_lines(check: dict, *, verbose=False) -> list[tuple[str, str]]:
    """The smallest input, expected and got, measured rates; with `verbose` every detail."""
    details = _details(check)
    lines = []
    if check.get("counterexample"):
        lines.append(("smallest input", clip(as_text(check["counterexample"]), 2 * VALUE_LIMIT)))
    expected, got = (format_value(details[key]) if key in details else None for key in ("expected", "got"))
    if expected is not None and expected == got:
        # Summaries that read the same ("tensor of shape (4, 2, 4, 4)") differ in what they summarise.
        lines.append(("expected and got", f"{expected} both, with other values"))
    else:
        lines += [(label, text) for label, text in (("expected", expected), ("got", got)) if text is not None]
    for row in details.get("proportions") or []:
        if isinstance(row, dict):
            lines.append(("measured", _proportion_text(row)))
    if not verbose:
        printed = as_text(details.get("output")).rstrip()
        if printed:  # the end of it, as of a traceback: what it printed last, nearest the failure
            tail = printed.splitlines()[-PRINTED_TAIL_LINES:]
            lines.append(("your code printed", "\n" + clip("\n".join(tail), PRINTED_TAIL_CHARACTERS)))
        return lines
    if isinstance(details.get("numbers"), dict):
        lines += [(key.replace("_", " "), format_value(value)) for key, value in details["numbers"].items()]
    maps = details.get("attention_maps")
    if isinstance(maps, dict):
        lines += [(f"attention map, {name}", format_value(value)) for name, value in maps.items()]
    curve = details.get("training_curve")
    if isinstance(curve, dict):
        lines += [(f"training curve, {name.replace('_', ' ')}", format_value(value)) for name, value in curve.items()]
    for key in ("output", "traceback"):
        if details.get(key):
            lines.append(({"output": "your code printed", "traceback": "traceback"}[key], "\n" + clip(details[key], 4000)))
    return lines


def where_lines(checks) -> list[tuple[str, str]]:
    """Where the student's code failed: the end of the first traceback (file, line, exception)."""
    for check in checks:
        traceback = as_text(_details(check).get("traceback")).rstrip()
        if traceback:
            tail = traceback.splitlines()[-TRACEBACK_TAIL_LINES:]
            return [("where", "\n" + "\n".join(tail))]
    return []


def _details(check: dict) -> dict:
    return check.get("details") if isinstance(check.get("details"), dict) else {}


def _proportion_text(row: dict) -> str:
    name = as_text(row.get("name")) or "rate"
    return (f"{name} {format_value(row.get('value'))} (target {format_value(row.get('target'))}, "
            f"accepted {format_value(row.get('low'))} to {format_value(row.get('high'))})")


def format_value(value, limit=VALUE_LIMIT) -> str:
    """Numbers to 4 significant digits, nested lists as lists, anything else as its text."""
    return clip(_format(value), limit)


def _format(value) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return format_number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_format(v) for v in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_format(v)}" for k, v in value.items())
    return as_text(value)


def format_number(number: float) -> str:
    """0.014294875785708427 -> "0.01429"; 1.0 -> "1"; nan -> "nan"."""
    if math.isnan(number) or math.isinf(number):
        return str(number)
    return f"{number:.{SIGNIFICANT_DIGITS}g}"

