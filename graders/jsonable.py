"""Results as strict JSON, whatever a check put in them.

A check's details hold numbers derived from what the student's code returned: a NaN, an infinity,
a complex number (a negative figure raised to a fractional power), a numpy scalar, a tensor. None
of these may stop results.json from being written, and strict JSON (Gradescope's reader, a
browser's) has no NaN. `jsonable` gives a copy made of JSON's own types only.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 64  # deeper than any results document; what lies below is summarised
MAX_TEXT = 200  # characters of the text standing for a value JSON cannot hold


def jsonable(value: Any, depth: int = 0) -> Any:
    """`value` with every non-finite float as its name ("nan", "inf", "-inf"), every complex
    number, tensor, array or other object as its text (shortened), numpy scalars as numbers,
    tuples as lists and dict keys as strings."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    if depth >= MAX_DEPTH:
        return "..."
    if isinstance(value, dict):
        return {_key(key): jsonable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item, depth + 1) for item in value]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return jsonable(float(value), depth)
    item = getattr(value, "item", None)  # a numpy scalar or a one-value tensor
    if callable(item) and getattr(value, "ndim", None) == 0:
        try:
            number = item()
        except (TypeError, ValueError, RuntimeError):
            number = None
        if type(number) in (bool, int, float):
            return jsonable(number, depth)
    return _text(value)


def _key(key: Any) -> Any:
    """A key JSON writes as it is (as json.dumps spells it), else its text."""
    if key is None or type(key) in (str, int, bool) or (type(key) is float and math.isfinite(key)):
        return key
    return _text(key)


def _text(value: Any) -> str:
    try:
        text = str(value)
    except Exception:  # noqa: BLE001  an object whose text cannot be made is named by its type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."
