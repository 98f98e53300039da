"""The last layer against leaks: the solution's text in anything a student is shown.

The sandbox keeps the reference solution out of the worker's reach, so a student's code has no
way to read it and print it, raise it in an exception or return it as a string. Should a layer
fail on some machine, this one still stands: every string of an instructor grade's results (the
messages, counterexamples, tracebacks, captured output that the report and Gradescope show) that
holds several lines of the solution's blocks gets those lines replaced.

One shared line is not a leak: students write `d_k = q.size(-1)` too, and a traceback shows their
own lines. Several distinct solution lines in one string are.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

SOLUTION_BLOCK = re.compile(r"#\s*BEGIN SOLUTION\s*\n(.*?)#\s*END SOLUTION", re.S)
MIN_LINE_CHARS = 12  # shorter lines (`return x`, `else:`) are everybody's
MIN_SHARED_LINES = 3
REDACTED = "[line of the reference solution removed]"


@functools.lru_cache(maxsize=None)
def solution_lines(reference_dir: Path) -> frozenset[str]:
    lines = set()
    for path in sorted(Path(reference_dir).glob("*.py")):
        for block in SOLUTION_BLOCK.findall(path.read_text(errors="replace")):
            lines.update(line.strip() for line in block.splitlines() if len(line.strip()) >= MIN_LINE_CHARS)
    return frozenset(lines)


def redact_text(text: str, secret: frozenset[str]) -> tuple[str, int]:
    """`text` with its solution lines replaced when it holds MIN_SHARED_LINES or more distinct
    ones (compared stripped, also inside a longer line), and how many lines were replaced."""
    found = {line for line in secret if line in text}
    if len(found) < MIN_SHARED_LINES:
        return text, 0
    for line in sorted(found, key=len, reverse=True):
        text = text.replace(line, REDACTED)
    return text, len(found)


def redact_results(value, secret: frozenset[str]):
    """A copy of a results structure (dicts, lists, strings) with every leaking string redacted,
    and how many solution lines were removed."""
    if isinstance(value, str):
        return redact_text(value, secret)
    if isinstance(value, list):
        pairs = [redact_results(item, secret) for item in value]
        return [item for item, _ in pairs], sum(count for _, count in pairs)
    if isinstance(value, dict):
        pairs = {key: redact_results(item, secret) for key, item in value.items()}
        return {key: item for key, (item, _) in pairs.items()}, sum(count for _, count in pairs.values())
    return value, 0
