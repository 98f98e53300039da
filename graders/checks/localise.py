"""Where a wrong output differs, found from behaviour alone, for a failure's message.

Two questions, asked once a check has failed (never to score it):

- *How* does a tensor differ from the expected one? `describe_difference` looks for the shapes a
  mistake leaves: a constant factor or a flipped sign, a constant offset, two axes swapped, a shift
  by a position, a reversed axis, a normalisation along another axis, or differences confined to
  some indices (some rows, some heads, the padded positions).
- *Where* in a module does the output first go wrong? `module_divergence` runs the student's module
  (in the worker) and the reference (in the grader) under the same weights and inputs, records every
  sub-module's input and output as the forward pass runs (`trace_calls` in graders/sandbox/tasks.py),
  and names the first sub-module whose output differs: inside it when its input agrees, in the code
  that feeds it when its input already differs, in the module's own code when all its sub-modules
  agree. Sub-modules are matched by name, else by class and order, so a layout of other names still
  localises; a reference sub-module the student's forward never calls is said.

A catalogued diagnosis names a known mistake; this says where, whatever the mistake is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

# Intermediate values of a right module agree with the reference's to float32 rounding; these
# tolerances leave room for the rounding of another valid order of the same operations.
TRACE_ATOL, TRACE_RTOL = 1e-4, 1e-3
SHIFTS = (1, -1, 2, -2)


def _close(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    return got.shape == expected.shape and bool(
        torch.allclose(got.double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True))


def _axis(axes: Sequence[str] | None, index: int, ndim: int) -> str:
    if axes is not None and len(axes) == ndim:
        return axes[index]
    return f"axis {index}"


def _indices(values: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2 and 5"."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    words = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs[:5]]
    return ", ".join(words) + (", ..." if len(runs) > 5 else "")


def _factor_words(factor: float) -> str:
    if abs(factor + 1) < 1e-3:
        return "the sign is flipped (yours = -expected)"
    near = lambda value: abs(factor - value) <= 1e-3 * abs(value)
    for k in range(2, 1025):
        if near(k) or near(1 / k):
            return f"yours is {k if near(k) else f'1/{k}'} times the expected values"
    for k in range(2, 1025):
        if math.isqrt(k) ** 2 != k and (near(math.sqrt(k)) or near(1 / math.sqrt(k))):
            return f"yours is {f'sqrt({k})' if near(math.sqrt(k)) else f'1/sqrt({k})'} times the expected values"
    return f"yours is {factor:.4g} times the expected values"


# A factor or an offset "explains" one or two values whatever they are: it is claimed on more only.
MIN_VALUES_FOR_A_PATTERN = 3


def _scaled(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> str | None:
    g, e = got.double().flatten(), expected.double().flatten()
    energy = float((e * e).sum())
    if energy == 0.0 or int((e != 0).sum()) < MIN_VALUES_FOR_A_PATTERN:
        return None
    factor = float((g * e).sum()) / energy
    if abs(factor - 1) > 1e-3 and _close(got, expected * factor, atol, rtol):
        return _factor_words(factor)
    offset = float((g - e).mean())
    if abs(offset) > atol and _close(got, expected + offset, atol, rtol):
        return f"yours is the expected values plus a constant {offset:+.4g}"
    return None


def _rearranged(got: torch.Tensor, expected: torch.Tensor, axes, atol: float, rtol: float) -> str | None:
    ndim = expected.dim()
    for i in range(ndim):
        for j in range(i + 1, ndim):
            if expected.size(i) == expected.size(j) > 1 and _close(got, expected.transpose(i, j), atol, rtol):
                return f"{_axis(axes, i, ndim)} and {_axis(axes, j, ndim)} are swapped (a transposition)"
    for a in range(ndim):
        n = expected.size(a)
        for shift in SHIFTS:
            if n > abs(shift) + 1:
                late = got.narrow(a, max(shift, 0), n - abs(shift))
                early = expected.narrow(a, max(-shift, 0), n - abs(shift))
                if _close(late, early, atol, rtol) and not _close(got, expected, atol, rtol):
                    steps = "one position" if abs(shift) == 1 else f"{abs(shift)} positions"
                    way = "later" if shift > 0 else "earlier"
                    return (f"shifted by {steps} along {_axis(axes, a, ndim)}: what is expected at index t "
                            f"is at t{shift:+d} in yours ({steps} {way})")
        if n > 1 and _close(got, expected.flip(a), atol, rtol):
            return f"reversed along {_axis(axes, a, ndim)}"
    return None


def _normalised_elsewhere(got: torch.Tensor, expected: torch.Tensor, axes) -> str | None:
    """Weights that sum to one along another axis than the expected ones (a softmax over the wrong dim)."""
    if not (expected.is_floating_point() and got.is_floating_point()) or expected.dim() < 2:
        return None
    if bool((expected < 0).any()) or bool((got < 0).any()) or bool(torch.isnan(got).any()):
        return None

    def ones_along(t: torch.Tensor) -> list[int]:
        return [a for a in range(t.dim()) if t.size(a) > 1
                and bool(torch.allclose(t.double().sum(a), torch.ones((), dtype=torch.float64), atol=1e-4))]

    expected_axes, got_axes = ones_along(expected), ones_along(got)
    if expected_axes and got_axes and not set(expected_axes) & set(got_axes):
        ndim = expected.dim()
        return (f"yours sums to one along {_axis(axes, got_axes[0], ndim)}, the expected values along "
                f"{_axis(axes, expected_axes[0], ndim)} (normalised over the wrong axis)")
    return None


def _region(got: torch.Tensor, expected: torch.Tensor, axes, atol: float, rtol: float) -> str | None:
    g, e = got.double(), expected.double()
    wrong = ~torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    count, total = int(wrong.sum()), wrong.numel()
    if count == 0:
        return None
    ndim = expected.dim()
    limits = []
    for a in range(ndim):
        if expected.size(a) < 2:
            continue
        touched = wrong.movedim(a, 0).reshape(expected.size(a), -1).any(1).nonzero().flatten().tolist()
        if len(touched) < expected.size(a):
            named = axes is not None and len(axes) == ndim
            limits.append(f"{axes[a]} {_indices(touched)}" if named else f"index {_indices(touched)} of axis {a}")
    if not limits and total < MIN_VALUES_FOR_A_PATTERN:  # the smallest input: its values are the place to look
        return f"{count} of {total} values differ (an output too small to show a pattern); {_largest(g, e, axes)}"
    if not limits:
        return f"{count} of {total} values differ, spread over every index; {_largest(g, e, axes)}"
    text = "only at " + ", ".join(limits) + f" ({count} of {total} values differ)"
    inside = _scaled(got[wrong], expected[wrong], atol, rtol) if count > 1 else None
    return text + (f"; there {inside}" if inside else "")


def _largest(got: torch.Tensor, expected: torch.Tensor, axes) -> str:
    """Where the values differ most, and the two values there: a place to look when no pattern is found."""
    difference = (got - expected).abs().nan_to_num(nan=math.inf)
    agree = torch.isclose(got, expected, equal_nan=True)
    flat = int(difference.masked_fill(agree, -1.0).flatten().argmax())
    index = []
    for size in reversed(expected.shape):
        index.append(flat % size)
        flat //= size
    index.reverse()
    ndim = expected.dim()
    place = ", ".join(f"{axes[a]} {i}" if axes is not None and len(axes) == ndim else str(i) for a, i in enumerate(index))
    where = f"({place})" if axes is not None and len(axes) == ndim else f"index [{place}]"
    at = tuple(index)
    return f"the largest difference is at {where}: yours {float(got[at]):.4g}, expected {float(expected[at]):.4g}"


def is_pattern(how: str | None) -> bool:
    """Whether a `describe_difference` text says where or how (a factor, a region, ...), rather
    than that the values differ everywhere with no pattern."""
    return bool(how) and "spread over every index" not in how


def describe_difference(got: Any, expected: torch.Tensor, *, axes: Sequence[str] | None = None,
                        atol: float = 1e-5, rtol: float = 1e-4) -> str | None:
    """In words, how `got` differs from `expected`; None when they agree or `got` is no tensor.
    `axes` names the axes ("batch", "head", "query", "key") for the words."""
    if type(got) is not torch.Tensor or type(expected) is not torch.Tensor:
        return None
    if got.shape != expected.shape:
        if sorted(got.shape) == sorted(expected.shape):
            return f"shape {tuple(got.shape)} where {tuple(expected.shape)} is expected: the same sizes, in another order of axes"
        return f"shape {tuple(got.shape)} where {tuple(expected.shape)} is expected"
    if not (got.is_floating_point() or got.is_complex()) or _close(got, expected, atol, rtol):
        return None if _close(got, expected, atol, rtol) else _region(got, expected, axes, 0.0, 0.0)
    surprise_nan = torch.isnan(got) & ~torch.isnan(expected)
    if bool(surprise_nan.any()):
        return "NaN where the expected values are finite; " + (_region(got, expected, axes, atol, rtol) or "")
    return (_scaled(got, expected, atol, rtol) or _rearranged(got, expected, axes, atol, rtol)
            or _normalised_elsewhere(got, expected, axes) or _region(got, expected, axes, atol, rtol))


# ---------------------------------------------------------------- sub-modules


@dataclass(frozen=True)
class Call:
    """One sub-module call of a forward pass, as `trace_calls` recorded it."""

    name: str  # the sub-module's name in its model ("" for the model itself)
    kind: str  # its class
    input: torch.Tensor | None
    output: torch.Tensor | None
    nth: int  # 0 for its first call in the pass, 1 for the second ...
    others: tuple[torch.Tensor | None, ...] = ()  # its further arguments (a mask)

    @property
    def label(self) -> str:
        where = f"`{self.name}`" if self.name else "the module's own forward"
        return f"{where} ({self.kind}" + (f", call {self.nth + 1}" if self.nth else "") + ")"


@dataclass(frozen=True)
class Trace:
    calls: list[Call]
    modules: dict[str, str]  # every sub-module's name: its class


def parse_trace(value: Any) -> Trace | None:
    """A trace as `trace_calls` returns it, checked field by field (it may come from the worker);
    None for anything else."""
    if not isinstance(value, dict) or not isinstance(value.get("calls"), list) or not isinstance(value.get("modules"), dict):
        return None
    calls, seen = [], {}
    for entry in value["calls"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("kind"), str):
            return None
        tensors = [entry.get(key) if type(entry.get(key)) is torch.Tensor else None for key in ("input", "output")]
        nth = seen[entry["name"]] = seen.get(entry["name"], -1) + 1
        others = entry.get("others") if isinstance(entry.get("others"), list) else []
        others = tuple(value if type(value) is torch.Tensor else None for value in others[:8])
        calls.append(Call(entry["name"][:200], entry["kind"][:100], *tensors, nth, others))
    modules = {str(k)[:200]: str(v)[:100] for k, v in list(value["modules"].items())[:2000]}
    return Trace(calls, modules)


def _matcher(student: Trace) -> Callable[[Call, Trace], Call | None]:
    by_name = {(c.name, c.nth): c for c in student.calls}
    by_kind: dict[str, list[Call]] = {}
    for c in student.calls:
        by_kind.setdefault(c.kind, []).append(c)

    def match(ref: Call, reference: Trace) -> Call | None:
        same = by_name.get((ref.name, ref.nth))
        if same is not None and (same.kind == ref.kind or not ref.name or ref.name in student.modules):
            return same
        if ref.name in student.modules:  # the student's module has it, under the same name
            return None
        kin = [c for c in reference.calls if c.kind == ref.kind]
        theirs = by_kind.get(ref.kind, [])
        return theirs[kin.index(ref)] if len(theirs) == len(kin) else None

    return match


def _agree(got: torch.Tensor | None, expected: torch.Tensor | None) -> bool:
    if got is None or expected is None:
        return got is None and expected is None
    return _close(got, expected, TRACE_ATOL, TRACE_RTOL)


def _how(got: torch.Tensor | None, expected: torch.Tensor | None) -> str:
    if got is None or expected is None:
        return "no tensor to compare"
    return describe_difference(got, expected, atol=TRACE_ATOL, rtol=TRACE_RTOL) or "differs"


def _caller(name: str, called: set[str]) -> str:
    """The nearest enclosing module that runs code of its own (a ModuleDict or ModuleList is
    never called: its owner's forward calls what it holds); "" for the module itself."""
    while "." in name:
        name = name.rsplit(".", 1)[0]
        if name in called:
            return name
    return ""


def _first_to_see(call: Call, reference: Trace, match: Callable[[Call, Trace], Call | None]) -> Call:
    """The outermost call whose input already differs, of those enclosing `call`: a wrong input to
    `pos_encoder.dropout` that `pos_encoder` was already given came from whoever called `pos_encoder`."""
    called = {c.name: c for c in reference.calls if c.nth == 0}
    while call.name:
        parent = called.get(_caller(call.name, set(called)))
        mine = match(parent, reference) if parent is not None and parent.name else None
        if mine is None or _agree(mine.input, parent.input):
            return call
        call = parent
    return call


def _other_argument(mine: Call, ref: Call) -> str | None:
    """How a further argument (a mask) of two calls whose first input agrees differs, in words."""
    for index, (got, expected) in enumerate(zip(mine.others + (None,) * len(ref.others), ref.others), start=2):
        if got is None and expected is not None:
            return f"but it is given no argument {index} where the reference passes a tensor of shape {tuple(expected.shape)} (a mask?)"
        if expected is not None and not _agree(got, expected):
            return f"but its argument {index} differs ({_how(got, expected)})"
    return None


def first_divergence(student: Trace, reference: Trace) -> str | None:
    """Where the student's forward pass first departs from the reference's (see the module
    docstring), in words; None when every matched call agrees."""
    match = _matcher(student)
    never_called, last_agreeing = [], None
    for ref in reference.calls:  # inner calls return first: the first difference is the innermost
        mine = match(ref, reference)
        if mine is None:
            if ref.name in student.modules and not any(c.name == ref.name for c in student.calls):
                never_called.append(f"`{ref.name}` ({ref.kind})")
            continue
        if _agree(mine.output, ref.output):
            last_agreeing = mine
            continue
        kind = f" (yours is a {mine.kind}, the reference's a {ref.kind})" if mine.kind != ref.kind else ""
        if not _agree(mine.input, ref.input):
            fed = _first_to_see(ref, reference, match)
            parent = _caller(fed.name, {c.name for c in reference.calls})
            owner = f"`{parent}` ({reference.modules.get(parent, '?')})" if parent else "the module's own forward"
            after = f", after {last_agreeing.label}, which agrees" if last_agreeing else ""
            given = match(fed, reference) or mine
            text = (f"first difference in {owner}, in its own code before it calls {fed.label}{after}: the input "
                    f"it gives there already differs ({_how(given.input, fed.input)})")
        elif (argument := _other_argument(mine, ref)) is not None:
            text = f"first difference in the call of {ref.label}: its input agrees, {argument}"
        else:
            inner = [c for c in reference.calls if ref.name == "" or c.name.startswith(ref.name + ".")]
            inner = [c for c in inner if c.name != ref.name]
            own = " in its own code: its sub-modules agree" if inner else ""
            how = _how(mine.output, ref.output)
            if mine.input is not None and mine.output is not None and _agree(mine.output, mine.input):
                how = "its output equals its input, as if it were skipped"
            text = f"first difference in {ref.label}{kind}: its input agrees, its output differs{own} ({how})"
        if never_called:  # most often the mistake itself: said first
            text = f"your forward never calls {', '.join(never_called[:3])}; {text}"
        return text
    return None


def module_divergence(ctx: Any, handle: Any, build: tuple[str, Sequence[Any], dict], state: dict[str, torch.Tensor],
                      inputs: Sequence[Any], kwargs: dict | None = None, *, method: str = "__call__") -> str | None:
    """`first_divergence` of the student's module `handle` (holding the weights `state`) and the
    reference module that `build` makes (see graders.oracles.trace_reference), on `inputs`. None
    where it cannot be told: a self-check has no reference to trace, the student's code may raise."""
    from graders.oracles import OracleUnavailable
    from graders.sandbox import SandboxError, StudentError

    try:
        theirs = parse_trace(ctx.student.task("trace", handle, *inputs, method=method, **(kwargs or {})))
        expected_trace = ctx.oracle.call("trace_reference", list(build), state, list(inputs), kwargs or {}, method)
        expected = parse_trace(expected_trace)
    except (OracleUnavailable, StudentError, SandboxError):
        return None
    if theirs is None or expected is None:
        return None
    not_loaded = expected_trace.get("not_loaded") or []
    if not_loaded:  # the two modules do not run under the same weights: no sub-module can agree
        return (f"your module's parameters are laid out under other names than the reference's ({', '.join(not_loaded[:3])} "
                "has no counterpart in yours), so the grader cannot follow the difference sub-module by sub-module")
    return first_divergence(theirs, expected)


def against_reference(ctx: Any, handle: Any, build: tuple[str, Sequence[Any], dict], inputs: Sequence[Any],
                      kwargs: dict | None = None, *, method: str = "__call__") -> str | None:
    """`module_divergence` under the student's own weights (read back with `state_dict()`): where a
    module that fails a property departs from the reference holding the same weights."""
    try:
        state = ctx.student.state_dict(handle)
    except Exception:  # noqa: BLE001 - a module whose state_dict raises says nothing here
        return None
    if not isinstance(state, dict):
        return None
    state = {name: value for name, value in state.items() if isinstance(name, str) and type(value) is torch.Tensor}
    return module_divergence(ctx, handle, build, state, inputs, kwargs, method=method)
