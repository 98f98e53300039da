"""Comparisons that explain themselves: every mismatch carries the numbers a report shows."""

import math

import torch

from graders.checks.framework import CheckFailed, UnusableReturn, describe_returned
from graders.checks.localise import describe_difference

DTYPE_KINDS = {
    "float": lambda t: t.is_floating_point(),
    "integer": lambda t: not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool,
    "bool": lambda t: t.dtype == torch.bool,
}


def expect_tensor(value, what, *, shape=None, dtype=None, finite=False, diagnosis=None):
    """The student returned a plain tensor of the given shape, or the check fails saying so.

    Not a tensor at all (None, a list, an object kept in the worker): `UnusableReturn`, an error
    that says what came back. A tensor of the wrong shape, of the wrong `dtype` (a torch.dtype,
    or "float" / "integer" / "bool" for any of that kind) or, with `finite=True`, holding NaN or
    inf: `CheckFailed`, a wrong answer."""
    if type(value) is not torch.Tensor:
        raise UnusableReturn(f"{what}: expected a tensor, got {describe_returned(value)}",
                             diagnosis=diagnosis or "returns_wrong_type")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise CheckFailed(
            f"{what}: expected shape {tuple(shape)}, got {tuple(value.shape)}",
            diagnosis=diagnosis or "wrong_shape",
            details={"numbers": {"expected_shape": list(shape), "got_shape": list(value.shape)}},
        )
    if dtype is not None:
        right = DTYPE_KINDS[dtype](value) if isinstance(dtype, str) else value.dtype == dtype
        if not right:
            wanted = f"a {dtype} dtype" if isinstance(dtype, str) else str(dtype).replace("torch.", "")
            raise CheckFailed(f"{what}: expected {wanted}, got dtype {str(value.dtype).replace('torch.', '')}",
                              diagnosis=diagnosis)
    if finite and value.is_floating_point() and not torch.isfinite(value).all():
        kind = "NaN" if torch.isnan(value).any() else "inf"
        raise CheckFailed(f"{what} contain {kind}", diagnosis=diagnosis)
    return value


def expect_tuple(value, what, length, expected):
    """The student's `what` returned a tuple (or list) of `length` values, or the check reports
    an error saying what came back, e.g. "attend returned None, but a tuple (values,
    weights) of tensors was expected"."""
    if not isinstance(value, (tuple, list)) or len(value) != length:
        raise UnusableReturn(f"{what} returned {describe_returned(value)}, but {expected} was expected")
    return tuple(value)


def tensor_numbers(got, expected):
    """max abs/rel error, first mismatching index, shapes and dtypes of two tensors."""
    numbers = {
        "expected_shape": list(expected.shape),
        "got_shape": list(got.shape),
        "expected_dtype": str(expected.dtype).replace("torch.", ""),
        "got_dtype": str(got.dtype).replace("torch.", ""),
    }
    if got.shape != expected.shape:
        return numbers
    g, e = got.double(), expected.double()
    diff = (g - e).abs()
    both_nan = torch.isnan(g) & torch.isnan(e)
    same_inf = torch.isinf(g) & torch.isinf(e) & (g == e)
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    if diff.numel():
        numbers["max_abs_error"] = float(diff.max())
        rel = diff / e.abs().clamp_min(1e-12)
        numbers["max_rel_error"] = float(rel.max())
        worst = int(diff.flatten().argmax())
        if diff.flatten()[worst] > 0:
            numbers["first_mismatch_index"] = list(_unravel(worst, got.shape))
    return numbers


def _unravel(flat, shape):
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def is_close(got, expected, *, atol=1e-5, rtol=1e-4):
    return (
        type(got) is torch.Tensor
        and got.shape == expected.shape
        and torch.allclose(got.double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True)
    )


def expect_close(got, expected, what, *, atol=1e-5, rtol=1e-4, diagnosis=None, details=None, axes=None, locate=None):
    """got equals expected up to float32 rounding, or the check fails with the numbers and, in
    words, how they differ (`describe_difference`, its axes named by `axes`). `locate`: a function
    that says where in the student's module the difference arises (`module_divergence`), called
    once the failure is final (graders/checks/framework.py)."""
    expect_tensor(got, what, shape=expected.shape)
    if is_close(got, expected, atol=atol, rtol=rtol):
        return
    numbers = tensor_numbers(got, expected)
    numbers["margin"] = tolerance_margin(got, expected, atol=atol, rtol=rtol)
    surprise_nan = torch.isnan(got) & ~torch.isnan(expected)
    if surprise_nan.any():
        where = list(_unravel(int(surprise_nan.flatten().nonzero()[0]), got.shape))
        summary = f"{what} contain NaN where the expected values are finite (first at index {where})"
    else:
        summary = f"{what} differ from the expected values (max abs error {numbers.get('max_abs_error', float('nan')):.3g})"
        how = describe_difference(got, expected, axes=axes, atol=atol, rtol=rtol)
        summary += f": {how}" if how else ""
        details = {**(details or {}), "how": how}
    raise CheckFailed(
        summary,
        diagnosis=diagnosis,
        details={"numbers": numbers, "expected": _short(expected), "got": _short(got), **(details or {})},
        locate=locate,
    )


def tolerance_margin(got, expected, *, atol, rtol):
    """How many times its tolerance (allclose's atol + rtol * |expected|) the worst element is off;
    inf where a NaN or inf appears that the expected values do not have."""
    g, e = got.double(), expected.double()
    diff = (g - e).abs()
    agree = (torch.isnan(g) & torch.isnan(e)) | (torch.isinf(g) & (g == e))
    diff = torch.where(agree, torch.zeros_like(diff), diff.nan_to_num(nan=math.inf))
    return float((diff / (atol + rtol * e.abs().nan_to_num(posinf=0.0, neginf=0.0))).max()) if diff.numel() else 0.0


def _short(tensor, limit=400):
    text = str(tensor.detach().double().round(decimals=4).tolist()) if tensor.numel() <= 64 else f"tensor of shape {tuple(tensor.shape)}"
    return text if len(text) <= limit else text[:limit] + "..."
