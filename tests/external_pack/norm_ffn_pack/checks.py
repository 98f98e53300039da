"""The checks of the external example course: each layer under the grader's own weights, and
the questions file."""

import torch
from hypothesis import strategies as st

from graders.checks.compare import expect_close, expect_tensor
from graders.checks.framework import CheckFailed, check
from graders.checks.questions import numeric_question, written_question


def shapes():
    """(batch, d, hidden, seed): small shapes to shrink towards."""
    return st.tuples(st.integers(1, 3), st.integers(2, 8), st.integers(2, 12), st.integers(0, 2**16))


def _weights(names_and_shapes, seed):
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(*shape, generator=generator) for name, shape in names_and_shapes.items()}


def _loaded(ctx, layer, args, state):
    """The student's `layer` built in the worker with the grader's weights: a handle."""
    handle = ctx.student.construct("layers", layer, *args)
    keys = ctx.student.load_state_dict(handle, state, strict=False)
    if keys["missing_keys"] or keys["unexpected_keys"]:
        raise CheckFailed(f"{layer}{args} has other parameters than {sorted(state)}: missing {keys['missing_keys']}, "
                          f"unexpected {keys['unexpected_keys']}", diagnosis="swiglu_has_bias" if layer == "SwiGLU" else None)
    return handle


@check("rmsnorm.matches_reference", "RMSNorm(d) equals the reference's under random weights")
def rmsnorm_matches_reference(ctx):
    @ctx.given(shapes())
    def prop(drawn):
        batch, d, _, seed = drawn
        state = _weights({"weight": (d,)}, seed)
        x = torch.randn(batch, d, generator=torch.Generator().manual_seed(seed + 1)) * 3 + 1
        handle = _loaded(ctx, "RMSNorm", (d,), state)
        got = expect_tensor(ctx.student.call(handle, "__call__", x), "RMSNorm(d)(x)", shape=tuple(x.shape))
        centred = x - x.mean(-1, keepdim=True)
        like_layer_norm = centred * centred.pow(2).mean(-1, keepdim=True).add(1e-6).rsqrt() * state["weight"]
        diagnosis = "rmsnorm_subtracts_mean" if torch.allclose(got, like_layer_norm, atol=1e-4) else None
        expect_close(got, ctx.oracle.call("layer_output", "RMSNorm", (d,), state, x), "RMSNorm(d)(x)", diagnosis=diagnosis)


@check("rmsnorm.tiny_inputs", "RMSNorm keeps eps inside the root: inputs near zero stay bounded")
def rmsnorm_tiny_inputs(ctx):
    @ctx.given(shapes())
    def prop(drawn):
        batch, d, _, seed = drawn
        x = torch.randn(batch, d, generator=torch.Generator().manual_seed(seed)) * 1e-4
        handle = _loaded(ctx, "RMSNorm", (d,), {"weight": torch.ones(d)})
        got = expect_tensor(ctx.student.call(handle, "__call__", x), "RMSNorm(d)(x)", shape=tuple(x.shape))
        eps_outside = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6)
        diagnosis = "rmsnorm_eps_outside_root" if torch.allclose(got, eps_outside, rtol=1e-3) else None
        expect_close(got, ctx.oracle.call("layer_output", "RMSNorm", (d,), {"weight": torch.ones(d)}, x),
                     "RMSNorm(d)(x) for inputs near zero", diagnosis=diagnosis)


@check("swiglu.matches_reference", "SwiGLU(d, hidden) equals the reference's under random weights")
def swiglu_matches_reference(ctx):
    @ctx.given(shapes())
    def prop(drawn):
        batch, d, hidden, seed = drawn
        state = _weights({"w1.weight": (hidden, d), "w2.weight": (d, hidden), "w3.weight": (hidden, d)}, seed)
        x = torch.randn(batch, d, generator=torch.Generator().manual_seed(seed + 1))
        handle = _loaded(ctx, "SwiGLU", (d, hidden), state)
        got = expect_tensor(ctx.student.call(handle, "__call__", x), "SwiGLU(d, hidden)(x)", shape=tuple(x.shape))
        swapped = {"w1.weight": state["w3.weight"], "w2.weight": state["w2.weight"], "w3.weight": state["w1.weight"]}
        diagnosis = "swiglu_gate_swapped" if torch.allclose(
            got, ctx.oracle.call("layer_output", "SwiGLU", (d, hidden), swapped, x), atol=1e-4) else None
        expect_close(got, ctx.oracle.call("layer_output", "SwiGLU", (d, hidden), state, x), "SwiGLU(d, hidden)(x)",
                     diagnosis=diagnosis)


@check("swiglu.parameters", "SwiGLU(d, hidden) has 3 * d * hidden parameters, none of them biases")
def swiglu_parameters(ctx):
    handle = ctx.student.construct("layers", "SwiGLU", 6, 10)
    shapes_of = {p["name"]: tuple(p["shape"]) for p in ctx.student.parameters(handle)["parameters"]}
    if shapes_of != {"w1.weight": (10, 6), "w2.weight": (6, 10), "w3.weight": (10, 6)}:
        raise CheckFailed(f"SwiGLU(6, 10) has the parameters {shapes_of}, expected w1.weight (10, 6), "
                          "w2.weight (6, 10) and w3.weight (10, 6)",
                          diagnosis="swiglu_has_bias" if any(name.endswith(".bias") for name in shapes_of) else None)


numeric_question(__name__, "answers.swiglu_parameters", "swiglu_parameters", "Parameters of SwiGLU",
                 context="d = 512, hidden = 1376")
written_question(__name__, "answers.why_no_mean", "why_no_mean", "Why does RMSNorm drop LayerNorm's mean subtraction?")
