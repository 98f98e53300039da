"""Gates: a property earns points only when the function also does its job.

Many properties hold for a degenerate output: zero tensors have no weight on padded keys, a
constant does not change when padding changes, uniform rows sum to one, two calls of a function
that returns zeros agree, random draws differ in training mode. A check of such a property first
establishes the property, then calls a gate here on the same function: the gate fails (with the
`degenerate_output` diagnosis and the behaviour seen) when the output is

- random: two calls on the same input differ (eval mode, dropout off);
- constant: it does not change when the input does, or it is the same everywhere;
- an echo: position by position, it never reads the rest of the sequence (a sequence model
  whose output at every other position ignores position 0).

Every gate is a property that a correct implementation satisfies on every input the checks draw
(changes are made large, comparisons are exact or far from rounding), so a gate never costs a
correct submission anything, and a buggy one that still computes something from its input
nothing beyond the checks of its bug (the gates ask for dependence, not for the right values).
"""

import torch

from graders.checks.framework import CheckFailed

DIAGNOSIS = "degenerate_output"


def _fail(what, behaviour, details=None):
    raise CheckFailed(f"{what} {behaviour}: the property holds only because the function does not do its job yet, "
                      "so it earns no points", diagnosis=DIAGNOSIS, details=details)


def _differs(a, b, atol):
    if type(a) is not torch.Tensor or type(b) is not torch.Tensor or a.shape != b.shape:
        return True
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    return bool(((a - b).abs() > atol)[~both_nan].any())


def expect_repeatable(first, second, what):
    """Two calls on the same input (eval mode, no dropout) gave the same output."""
    if _differs(first, second, 0.0):
        _fail(what, "differ between two calls on the same input (random values)")


def expect_varies(out, what, dim=None, atol=1e-6):
    """Not the same value everywhere (along `dim` when given, e.g. over positions or the vocabulary)."""
    out = out.double()
    if out.numel() < 2:
        return
    if dim is None:
        spread = (out.max() - out.min()).item() if torch.isfinite(out).all() else float("inf")
    else:
        if out.size(dim) < 2:
            return
        spread = (out.amax(dim) - out.amin(dim)).abs().max().item()
    if not spread > atol:
        where = "everywhere" if dim is None else f"along dimension {dim}"
        _fail(what, f"are the same {where} (a constant)")


def expect_changes(before, after, what, change, atol=1e-6):
    """The output moved when the input changed as described by `change`."""
    if not _differs(before, after, atol):
        _fail(what, f"do not change when {change}")


def sequence_gate(call, x, change_at, what, *, positions_dim=1):
    """A sequence model's output, `call(x)`, is repeatable, not constant, differs between positions
    and reads its context: changing position 0 or the last position (`change_at(x, t)`) changes
    the output at some other position (an echo, computed position by position, never does; a
    causal model reads position 0 later on, an anti-causal one the last position earlier on).
    Inputs with a single position only get the first two tests."""
    first = call(x)
    expect_repeatable(first, call(x), what)
    expect_varies(first, what)
    T = first.size(positions_dim)
    if T < 2:
        return first
    others = {0: (1, T - 1), T - 1: (0, T - 1)}  # the positions a change at t is looked for at
    for t, (start, length) in others.items():
        changed = call(change_at(x, t)).narrow(positions_dim, start, length)
        if _differs(first.narrow(positions_dim, start, length), changed, 1e-6):
            break
    else:
        _fail(what, "at every other position stay the same when the first or the last position changes (every "
                    "position is computed on its own: the sequence is never attended to)")
    if not _differs(first.select(positions_dim, 0), first.select(positions_dim, T - 1), 1e-6):
        _fail(what, "are the same at the first and the last position")
    return first
