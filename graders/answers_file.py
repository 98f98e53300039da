"""A submission's questions file, read safely: it is the student's data.

TOML is data, never code, but its parser is recursive: a file of nested arrays or inline tables
raises RecursionError, which no caller expects. Every way the file can be unusable (too large,
not TOML, nested too deeply) is an `UnreadableAnswers` whose message says what is
wrong, for the student: the file is theirs to fix.
"""

from __future__ import annotations

import codecs
import tomllib
from pathlib import Path

MAX_ANSWERS_BYTES = 256 * 1024
# A questions file is `[section]` then `key = value`: two levels, three with an array value.
MAX_NESTING = 16


class UnreadableAnswers(ValueError):
    """The questions file cannot be used; the message says why."""


def parse_answers(text: str, name: str = "the questions file") -> dict:
    """The parsed file. Raises UnreadableAnswers."""
    try:
        answers = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UnreadableAnswers(f"{name} is not valid TOML: {error}") from None
    except RecursionError:
        raise UnreadableAnswers(f"{name} nests arrays or tables more than {MAX_NESTING} levels deep") from None
    if _nesting(answers) > MAX_NESTING:
        raise UnreadableAnswers(f"{name} nests arrays or tables more than {MAX_NESTING} levels deep")
    return answers


def read_answers_file(path: Path) -> dict | None:
    """The parsed file at `path`, None where there is no file. Raises UnreadableAnswers."""
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_ANSWERS_BYTES:
        raise UnreadableAnswers(f"{path.name} is over {MAX_ANSWERS_BYTES // 1024} KiB, more than a questions file holds")
    return parse_answers(answers_text(path.read_bytes()), path.name)


def answers_text(data: bytes) -> str:
    """The file's text. TOML is UTF-8, but an editor on Windows may save it with a byte-order
    mark, or as UTF-16 ("Unicode"): the grader reads what the student meant either way (a
    byte that is not UTF-8 becomes U+FFFD: the answers are prose, a person reads them)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def _nesting(value: object) -> int:
    """How many arrays and tables deep `value` goes (without recursion: it is the student's)."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth + 1)
            if depth + 1 <= MAX_NESTING:
                pending.extend((inner, depth + 1) for inner in item)
    return deepest
