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


def _subtotals(shapes):
    """{prefix: elements} for every dotted prefix of every entry name ("" is the whole module)."""
    totals = {}
    for name, shape in shapes.items():
        parts = name.split(".")
        for depth in range(len(parts) + 1):
            prefix = ".".join(parts[:depth])
            totals[prefix] = totals.get(prefix, 0) + math.prod(shape)
    return totals


def _children(totals, prefix):
    """The prefixes one level below `prefix` among `totals`' keys."""
    depth = prefix.count(".") + 1 if prefix else 0
    return {".".join(name.split(".")[:depth + 1]) for name in totals
            if name.count(".") >= depth and (not prefix or name.startswith(prefix + "."))} - {""}


def _signature(shapes, prefix):
    """The shapes of the entries under `prefix`, with their names below it."""
    return sorted((name[len(prefix):], tuple(shape)) for name, shape in shapes.items()
                  if name == prefix or name.startswith(prefix + "."))


def count_difference(got_shapes, expected_shapes):
    """Where two modules' parameter counts differ, sub-module by sub-module: e.g.
    "o_proj: 0 in yours, 272 expected (missing o_proj.weight (16, 16), o_proj.bias (16,))".
    Each differing sub-module is followed down while only one of its children differs, so a
    mistake is named at the layer that holds it; a sub-module under another name than the
    expected one, with the same tensors, is no difference. None when nothing differs."""
    got, expected = _subtotals(got_shapes), _subtotals(expected_shapes)
    lines = []

    def entries(prefix):
        inside = lambda name: not prefix or name == prefix or name.startswith(prefix + ".")
        missing = [f"{n} {tuple(s)}" for n, s in expected_shapes.items() if inside(n) and n not in got_shapes]
        extra = [f"{n} {tuple(s)}" for n, s in got_shapes.items() if inside(n) and n not in expected_shapes]
        reshaped = [f"{n} {tuple(got_shapes[n])} where {tuple(s)} is expected" for n, s in expected_shapes.items()
                    if inside(n) and n in got_shapes and tuple(got_shapes[n]) != tuple(s)]
        said = [f"missing {', '.join(missing[:4])}" if missing else "", f"extra {', '.join(extra[:4])}" if extra else "",
                ", ".join(reshaped[:4])]
        return "; ".join(part for part in said if part)

    renamed = []

    def same_under_other_names(children):
        """Pairs (yours, expected) of sub-modules only one side has, with the same tensors: one
        sub-module under another name (`encoder` for `embedding`), which is no difference."""
        only_got = [c for c in children if c not in expected]
        pairs = []
        for name in (c for c in children if c not in got):
            twin = next((c for c in only_got if _signature(got_shapes, c) == _signature(expected_shapes, name)), None)
            if twin is not None:
                only_got.remove(twin)
                pairs.append((twin, name))
        return pairs

    def visit(prefix):
        children = sorted(_children(got, prefix) | _children(expected, prefix))
        pairs = same_under_other_names(children)
        renamed.extend(pairs)
        paired = {name for pair in pairs for name in pair}
        differing = [c for c in children if got.get(c, 0) != expected.get(c, 0) and c not in paired]
        if len(differing) == 1:
            return visit(differing[0])
        if not differing and not prefix:
            return  # every difference was a name
        whole = not differing or (prefix and len(differing) == len(children))
        for name in [prefix] if whole else differing:
            where = name or "the module"
            lines.append(f"{where}: {got.get(name, 0)} in yours, {expected.get(name, 0)} expected"
                         + (f" ({entries(name)})" if entries(name) else ""))

    if got.get("", 0) == expected.get("", 0) and set(got_shapes) == set(expected_shapes):
        return None
    visit("")
    if not lines:
        return None
    if renamed:
        lines.append("the same under other names: " + ", ".join(f"your {a} for {b}" for a, b in renamed[:4]))
    return "; ".join(lines[:6])
