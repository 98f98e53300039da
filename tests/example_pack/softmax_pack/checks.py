"""The checks of the example assignment, one property each."""

import torch
from hypothesis import strategies as st

from graders.checks.compare import expect_close, expect_tensor
from graders.checks.framework import CheckFailed, check

MODULE = "softmax"


def logits(scales=(1.0,)):
    """(rows, n, seed, scale): a small shape to shrink towards, and how large the logits are."""
    return st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(0, 2**16), st.sampled_from(scales))


def _tensor(drawn):
    rows, n, seed, scale = drawn
    return torch.randn(rows, n, generator=torch.Generator().manual_seed(seed)) * scale


def _student_softmax(ctx, x, *dim):
    return expect_tensor(ctx.student.call(MODULE, "softmax", x, *dim), "softmax(x)", shape=tuple(x.shape))


@check("softmax.matches_reference", "softmax(x, dim) equals the reference's, along every axis")
def matches_reference(ctx):
    @ctx.given(logits(), st.sampled_from((-1, 0, 1)))
    def prop(drawn, dim):
        x = _tensor(drawn)
        got = _student_softmax(ctx, x, dim)
        sums = got.sum(dim)
        diagnosis = None if torch.allclose(sums, torch.ones_like(sums), atol=1e-4) else "softmax_wrong_dim"
        expect_close(got, ctx.oracle.call("softmax.softmax", x, dim), "softmax(x, dim)", diagnosis=diagnosis)


@check("softmax.large_logits", "Logits in the thousands give finite weights that sum to one")
def large_logits(ctx):
    @ctx.given(logits(scales=(1e3, 1e4)))
    def prop(drawn):
        got = _student_softmax(ctx, _tensor(drawn))
        if not torch.isfinite(got).all():
            raise CheckFailed("softmax(x) holds NaN or inf for large logits", diagnosis="softmax_overflows")
