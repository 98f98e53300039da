"""A module's weights as the grader sees them: read back with `state_dict()`, never described by the worker.

`ctx.student.parameters(handle)` is the worker's own description of a module (names, shapes,
requires_grad, buffer or parameter), a measurement the student's code could forge. Checks that
score sizes and counts use the tensors `state_dict()` returns instead, and compare them with what
the grader expects; only what no tensor can show (a buffer rather than a parameter, a frozen
parameter) still rests on the worker's description, in checks marked `worker_measured`.
"""

import math

import torch

from graders.checks.framework import CheckFailed


def state_tensors(ctx, handle, what="the module"):
    """{name: tensor} of `handle.state_dict()`, or the check fails saying what came back instead."""
    state = ctx.student.state_dict(handle)
    if not isinstance(state, dict) or not all(isinstance(k, str) and type(v) is torch.Tensor for k, v in state.items()):
        raise CheckFailed(f"{what}.state_dict() must map names to tensors, got {type(state).__name__}",
                          diagnosis="returns_wrong_type")
    return state


def state_shapes(ctx, handle, what="the module"):
    """{name: shape} of the module's state_dict."""
    return {name: tuple(t.shape) for name, t in state_tensors(ctx, handle, what).items()}


def learnable(state):
    """The entries that can be trained parameters: floating point, all finite (an additive mask of
    -inf, an integer index table or a boolean flag cannot)."""
    return {name: t for name, t in state.items()
            if t.is_floating_point() and (t.numel() == 0 or bool(torch.isfinite(t).all()))}


def numel(state):
    return sum(math.prod(t.shape) for t in state.values())


def distinct_values(state, seed):
    """A different value for every element of every floating entry, for `shared_entries`."""
    g = torch.Generator().manual_seed(seed)
    return {name: torch.rand(t.shape, generator=g, dtype=torch.float64).to(t.dtype) + 0.5
            for name, t in state.items() if t.is_floating_point()}


def shared_entries(ctx, handle, state, seed):
    """Names whose tensors are one and the same in the module (tied or reused layers): each entry
    gets its own values, loaded and read back; a shared tensor keeps only the last one written."""
    sent = distinct_values(state, seed)
    ctx.student.load_state_dict(handle, sent, strict=False)
    back = state_tensors(ctx, handle)
    return sorted(name for name, value in sent.items()
                  if name not in back or back[name].shape != value.shape or not torch.equal(back[name], value))


def parameter_entries(ctx, handle):
    """The module's parameters (not buffers) as [{name, shape, dtype, requires_grad}]: the worker's own
    description, used to know where to load weights, never to score (see the module docstring)."""
    return list(ctx.student.parameters(handle)["parameters"])


def is_float_entry(entry):
    return "float" in str(entry["dtype"])
