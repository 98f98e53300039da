"""Checks for scaled dot-product attention and multi-head attention (seed 004, parts 1 and 2)."""

import itertools
import math
import re

import torch
from hypothesis import strategies as st

from graders.checks.compare import expect_close, expect_tensor, expect_tuple, is_close
from graders.checks.framework import CheckFailed, check, student_line
from graders.checks.gates import expect_changes, expect_repeatable, sequence_gate
from graders.checks.localise import describe_difference, module_divergence
from .strategies import FLOAT_DTYPES, MASK_FORMS, attention_inputs, mha_inputs, sdp_arguments, tensors_from
from graders.checks.weights import count_difference, learnable, numel, state_tensors
from graders.oracles import OracleUnavailable
from graders.sandbox import StudentError

MODULE = "attention"
SDP = "attention.scaled_dot_product"
SDP_RETURNS = "a tuple (values, attention) of tensors"


# ---------------------------------------------------------------- the student's exceptions


def explained(error, call):
    """The student's exception, saying which call on which input raised it and at which line of theirs."""
    return StudentError(error.exc_type, f"{error.message}; raised by {call}{student_line(error)}"[:900],
                        error.traceback, output=error.output, debug_traceback=error.debug_traceback)


def call_sdp(ctx, q, k, v, drop, mask):
    try:
        return ctx.student.call(MODULE, "scaled_dot_product", q, k, v, drop, mask)
    except StudentError as error:
        raise explained(error, sdp_call_text(q, k, v, drop, mask)) from None


def sdp_call_text(q, k, v, drop, mask):
    masked = "mask=None" if mask is None else f"a {_dtype_name(mask)} mask of shape {tuple(mask.shape)}"
    return (f"scaled_dot_product(q of shape {tuple(q.shape)}, k of shape {tuple(k.shape)}, v of shape "
            f"{tuple(v.shape)}, all {_dtype_name(q)}, attn_drop_rate={drop}, {masked})")


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


# ---------------------------------------------------------------- known mistakes, as behaviour


def _variant_weights(q, k, mask, *, scale, softmax_dim=-1, mask_axis="key", invert=False, after=False,
                     fill=float("-inf"), scale_after=False):
    """Attention weights as a known mistake computes them (dropout off). `scale_after`: the logits
    go through the softmax unscaled and the weights are divided by `scale`."""
    logits = q.double() @ k.double().transpose(-2, -1) / (1.0 if scale_after else scale)
    if mask is not None:
        blocked = mask.bool() if not invert else ~mask.bool()
        blocked = blocked[:, None, None, :] if mask_axis == "key" else blocked[:, None, :, None]
        if after:
            return torch.softmax(logits, softmax_dim).masked_fill(blocked, 0.0)
        logits = logits.masked_fill(blocked, fill)
    weights = torch.softmax(logits, softmax_dim)
    return weights / scale if scale_after else weights


def diagnose_weights(q, k, mask, got):
    """The known mistake whose attention weights equal the student's, if any. Weights that are all
    NaN match none: a NaN agrees with the NaN of any mistake that blocks a whole row."""
    if torch.isnan(got).all():
        return None
    H, d = q.size(1), q.size(-1)
    variants = {
        "attention_not_scaled": dict(scale=1.0),
        "attention_scaled_by_d_k": dict(scale=float(d)),
        "softmax_wrong_dim": dict(scale=math.sqrt(d), softmax_dim=-2),
        "scale_after_softmax": dict(scale=math.sqrt(d), scale_after=True),
    }
    if H > 1:  # sqrt(H * d) = sqrt(d_model), the width of the whole embedding
        variants["attention_scaled_by_d_model"] = dict(scale=math.sqrt(H * d))
    if mask is not None:
        variants.update(
            {
                "mask_on_query_axis": dict(scale=math.sqrt(d), mask_axis="query"),
                "mask_inverted": dict(scale=math.sqrt(d), invert=True),
                "mask_after_softmax": dict(scale=math.sqrt(d), after=True),
                "mask_fill_zero": dict(scale=math.sqrt(d), fill=0.0),
                "mask_ignored": dict(scale=math.sqrt(d)),
            }
        )
    if mask is not None:  # with a finite fill, the padded query rows come out uniform rather than NaN
        variants["mask_on_query_axis"] = [variants["mask_on_query_axis"],
                                          dict(scale=math.sqrt(d), mask_axis="query", fill=-1e30)]
    for diagnosis, options in variants.items():
        masked = mask if diagnosis != "mask_ignored" else None
        if d == 1 and diagnosis in ("attention_not_scaled", "attention_scaled_by_d_k", "scale_after_softmax"):
            continue  # indistinguishable from the right answer when d = 1
        for each in options if isinstance(options, list) else [options]:
            if is_close(got, _variant_weights(q, k, masked, **each).to(got.dtype), atol=1e-4):
                return diagnosis
    if mask is not None and mask.size(0) == mask.size(1) == q.size(2):
        # A (B, T) mask broadcast against the (T, T) scores: it only lines up when B == T.
        logits = q.double() @ k.double().transpose(-2, -1) / math.sqrt(d)
        as_square = torch.softmax(logits.masked_fill(mask.bool()[None, None], float("-inf")), -1)
        if is_close(got, as_square.to(got.dtype), atol=1e-4):
            return "mask_as_square"
    return None


def _student_attention(ctx, ex, *, drop=0.0, mask="padding"):
    mask_value = ex.padding if mask == "padding" else mask
    try:
        result = ctx.student.call(MODULE, "scaled_dot_product", ex.q, ex.k, ex.v, drop, mask_value)
    except StudentError as error:
        if mask_value is None or mask_value.dim() != 2 or not _works_with_4d_mask(ctx, ex, drop, mask_value):
            raise explained(error, sdp_call_text(ex.q, ex.k, ex.v, drop, mask_value)) from None
        B, _, T, _ = ex.q.shape
        raise CheckFailed(
            f"a (B, T) padding mask with B={B}, T={T} makes your code raise {error.exc_type}: {error.message}; "
            "the same mask viewed as (B, 1, 1, T) works",
            diagnosis="mask_as_square",
        ) from None
    values, weights = expect_tuple(result, "scaled_dot_product", 2, SDP_RETURNS)
    B, H, T, d = ex.q.shape
    values = expect_tensor(values, "values", shape=(B, H, T, d))
    weights = expect_tensor(weights, "attention weights", shape=(B, H, T, T))
    return values, weights


def _works_with_4d_mask(ctx, ex, drop, mask):
    try:
        ctx.student.call(MODULE, "scaled_dot_product", ex.q, ex.k, ex.v, drop, mask[:, None, None, :])
        return True
    except StudentError:
        return False


def attention_gate(ctx, ex, values, weights):
    """The attention does its job (see graders/checks/gates.py): no NaN, repeatable, and, on the
    same q, k, v without a mask (whatever the mask handling, graded elsewhere), weights that follow
    the queries and values that follow v."""
    if torch.isnan(weights).any() or torch.isnan(values).any():  # a property that NaN outputs satisfy
        raise CheckFailed("NaN in the output although every row keeps at least one key",
                          diagnosis=diagnose_weights(ex.q, ex.k, ex.padding, weights) or "nan_fully_masked")

    def attend(inputs):  # reseeded: weights dropped out at rate 0 are charged by the comparisons, not here
        ctx.student.seed(ctx.seed)
        return _student_attention(ctx, inputs)

    first_values, first_weights = attend(ex)
    again_values, again_weights = attend(ex)
    expect_repeatable(first_weights, again_weights, "attention weights")
    expect_repeatable(first_values, again_values, "values")
    plain = type(ex)(ex.q, ex.k, ex.v, None)
    plain_values, plain_weights = attend(plain)
    noise_q, noise_v = tensors_from(5, ex.q.shape, ex.v.shape)
    if ex.q.size(2) >= 2:
        _, moved = attend(type(ex)(3 * noise_q, ex.k, ex.v, None))
        expect_changes(plain_weights, moved, "attention weights (no mask)", "the queries change")
    moved_values, _ = attend(type(ex)(ex.q, ex.k, ex.v + 3 * noise_v, None))
    expect_changes(plain_values, moved_values, "values (no mask)", "v changes")


def _attention_maps(expected, got):
    return {"attention_maps": {"expected": expected[0, 0].tolist(), "got": got[0, 0].tolist()}}


def _padding_form(mask, q):
    """The (B, T) padding a mask is a form of ((B, T) itself, or (B, 1, 1, T)), as floats; None for
    no mask or a mask per query and key."""
    if mask is None:
        return None
    if mask.dim() == 2:
        return mask.float()
    B, T = q.size(0), q.size(2)
    if mask.dim() == 4 and tuple(mask.shape) == (B, 1, 1, T):
        return mask[:, 0, 0, :].float()
    return None


def _compare_with_reference(ctx, ex, mask):
    values, weights = _student_attention(ctx, ex, mask=mask)
    expected_values, expected_weights = ctx.oracle.call(SDP, ex.q, ex.k, ex.v, 0.0, mask)
    if not is_close(weights, expected_weights):
        padding = _padding_form(mask, ex.q)
        diagnosis = diagnose_weights(ex.q, ex.k, padding, weights)
        if diagnosis is None and mask is not None and mask.dim() == 4 and padding is None:
            diagnosis = _diagnose_full_mask(ctx, ex, mask, weights)
        expect_close(weights, expected_weights, "attention weights", diagnosis=diagnosis,
                     details=_attention_maps(expected_weights, weights), axes=("batch", "head", "query", "key"))
    expect_close(values, expected_values, "values (attention @ v)", axes=("batch", "head", "query", "feature"))


def _diagnose_full_mask(ctx, ex, mask, weights):
    """The mask mistake whose weights equal the student's under a mask broadcastable to (B, H, T, T):
    the mask read with the opposite polarity, not applied, applied after the softmax, or filled with 0.
    Weights that are all NaN match no mistake: a NaN agrees with the NaN of any wrong mask that
    blocks a whole row, so nothing is named on them."""
    logits = ex.q.double() @ ex.k.double().transpose(-2, -1) / math.sqrt(ex.q.size(-1))
    blocked = mask.bool()
    if torch.isnan(weights).all():
        return None
    raw = ex.q.double() @ ex.k.double().transpose(-2, -1)
    d = ex.q.size(-1)
    scaled = {"attention_not_scaled": raw, "attention_scaled_by_d_k": raw / d}  # the mask right, the scale not
    if ex.q.size(1) > 1:
        scaled["attention_scaled_by_d_model"] = raw / math.sqrt(d * ex.q.size(1))
    for diagnosis, wrong_logits in scaled.items():
        if d > 1 and is_close(weights, torch.softmax(wrong_logits.masked_fill(blocked, float("-inf")), -1)
                              .to(weights.dtype), atol=1e-4):
            return diagnosis
    if is_close(weights, torch.softmax(logits.masked_fill(blocked, float("-inf")), -2).to(weights.dtype), atol=1e-4):
        return "softmax_wrong_dim"
    computed = {"mask_after_softmax": torch.softmax(logits, -1).masked_fill(blocked, 0.0),
                "mask_fill_zero": torch.softmax(logits.masked_fill(blocked, 0.0), -1),
                # 1 read as "attend", with the large finite fill of the tutorials (no row goes NaN)
                "mask_inverted": torch.softmax(logits.masked_fill(~blocked, -1e9), -1)}
    for diagnosis, wrong in computed.items():
        if is_close(weights, wrong.to(weights.dtype), atol=1e-4):
            return diagnosis
    for diagnosis, other in (("mask_inverted", (~mask.bool()).to(mask.dtype)), ("mask_ignored", None)):
        try:
            if is_close(weights, ctx.oracle.call(SDP, ex.q, ex.k, ex.v, 0.0, other)[1], atol=1e-4):
                return diagnosis
        except OracleUnavailable:  # a self-check has only the right answers: the mistake goes unnamed
            return None
    return None


# ---------------------------------------------------------------- scaled_dot_product


@check("attention.matches_reference", "softmax(QK^T / sqrt(d_k)) V matches the reference: every form of mask, "
       "float32 and float64, every size from 1 (at attn_drop_rate 0)")
def matches_reference(ctx):
    def prop(ex):
        _compare_with_reference(ctx, ex, ex.mask)

    for form, dtype in itertools.product(MASK_FORMS, FLOAT_DTYPES):  # every form and dtype drawn, each grade
        ctx.given(sdp_arguments(forms=(form,), dtypes=(dtype,)), max_examples=max(2, ctx.max_examples // 6))(prop)


@check("attention.rows_sum_to_one", "Every attention row sums to one, with and without padding")
def rows_sum_to_one(ctx):
    @ctx.given(attention_inputs(padded=True))
    def prop(ex):
        values, weights = _student_attention(ctx, ex)
        sums = weights.sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            worst = (sums - 1).abs().max().item()
            how = describe_difference(sums, torch.ones_like(sums), axes=("batch", "head", "query"), atol=1e-4)
            raise CheckFailed(
                f"attention rows sum to values other than one (off by up to {worst:.3g}): the sums: {how}",
                diagnosis=diagnose_weights(ex.q, ex.k, ex.padding, weights),
                details={"got": str(sums[0, 0].tolist()), "how": how},
            )
        attention_gate(ctx, ex, values, weights)


@check("attention.padded_keys_get_zero_weight", "Padded keys get exactly zero weight, and no row is NaN")
def padded_keys_get_zero_weight(ctx):
    @ctx.given(attention_inputs(padded=True))
    def prop(ex):
        values, weights = _student_attention(ctx, ex)
        if torch.isnan(weights).any() or torch.isnan(values).any():
            raise CheckFailed(
                "NaN in the output although every row keeps at least one key",
                diagnosis=diagnose_weights(ex.q, ex.k, ex.padding, weights) or "nan_fully_masked",
            )
        blocked = ex.padding.bool()[:, None, None, :].expand_as(weights)
        leaked = weights[blocked].abs().max().item() if blocked.any() else 0.0
        if leaked != 0.0:
            diagnosis = diagnose_weights(ex.q, ex.k, ex.padding, weights)
            if diagnosis is None and leaked < 1e-3:
                diagnosis = "mask_small_fill"
            expected = ctx.oracle.call(SDP, ex.q, ex.k, ex.v, 0.0, ex.padding)[1]
            raise CheckFailed(
                f"a padded key received attention weight {leaked:.3g}",
                diagnosis=diagnosis,
                details=_attention_maps(expected, weights),
            )
        attention_gate(ctx, ex, values, weights)


@check("attention.ignores_padded_content", "Outputs do not change when the content at padded positions changes")
def ignores_padded_content(ctx):
    @ctx.given(attention_inputs(padded=True))
    def prop(ex):
        values, first_weights = _student_attention(ctx, ex)
        noise_k, noise_v = tensors_from(7, ex.k.shape, ex.v.shape)
        padded = ex.padding.bool()[:, None, :, None]  # (B, 1, T, 1) over keys/values
        changed = type(ex)(ex.q, torch.where(padded, noise_k * 10, ex.k), torch.where(padded, noise_v * 10, ex.v), ex.padding)
        changed_values, weights = _student_attention(ctx, changed)
        real_queries = ~ex.padding.bool()[:, None, :, None].expand_as(values)
        if not torch.allclose(values[real_queries], changed_values[real_queries], atol=1e-5, equal_nan=True):
            # named only from the weights themselves: a difference alone has other causes (dropout left on)
            moved = ((values - changed_values).abs().amax(-1) > 1e-5) & ~ex.padding.bool()[:, None, :]  # (B, H, T)
            padded_weight = (weights * ex.padding.bool()[:, None, None, :]).sum(-1)[~ex.padding.bool()[:, None, :].expand_as(moved)]
            raise CheckFailed(
                "changing the keys and values at padded positions changed the outputs of real positions "
                f"(at (batch, head, query) {moved.nonzero().tolist()[:6]}; the weight real queries give padded keys "
                f"is up to {padded_weight.abs().max().item() if padded_weight.numel() else 0.0:.3g})",
                diagnosis=diagnose_weights(ex.q, changed.k, ex.padding, weights),
            )
        attention_gate(ctx, ex, values, first_weights)


@check("attention.batch_size_vs_length", "A (B, T) mask works when B equals T and when it does not")
def batch_size_vs_length(ctx):
    @ctx.given(st.booleans().flatmap(lambda square: attention_inputs(padded=True, square_batch=square)))
    def prop(ex):
        values, weights = _student_attention(ctx, ex)
        expected_values, expected_weights = ctx.oracle.call(SDP, ex.q, ex.k, ex.v, 0.0, ex.padding)
        if not is_close(weights, expected_weights):
            expect_close(weights, expected_weights, "attention weights",
                         diagnosis=diagnose_weights(ex.q, ex.k, ex.padding, weights),
                         details=_attention_maps(expected_weights, weights))
        expect_close(values, expected_values, "values")


@check("attention.four_d_mask", "A mask broadcastable to (B, H, T, T) (a causal mask) is applied per query and key")
def four_d_mask(ctx):
    @ctx.given(attention_inputs())
    def prop(ex):
        T = ex.q.size(2)
        causal = torch.triu(torch.ones(T, T), diagonal=1)[None, None]  # (1, 1, T, T), 1 = blocked
        _compare_with_reference(ctx, ex, causal)


DROPOUT_RATES = (0.3, 0.7)  # two rates, far apart: a rate the code fixes or ignores shows at the other


def _dropped_weights(ctx, p, salt):
    """scaled_dot_product at rate p, and at rate 0, on q, k of the grader's and v the identity
    (d = T): the values it returns are then the weights it multiplied v with, whatever weights it
    returns beside them. (values at p, the weights returned at p, the values at 0: its own weights
    without dropout, so that a mistake of the weights themselves is charged by the other checks.)"""
    B, H, T = 4, 4, 16
    q, k = tensors_from(ctx.seed + salt, (B, H, T, T), (B, H, T, T))
    v = torch.eye(T).expand(B, H, T, T).contiguous()
    out = []
    for rate in (p, 0.0):
        ctx.student.seed(ctx.seed + salt)
        values, weights = expect_tuple(call_sdp(ctx, q, k, v, rate, None), "scaled_dot_product", 2, SDP_RETURNS)
        out.append((expect_tensor(values, "values", shape=(B, H, T, T)).double(),
                    expect_tensor(weights, "attention weights", shape=(B, H, T, T)).double()))
    (dropped, returned), (undropped, _) = out
    return dropped, returned, undropped


def _dropped_values_share(ctx, p):
    """The share of exact zeros among the values on a random v: about p where the code drops out
    the values instead of the weights, none where it drops the weights."""
    q, k, v = tensors_from(ctx.seed + 7, (4, 4, 16, 8), (4, 4, 16, 8), (4, 4, 16, 8))
    ctx.student.seed(ctx.seed + 7)
    values = expect_tuple(call_sdp(ctx, q, k, v, p, None), "scaled_dot_product", 2, SDP_RETURNS)[0]
    return (expect_tensor(values, "values", shape=v.shape) == 0).double().mean().item()


@check("attention.dropout", "Dropout zeroes attention weights at the rate it is given and scales the rest by 1/(1-p)")
def dropout(ctx):
    # Either reading of "(values, attention)" is accepted: the weights returned may be those that
    # multiplied v (after dropout) or the same before dropout (rows summing to one).
    seen = {p: _dropped_weights(ctx, p, salt) for salt, p in enumerate(DROPOUT_RATES)}
    shares = {p: (dropped == 0).double().mean().item() for p, (dropped, _, _) in seen.items()}
    rows = []
    for p, share in shares.items():
        n = seen[p][0].numel()
        low, high = p - 5 * math.sqrt(p * (1 - p) / n), p + 5 * math.sqrt(p * (1 - p) / n)
        rows.append({"name": f"share of weights dropped at attn_drop_rate={p}", "value": share, "target": p,
                     "low": low, "high": high})
    for p, row in zip(shares, rows):
        share = row["value"]
        if not row["low"] <= share <= row["high"]:
            if share == 0:
                diagnosis = "dropout_not_on_weights" if abs(_dropped_values_share(ctx, p) - p) < 0.1 else \
                    "dropout_not_applied"
            elif max(shares.values()) - min(shares.values()) < 0.05:
                diagnosis = "dropout_rate_ignored"
            else:
                diagnosis = None
            raise CheckFailed(f"{share:.3f} of the weights that multiplied v were zero with attn_drop_rate={p} "
                              f"(expected within [{row['low']:.3f}, {row['high']:.3f}]); seen with v the identity, so "
                              "that the values returned are those weights", diagnosis=diagnosis,
                              details={"proportions": rows})
    values_share = _dropped_values_share(ctx, DROPOUT_RATES[1])
    if values_share > DROPOUT_RATES[1] / 2:  # the weights dropped out give no zero value on a random v
        raise CheckFailed(f"at attn_drop_rate={DROPOUT_RATES[1]}, {values_share:.3f} of the values are exactly zero on a "
                          "random v: the values are dropped out, not the attention weights",
                          diagnosis="dropout_not_on_weights", details={"proportions": rows})
    for p, (dropped, returned, undropped) in seen.items():
        kept = (dropped != 0) & (undropped != 0)
        ratio = dropped[kept] / undropped[kept]
        if not torch.allclose(ratio, torch.full_like(ratio, 1 / (1 - p)), rtol=1e-3):
            raise CheckFailed(f"at attn_drop_rate={p} the surviving weights are scaled by {ratio.median().item():.3f}, "
                              f"expected 1/(1-p) = {1 / (1 - p):.3f}", diagnosis="dropout_not_inverted",
                              details={"proportions": rows})
        if not (is_close(returned, undropped, atol=1e-5) or is_close(returned, dropped, atol=1e-5)):
            raise CheckFailed(f"at attn_drop_rate={p} the attention weights returned are neither those that multiplied "
                              "v (after dropout) nor the same before dropout",
                              details={"proportions": rows, **_attention_maps(undropped, returned)})


# ---------------------------------------------------------------- multi-head attention


def reference_weights(ex):
    """Weights of a reference MultiHeadAttention (qkv blocks q|k|v), drawn from the example's seed."""
    E = ex.embed_dim
    g = torch.Generator().manual_seed(ex.weights_seed)
    bound = 1 / math.sqrt(E)
    return {
        "qkv_proj.weight": (torch.rand(3 * E, E, generator=g) * 2 - 1) * bound,
        "qkv_proj.bias": (torch.rand(3 * E, generator=g) * 2 - 1) * bound,
        "o_proj.weight": (torch.rand(E, E, generator=g) * 2 - 1) * bound,
        "o_proj.bias": (torch.rand(E, generator=g) * 2 - 1) * bound,
    }


def to_layout(weights, n_heads, layout):
    """Reference (blocks q|k|v) weights in another valid qkv_proj layout.
    'interleaved': per head [q_h | k_h | v_h], as reshape(B, T, H, 3 * hd).chunk(3, -1) reads them."""
    if layout == "blocks":
        return weights
    E = weights["o_proj.weight"].size(0)
    hd = E // n_heads
    w = weights["qkv_proj.weight"].view(3, n_heads, hd, E).transpose(0, 1).reshape(3 * E, E)
    b = weights["qkv_proj.bias"].view(3, n_heads, hd).transpose(0, 1).reshape(3 * E)
    return {**weights, "qkv_proj.weight": w, "qkv_proj.bias": b}


QKV_LAYOUTS = ("blocks", "interleaved")


def build_student_mha(ctx, ex, drop=0.0):
    return ctx.student.construct(MODULE, "MultiHeadAttention", ex.embed_dim, ex.n_heads, drop)


def _load_weights(ctx, handle, weights):
    """Load reference-named weights into the student's module, or fail saying which of the
    template's names it lacks and what it has instead (the weights would not reach it)."""
    result = ctx.student.load_state_dict(handle, weights, strict=False)
    unused = sorted(result.get("unexpected_keys", [])) if isinstance(result, dict) else []
    if any(name.endswith(".weight") for name in unused):  # a missing bias is a count, graded as one
        has = sorted(state_tensors(ctx, handle, "MultiHeadAttention"))
        raise CheckFailed(f"MultiHeadAttention has no {', '.join(unused[:4])}: the grader loads its weights under the "
                          f"template's names qkv_proj and o_proj, and your module has {', '.join(has[:6]) or 'no parameters'}"
                          f"{', ...' if len(has) > 6 else ''}, so its outputs cannot be compared",
                          diagnosis="mha_template_names")


def _attend(q, k, v, blocked=None):
    """softmax(q k^T / sqrt(d)) v, with blocked (broadcastable, True = hidden) filled by -inf."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if blocked is not None:
        scores = scores.masked_fill(blocked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _mha_variants(ex, weights):
    """Outputs of known multi-head mistakes under the reference weights (computed here, so they
    need no reference solution and also diagnose in self-check mode)."""
    B, T, E = ex.x.shape
    H, hd = ex.n_heads, E // ex.n_heads
    qkv = ex.x @ weights["qkv_proj.weight"].T + weights["qkv_proj.bias"]
    q, k, v = qkv.split(E, dim=-1)
    out_w, out_b = weights["o_proj.weight"], weights["o_proj.bias"]
    keys_blocked = None if ex.padding is None else ex.padding.bool()[:, None, None, :]

    def heads(t):
        return t.reshape(B, T, H, hd).transpose(1, 2)

    def merge(t):
        return t.transpose(1, 2).reshape(B, T, E)

    def project(t):
        return t @ out_w.T + out_b

    def unsplit(t):  # (B, T, E) read as (B, H, T, hd) without moving the head axis
        return t.reshape(B, H, T, hd)

    attended = _attend(heads(q), heads(k), heads(v), keys_blocked)
    unsplit_attended = _attend(unsplit(q), unsplit(k), unsplit(v), keys_blocked)
    variants = {
        "output_projection_missing": [merge(attended)],
        "heads_not_transposed": [project(unsplit_attended.reshape(B, T, E)),  # split and merged by reshape
                                 project(attended.reshape(B, T, E)),  # merged by reshape only
                                 project(merge(unsplit_attended))],  # split by reshape only
    }
    if ex.padding is not None:
        on_queries = _attend(heads(q), heads(k), heads(v), ex.padding.bool()[:, None, :, None])
        variants["mask_on_query_axis"] = [project(merge(on_queries))]
        variants["mask_ignored"] = [project(merge(_attend(heads(q), heads(k), heads(v))))]
        inverted = _attend(heads(q), heads(k), heads(v), ~ex.padding.bool()[:, None, None, :])
        variants["mask_inverted"] = [project(merge(inverted))]
    return variants


def _heads_of(ex, weights):
    """q, k, v (B, H, T, hd) as a right MultiHeadAttention computes them under the reference-layout weights."""
    B, T, E = ex.x.shape
    q, k, v = (ex.x @ weights["qkv_proj.weight"].T + weights["qkv_proj.bias"]).split(E, dim=-1)
    return [t.reshape(B, T, ex.n_heads, E // ex.n_heads).transpose(1, 2).contiguous() for t in (q, k, v)]


def _own_attention(ctx, ex, weights):
    """The student's own scaled_dot_product (graded in part attention) on the q, k, v a right
    MultiHeadAttention gives it: (values, None), or (None, the StudentError) when it raises, or
    (None, None) when it returns nothing usable."""
    q, k, v = _heads_of(ex, weights)
    ctx.student.seed(ctx.seed)
    try:
        result = ctx.student.call(MODULE, "scaled_dot_product", q, k, v, 0.0, ex.padding)
    except StudentError as error:
        return None, error
    values = result[0] if isinstance(result, (tuple, list)) and result else None
    return (values, None) if type(values) is torch.Tensor and values.shape == q.shape else (None, None)


def through_own_attention(ctx, ex, weights):
    """A right MultiHeadAttention's output computed with the student's own scaled_dot_product: what
    the student's module must give, whatever that function gets wrong (charged in part attention
    only). None when it raises or returns nothing usable."""
    values, _ = _own_attention(ctx, ex, weights)
    if values is None:
        return None
    B, T, E = ex.x.shape
    merged = values.transpose(1, 2).reshape(B, T, E)
    return merged @ weights["o_proj.weight"].T + weights["o_proj.bias"]


def mha_call_text(embed_dim, n_heads, x, padding):
    padding = "mask=None" if padding is None else f"a padding mask of shape {tuple(padding.shape)}"
    return f"MultiHeadAttention(embed_dim={embed_dim}, n_heads={n_heads})(x of shape {tuple(x.shape)}, {padding})"


def call_mha(ctx, handle, embed_dim, n_heads, x, padding=None):
    """The student's module on x; an exception says on which input and at which line."""
    try:
        return ctx.student.call(handle, "__call__", x, padding)
    except StudentError as error:
        raise mha_error(error, embed_dim, n_heads, x, padding) from None


def mha_error(error, embed_dim, n_heads, x, padding):
    """A failure naming the mistake when the exception shows one (heads viewed with embed_dim
    features each: view(B, T, n_heads, embed_dim) holds n_heads times too many elements), else the
    student's error, with the call and the line."""
    call = mha_call_text(embed_dim, n_heads, x, padding)
    viewed = re.search(r"shape '\[([-\d, ]+)\]' is invalid for input of size", error.message)
    dims = [int(d) for d in viewed.group(1).split(",")] if viewed else []
    if n_heads > 1 and any(a == n_heads and b == embed_dim for a, b in zip(dims, dims[1:])):
        return CheckFailed(f"{call} raised {error.exc_type}: {error.message}{student_line(error)}. Each of the "
                           f"{n_heads} heads gets head_dim = embed_dim // n_heads = {embed_dim // n_heads} features, "
                           f"not embed_dim = {embed_dim}"[:900], diagnosis="mha_head_dim_wrong")
    return explained(error, call)


def _student_mha(ctx, handle, ex, weights):
    """(the student's module on ex.x, whether it ran around the grader's scaled_dot_product). When
    it raises inside its own scaled_dot_product, which raises the same on the same q, k, v, the
    module's own code is judged around the grader's function instead (which never drops: a rate
    passed in eval mode is mha.eval_deterministic's), so that the function's error is charged in
    part attention only and the module's own mistakes here. Any other error says on which input
    and at which line; a function not written yet (NotImplementedError) is no excuse: the module
    earns nothing until it runs."""
    try:
        return ctx.student.call(handle, "__call__", ex.x, ex.padding), False
    except StudentError as error:
        own_error = None
        if error.exc_type != "NotImplementedError" and "in scaled_dot_product" in (error.traceback or ""):
            _, own_error = _own_attention(ctx, ex, weights)
        if own_error is None or own_error.exc_type != error.exc_type:
            raise mha_error(error, ex.embed_dim, ex.n_heads, ex.x, ex.padding) from None
    try:
        return ctx.student.task("bert.mha_with_exact_attention", handle, ex.x, ex.padding), True
    except StudentError as error:
        raise mha_error(error, ex.embed_dim, ex.n_heads, ex.x, ex.padding) from None


def _mha_matches(ctx, ex):
    """The module (its attn_drop_rate nonzero: eval mode ignores it) against the reference under
    every accepted layout, on the drawn input and then on one of another length: one module
    serves sequences of any length."""
    weights = reference_weights(ex)
    handle = build_student_mha(ctx, ex, drop=ex.rate)
    ctx.student.call(handle, "eval")
    for each in (ex, ex.again) if ex.again is not None else (ex,):
        _mha_matches_on(ctx, each, handle, weights)


def _mha_matches_on(ctx, ex, handle, weights):
    expected = ctx.oracle.call("mha_forward", weights, ex.embed_dim, ex.n_heads, ex.x, ex.padding)
    outputs = []  # one per accepted layout: a mistake shows under the layout the student reads
    for layout in QKV_LAYOUTS:
        _load_weights(ctx, handle, to_layout(weights, ex.n_heads, layout))
        ctx.student.seed(ctx.seed)  # the draws of _own_attention, should its function drop out at rate 0
        got, around = _student_mha(ctx, handle, ex, weights)
        got = expect_tensor(got, "output", shape=ex.x.shape)
        if is_close(got, expected):
            return
        outputs.append(got)
    # Graded on its own code: with the student's scaled_dot_product in place of the reference's,
    # a right module gives this (a module that calls something else is held to the reference).
    own = through_own_attention(ctx, ex, weights)
    if own is not None and any(is_close(got, own.to(got.dtype)) for got in outputs):
        return
    # A student reading its qkv_proj in layout L gets, under the weights loaded in layout L, the
    # q, k, v the variants read from the reference weights.
    variants = _mha_variants(ex, weights)
    diagnosis = next((name for name, outs in variants.items() for out in outs for got in outputs
                      if is_close(got, out, atol=1e-4)), None)
    if diagnosis is None and torch.isnan(got).any():
        diagnosis = "mask_on_query_axis"
    if diagnosis is None and not around and _varies_in_eval(ctx, handle, ex, got):
        diagnosis = "dropout_in_eval"
    what = "multi-head attention outputs (under every accepted qkv layout)"
    expect_close(got, expected, what + (", around the grader's scaled_dot_product (yours raises on these inputs)"
                                        if around else ""), diagnosis=diagnosis, axes=("batch", "position", "feature"),
                 locate=None if around else lambda: _where_mha(ctx, handle, ex, weights))


def _where_mha(ctx, handle, ex, weights):
    """Where the module departs from the reference, its weights in the reference's layout."""
    _load_weights(ctx, handle, to_layout(weights, ex.n_heads, QKV_LAYOUTS[0]))
    return module_divergence(ctx, handle, (f"{MODULE}.MultiHeadAttention", [ex.embed_dim, ex.n_heads, 0.0], {}),
                             weights, [ex.x, ex.padding])


def _varies_in_eval(ctx, handle, ex, got):
    """Whether eval-mode passes with other seeds give another output (on a tiny input one pass of
    dropout can draw the same mask as another)."""
    for salt in range(1, 9):
        ctx.student.seed(ctx.seed + salt)
        if not torch.equal(got, call_mha(ctx, handle, ex.embed_dim, ex.n_heads, ex.x, ex.padding)):
            return True
    return False


def mha_gate(ctx):
    """Multi-head attention does its job (graders/checks/gates.py), on a module and an input of the
    gate's own: in eval mode, repeatable, not constant, and every position reads the others."""
    E, H, B, T = 8, 2, 2, 5
    x, noise = tensors_from(13, (B, T, E), (B, T, E))
    handle = ctx.student.construct(MODULE, "MultiHeadAttention", E, H, 0.0)
    ctx.student.call(handle, "eval")

    def call(inp):
        # reseeded first: dropout left on in eval mode is charged in mha.eval_deterministic, not by the gate
        ctx.student.seed(ctx.seed)
        return expect_tensor(call_mha(ctx, handle, E, H, inp), "output", shape=x.shape)

    def change_at(inp, t):
        changed = inp.clone()
        changed[:, t] = 3 * noise[:, t]
        return changed

    sequence_gate(call, x, change_at, f"outputs of MultiHeadAttention(embed_dim={E}, n_heads={H}) (eval mode, "
                                         f"input of shape {(B, T, E)})")


def count_explained(ctx, state, module, class_name, *args):
    """Where the module's learnable entries differ from the reference's, sub-module by sub-module
    (graders/checks/weights.py `count_difference`), as a clause to append to a failure; the reference's
    shapes are asked for on every draw, so that the golden answers hold them; "" without them."""
    try:
        expected = ctx.oracle.call("state_shapes", module, class_name, *args)
    except OracleUnavailable:
        return ""
    where = count_difference({name: tuple(t.shape) for name, t in state.items()},
                             {name: tuple(shape) for name, shape in expected.items()})
    return f": {where}" if where else ""


@check("mha.parameter_count", "MultiHeadAttention has qkv_proj and o_proj: 4E^2 + 4E parameters")
def mha_parameter_count(ctx):
    @ctx.given(st.integers(1, 4), st.integers(1, 4))
    def prop(n_heads, head_dim):
        E = n_heads * head_dim
        handle = ctx.student.construct(MODULE, "MultiHeadAttention", E, n_heads, 0.1)
        # counted from the tensors its state_dict returns (not the worker's description of it)
        state = learnable(state_tensors(ctx, handle, "MultiHeadAttention"))
        count = numel(state)
        where = count_explained(ctx, state, MODULE, "MultiHeadAttention", E, n_heads, 0.1)
        expected = 4 * E * E + 4 * E
        if count != expected:
            diagnosis = "output_projection_missing" if count == 3 * E * E + 3 * E else "wrong_parameter_count_mha"
            raise CheckFailed(f"embed_dim={E}: {count} parameters in its state_dict, expected {expected}{where}",
                              diagnosis=diagnosis)

    mha_gate(ctx)  # parameters earn points in a module that uses them


@check("mha.matches_reference", "Multi-head attention matches the reference for any valid qkv layout")
def mha_matches_reference(ctx):
    @ctx.given(mha_inputs())
    def prop(ex):
        _mha_matches(ctx, ex)


@check("mha.padding", "Padded keys are ignored and padded rows stay finite")
def mha_padding(ctx):
    @ctx.given(mha_inputs(padded=True))
    def prop(ex):
        _mha_matches(ctx, ex)


@check("mha.output_projection_applied", "The output projection o_proj is applied to the merged heads")
def mha_output_projection_applied(ctx):
    @ctx.given(mha_inputs())
    def prop(ex):
        weights = reference_weights(ex)
        handle = build_student_mha(ctx, ex)
        ctx.student.call(handle, "eval")
        outputs = []
        for scale in (1.0, -2.0):
            _load_weights(ctx, handle, {**weights, "o_proj.weight": weights["o_proj.weight"] * scale})
            ctx.student.seed(ctx.seed)  # the same dropout draws, should the code use any in eval
            outputs.append(expect_tensor(call_mha(ctx, handle, ex.embed_dim, ex.n_heads, ex.x), "output",
                                         shape=ex.x.shape))
        if torch.equal(outputs[0], outputs[1]):
            raise CheckFailed("changing o_proj's weights does not change the output", diagnosis="output_projection_missing")

    mha_gate(ctx)


@check("mha.eval_deterministic", "In eval mode two forward passes agree (no dropout)")
def mha_eval_deterministic(ctx):
    @ctx.given(mha_inputs())
    def prop(ex):
        handle = build_student_mha(ctx, ex, drop=0.5)
        ctx.student.call(handle, "eval")
        first = call_mha(ctx, handle, ex.embed_dim, ex.n_heads, ex.x)
        second = call_mha(ctx, handle, ex.embed_dim, ex.n_heads, ex.x)
        expect_tensor(first, "output", shape=ex.x.shape)
        if not torch.equal(first, second) and not _own_attention_varies(ctx, 0.0):
            raise CheckFailed("two eval-mode forward passes on the same input differ", diagnosis="dropout_in_eval")
        if _varies_around_dropping_attention(ctx, handle, ex.x, training=False):
            raise CheckFailed("around a scaled_dot_product that drops out at the rate it is given, two eval-mode passes "
                              "differ: the module hands it a nonzero rate in eval mode (pass attn_drop_rate in training "
                              "mode only, 0.0 in eval)", diagnosis="dropout_in_eval")

    mha_gate(ctx)


def _varies_around_dropping_attention(ctx, handle, x, *, training):
    """Whether two passes of the module differ with the grader's dropping scaled_dot_product in
    place of the student's: the module's own handling of its rate, whatever the student's function
    does with it. None where the module does not call the function by its name."""
    outputs = ctx.student.task("bert.mha_with_dropping_attention", handle, x, training=training, seed=ctx.seed)
    if not (isinstance(outputs, list) and len(outputs) == 2 and all(type(o) is torch.Tensor for o in outputs)):
        return None
    return not torch.equal(outputs[0], outputs[1])


@check("mha.dropout_in_training", "In training mode attention dropout is applied, at the module's own attn_drop_rate")
def mha_dropout_in_training(ctx):
    (x,) = tensors_from(ctx.seed, (4, 8, 16))
    handle = ctx.student.construct(MODULE, "MultiHeadAttention", 16, 4, 0.9)
    ctx.student.call(handle, "train")
    first = expect_tensor(call_mha(ctx, handle, 16, 4, x), "output", shape=x.shape)
    second = call_mha(ctx, handle, 16, 4, x)
    if torch.equal(first, second) and _own_attention_varies(ctx, 0.9):
        raise CheckFailed("with attn_drop_rate=0.9 two training-mode passes agree: dropout is never applied",
                          diagnosis="dropout_ignored_in_training")
    if _varies_around_dropping_attention(ctx, handle, x, training=True) is False:
        raise CheckFailed("with attn_drop_rate=0.9, around a scaled_dot_product that drops out at the rate it is given, "
                          "two training-mode passes agree: the module never hands it its attn_drop_rate",
                          diagnosis="dropout_ignored_in_training")
    # ... and hands it its own rate: at attn_drop_rate=0 nothing may drop, in training mode too
    # (a rate it hands on in eval mode too is mha.eval_deterministic's to charge)
    still = ctx.student.construct(MODULE, "MultiHeadAttention", 16, 4, 0.0)
    if (_varies_around_dropping_attention(ctx, still, x, training=True)
            and not _varies_around_dropping_attention(ctx, still, x, training=False)):
        raise CheckFailed("MultiHeadAttention(embed_dim=16, n_heads=4, attn_drop_rate=0.0) in training mode, around a "
                          "scaled_dot_product that drops out at the rate it is given, gave two different outputs: the "
                          "module hands it another rate than its own attn_drop_rate (the function's default?)")
    mha_gate(ctx)


def _own_attention_varies(ctx, rate):
    """Whether two calls of the student's scaled_dot_product at attn_drop_rate=`rate` differ: a
    module that hands its rate to one that never drops (or drops at rate 0) is right, and the
    function is charged in part attention."""
    q, k, v = tensors_from(ctx.seed + 1, (4, 4, 8, 4), (4, 4, 8, 4), (4, 4, 8, 4))
    try:
        first, second = (ctx.student.call(MODULE, "scaled_dot_product", q, k, v, rate, None) for _ in range(2))
    except StudentError:
        return rate > 0
    return not (isinstance(first, (tuple, list)) and isinstance(second, (tuple, list)) and len(first) == len(second)
                and all(type(a) is torch.Tensor and type(b) is torch.Tensor and torch.equal(a, b)
                        for a, b in zip(first, second)))
