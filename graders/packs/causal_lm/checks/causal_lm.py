"""Checks for the causal Transformer LM on nn.TransformerEncoder (seeds 000 and 001)."""

import functools
import math
import re
from typing import NamedTuple

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from graders.checks.compare import expect_close, expect_tensor, is_close
from graders.checks.framework import CheckFailed, check, student_line
from graders.checks.gates import expect_changes, expect_repeatable, expect_varies, sequence_gate
from graders.checks.localise import against_reference
from graders.checks.weights import count_difference, learnable, numel, shared_entries, state_shapes, state_tensors
from graders.oracles import OracleUnavailable
from graders.sandbox import StudentError

MODULE = "causal_lm"


# ---------------------------------------------------------------- strategies


class LMConfig(NamedTuple):
    ntoken: int
    d_model: int
    nhead: int
    d_hid: int
    nlayers: int


class CausalInput(NamedTuple):
    config: LMConfig
    ids: torch.Tensor  # (B, T)
    position: int  # the position j the check changes


# Inputs are named tuples: checks unpack them like plain tuples, counterexamples name their fields.


@st.composite
def lm_configs(draw):
    """A small TransformerModel configuration: (ntoken, d_model, nhead, d_hid, nlayers)."""
    # Even d_model of 4 or more: LayerNorm over 1 or 2 features gives only signs, and whatever the
    # positional encoding does with odd sizes is graded in part positional_encoding, not here.
    nhead = draw(st.integers(1, 3))
    d_model = nhead * 2 * draw(st.integers(1, 2))
    if d_model < 4:
        d_model = 4
    return LMConfig(draw(st.integers(2, 30)), d_model, nhead, draw(st.integers(1, 12)), draw(st.integers(1, 3)))


@st.composite
def causal_inputs(draw, *, square=None):
    """(config, ids (B, T), position j to change); with `square`, B == T (True) or B != T (False)."""
    config = draw(lm_configs())
    ntoken = config[0]
    T = draw(st.integers(2, 6))
    if square is True:
        B = T
    elif square is False:
        B = draw(st.integers(1, 5).filter(lambda b: b != T))
    else:
        B = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, ntoken, (B, T), generator=g)
    j = draw(st.integers(1, T - 1))
    return CausalInput(config, ids, j)


def _changed(ids, row, j, ntoken):
    """ids with token (row, j) replaced by another token."""
    other = ids.clone()
    other[row, j] = (ids[row, j] + 1) % ntoken
    return other


# ---------------------------------------------------------------- helpers


def where_model(ctx, handle, config, inputs, dropout=0.1):
    """Where the model departs from the reference model holding its weights, for a failure's message."""
    return against_reference(ctx, handle, (f"{MODULE}.TransformerModel", [*config, dropout], {}), inputs)


def _model(ctx, config):
    ctx.student.seed(ctx.seed)  # the same initial weights whenever this example is replayed
    handle = ctx.student.construct(MODULE, "TransformerModel", *config, 0.1)
    ctx.student.call(handle, "eval")
    return handle


def _causal_mask(T):
    # built from the boolean pattern, not as the solution writes it: this file ships in the bundle
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    return torch.zeros(T, T).masked_fill(above, float("-inf"))


def _mask_function_right(ctx, T):
    """The student's generate_square_subsequent_mask(T) is the causal mask (as causal_lm.square_mask
    judges it: 0 on and below the diagonal, -inf or the dtype's lowest above)."""
    try:
        got = ctx.student.call(MODULE, "generate_square_subsequent_mask", T)
    except StudentError:
        return False
    if type(got) is not torch.Tensor or got.shape != (T, T) or not got.is_floating_point():
        return False
    above = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return bool((got[~above] == 0).all()) and bool((got[above] <= torch.finfo(got.dtype).min / 2).all())


def model_args(ctx, ids):
    """What the model's checks call it with: the ids, and, where the student's own
    generate_square_subsequent_mask is wrong (charged in causal_lm.square_mask), the right causal mask
    as src_mask, so that the model is judged on its own code."""
    T = ids.size(1)
    return (ids,) if _mask_function_right(ctx, T) else (ids, _causal_mask(T))


def _hidden(ctx, handle, ids, config, src_mask=None, explain=None):
    """The model's hidden states on `ids` (with the caller's `src_mask` where one is given), or the
    check fails explaining the exception it raised (`explain`, where given, first: a CheckFailed or
    None)."""
    args = model_args(ctx, ids) if src_mask is None else (ids, src_mask)
    try:
        out = ctx.student.call(handle, "__call__", *args)
    except StudentError as error:
        explained = explain(error) if explain else None
        if explained is not None:
            raise explained from None
        if src_mask is not None:
            raise explain_src_mask_error(ctx, handle, config, ids, src_mask, error) from None
        raise explain_model_error(ctx, handle, config, ids, error) from None
    return expect_tensor(out, "TransformerModel output", shape=(*ids.shape, config[1]))


PROBE_CONFIG = (10, 8, 2, 16, 1)  # a TransformerModel big enough for a clear diagnosis


def _rows_interact(ctx, T=3):
    """Build a model of PROBE_CONFIG, run a square (B == T) batch and change row 0: do other rows'
    outputs move? That is what an encoder that reads batch-first input as sequence-first does."""
    ntoken, d_model = PROBE_CONFIG[0], PROBE_CONFIG[1]
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, ntoken, (T, T), generator=g)
    other = ids.clone()
    other[0] = (ids[0] + 1) % ntoken
    try:
        handle = _model(ctx, PROBE_CONFIG)
        a = ctx.student.call(handle, "__call__", ids)
        b = ctx.student.call(handle, "__call__", other)
    except StudentError:
        return False
    if type(a) is not torch.Tensor or a.shape != (T, T, d_model) or type(b) is not torch.Tensor or b.shape != a.shape:
        return False
    return not torch.allclose(a[1:], b[1:], atol=1e-5)


# ---------------------------------------------------------------- the student's exceptions, explained
#
# A raw "The size of tensor a (3) must match the size of tensor b (5)" says what torch saw, not what
# the student did. An exception whose cause the input shows (a batch size where the sequence length
# belongs, an embedding or a Linear built with its sizes swapped) becomes a failure that says so,
# with the call, its input and the student's line; any other stays the student's error.


def _raised(what, error):
    return f"{what} raised {error.exc_type}: {error.message}"[:300] + student_line(error)


def _sizes_met(message):
    """The two sizes a shape mismatch put against each other, or None."""
    found = (re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", message)
             or re.search(r"attn_mask is torch.Size\(\[(\d+), \d+\]\), but should be \((\d+), \d+\)", message))
    return {int(found.group(1)), int(found.group(2))} if found else None


def _pe_right_on_square(ctx, pos_encoder, d_model, T):
    """The positional encoding adds PE[:T] to a batch of T sequences of length T (eval mode)."""
    x = torch.randn(T, T, d_model, generator=torch.Generator().manual_seed(5))
    try:
        got = ctx.student.call(pos_encoder, "__call__", x)
    except StudentError:
        return False
    return is_close(got, x.double() + _sinusoid(T, d_model), atol=1e-4)


def _sliced_by_batch(ctx, pos_encoder, d_model, B, T, error):
    """Why a positional encoding that raised `error` on x (B, T, d_model) did: it slices its table by
    the batch size (it adds the right table to a square batch); None otherwise."""
    if B != T and _sizes_met(error.message) == {B, T} and _pe_right_on_square(ctx, pos_encoder, d_model, T):
        return (f"On a batch of {T} sequences of length {T} it adds the right table: the table is sliced by x.size(0), "
                f"the batch size {B}; batch-first x (B, T, d_model) takes pe[:, :x.size(1)]")
    return None


def explain_pe_error(ctx, pos_encoder, d_model, x_shape, error, what):
    """A CheckFailed for a positional encoding that raised on x of `x_shape` because it slices its
    table by the batch size; the StudentError otherwise."""
    why = _sliced_by_batch(ctx, pos_encoder, d_model, x_shape[0], x_shape[1], error)
    if why is None:
        return error
    return CheckFailed(f"{_raised(what, error)}. {why}"[:900], diagnosis="pe_sliced_by_batch")


def _runs(ctx, handle, *args):
    try:
        ctx.student.call(handle, "__call__", *args)
        return True
    except StudentError:
        return False


def _positions_widen_dtype(ctx, handle, d_model):
    """The dtype the model's pos_encoder returns for float32 input where it is another ("float64"),
    else None."""
    pos_encoder = _sub_module(ctx, handle, "pos_encoder")
    if pos_encoder is None:
        return None
    try:
        out = ctx.student.call(pos_encoder, "__call__", torch.zeros(1, 2, d_model))
    except StudentError:
        return None
    if type(out) is torch.Tensor and out.is_floating_point() and out.dtype != torch.float32:
        return str(out.dtype).removeprefix("torch.")
    return None


def explain_model_error(ctx, handle, config, ids, error):
    """A CheckFailed that says what TransformerModel did with `ids`, when the exception is a known
    consequence of a known mistake; the StudentError itself otherwise."""
    ntoken, d_model = config[0], config[1]
    B, T = ids.shape
    what = f"TransformerModel{tuple(config)} on ids of shape {(B, T)}"
    raised = _raised(what, error)
    if _rows_interact(ctx):
        return CheckFailed(f"{raised}. On a square batch it runs, and changing one sequence changes the others: the "
                           "encoder reads the batch-first (B, T, d_model) input as sequence-first"[:900],
                           diagnosis="not_batch_first")
    widened = _positions_widen_dtype(ctx, handle, d_model)
    if widened is not None:
        return CheckFailed(f"{raised}. Its positional encoding returns {widened} for float32 input, which the float32 encoder "
                           "layers refuse: the table is not float32"[:900], diagnosis="pe_table_float64")
    if B != T and _sizes_met(error.message) == {B, T}:
        pos_encoder = _sub_module(ctx, handle, "pos_encoder")
        if pos_encoder is not None:
            x = torch.randn(B, T, d_model, generator=torch.Generator().manual_seed(5))
            try:
                positioned = ctx.student.call(pos_encoder, "__call__", x)
            except StudentError as inner:
                why = _sliced_by_batch(ctx, pos_encoder, d_model, B, T, inner)
                if why is not None:
                    return CheckFailed(f"{raised}. Its positional encoding raises on its own on x of shape "
                                       f"{(B, T, d_model)}. {why}"[:900], diagnosis="pe_sliced_by_batch")
            else:
                # a table sliced by the batch size broadcasts over a sequence of one position
                broadcast = T == 1 and type(positioned) is torch.Tensor and tuple(positioned.shape) == (B, B, d_model)
                if broadcast and _pe_right_on_square(ctx, pos_encoder, d_model, T):
                    return CheckFailed(f"{raised}. Its positional encoding returns shape {(B, B, d_model)} for x of shape "
                                       f"{(B, T, d_model)}: pe[:, :x.size(0)] holds the batch size {B} positions, "
                                       "broadcast over the one position of x; batch-first x (B, T, d_model) takes "
                                       "pe[:, :x.size(1)]"[:900], diagnosis="pe_sliced_by_batch")
        if _square_batches_only(ctx, config, ids):
            return CheckFailed(f"{raised}. On a batch of {T} sequences it runs: the causal mask is sized by the batch "
                               "size, src.size(0), not by the sequence length src.size(1)"[:900],
                               diagnosis="causal_mask_wrong_size")
        return CheckFailed(f"{raised}. The batch size {B} met the sequence length {T}: the ids are batch-first (B, T), "
                           "so the sequence runs along axis 1 (src.size(1), x.size(1))"[:900])
    if "index out of range" in error.message or _sizes_met(error.message) == {ntoken, d_model}:
        embedding = _sub_module(ctx, handle, "embedding")
        weights = [] if embedding is None else [t for t in _state_or_empty(ctx, embedding).values() if t.dim() == 2]
        if len(weights) == 1:
            rows, width = weights[0].shape
            return CheckFailed(f"{raised}. Its embedding has {rows} rows of {width} features (a weight of shape "
                               f"{(rows, width)}) for ids up to {int(ids.max())}: nn.Embedding(ntoken, d_model) = nn.Embedding({ntoken}, {d_model}) has "
                               "one row of d_model features per token"[:900],
                               diagnosis="layer_sizes_swapped" if (rows, width) == (d_model, ntoken) else None)
    return error


def explain_src_mask_error(ctx, handle, config, ids, src_mask, error):
    """The same for a model that raised when given a src_mask: where it runs without one, and raises
    with one on a batch of T sequences of length T too (where a sequence-first encoder runs), its
    second argument is not taken as the mask."""
    B, T = ids.shape
    square = torch.randint(0, config[0], (T, T), generator=torch.Generator().manual_seed(7))
    call = f"TransformerModel{tuple(config)}(ids of shape {tuple(ids.shape)}, a ({T}, {T}) src_mask)"
    runs_on_square = _runs(ctx, handle, square, _causal_mask(T))
    if _runs(ctx, handle, ids) and not runs_on_square:
        return CheckFailed(f"{_raised(call, error)}; without the src_mask it runs: the second argument of forward is "
                           "the (T, T) additive mask"[:900], diagnosis="src_mask_not_a_mask")
    wanted = re.search(r"attn_mask is torch.Size\(\[\d+, \d+\]\), but should be \((\d+), \d+\)", error.message)
    if B != T and wanted and int(wanted.group(1)) == B and runs_on_square:
        return CheckFailed(f"{_raised(call, error)}. The encoder asks for a ({B}, {B}) mask, the batch size's, and on a "
                           f"batch of {T} sequences of length {T} the mask works: it reads the batch axis of the "
                           "batch-first input as the sequence"[:900], diagnosis="not_batch_first")
    return explain_model_error(ctx, handle, config, ids, error)


def explain_head_error(ctx, handle, error, hidden, n_out, what):
    """A CheckFailed for a head whose Linear does not take d_model features in (built with its sizes
    swapped: nn.Linear(n_out, d_model)); the StudentError otherwise."""
    d_model = hidden.size(-1)
    found = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", error.message)
    if not found:
        return error
    takes, gives = int(found.group(3)), int(found.group(4))
    swapped = any(tuple(t.shape) == (d_model, n_out) for t in _state_or_empty(ctx, handle).values())
    return CheckFailed(f"{_raised(f'{what} on hidden states of shape {tuple(hidden.shape)}', error)}. Its Linear takes "
                       f"{takes} features in and gives {gives}; the hidden states have d_model = {d_model}: "
                       f"nn.Linear(in_features, out_features) is nn.Linear({d_model}, {n_out}) here"[:900],
                       diagnosis="layer_sizes_swapped" if swapped else None)


def _head_call(ctx, handle, hidden, n_out, what, shape):
    try:
        out = ctx.student.call(handle, "__call__", hidden)
    except StudentError as error:
        raise explain_head_error(ctx, handle, error, hidden, n_out, what) from None
    return expect_tensor(out, f"{what} output", shape=shape)


def _state_or_empty(ctx, handle):
    try:
        return state_tensors(ctx, handle)
    except (StudentError, CheckFailed):
        return {}


def _sub_module(ctx, handle, role):
    try:
        return sub_modules(ctx, handle)[role]
    except (StudentError, CheckFailed):
        return None


def reference_shapes(ctx, class_name, *args):
    """The parameter shapes of the reference's `class_name(*args)`, asked on every draw so that the
    self-check's golden answers hold them; None where the golden answers have no record (a shrunk
    input): a failure then goes without the sub-module explanation."""
    try:
        return ctx.oracle.call("parameter_shapes", class_name, *args)
    except OracleUnavailable:
        return None


def by_sub_module(state, expected_shapes):
    """"; by sub-module: ..." where the counts of the student's `state` and the reference's shapes
    differ (graders/checks/weights.py `count_difference`; names of another layout are listed on
    each side), or "" without the reference's shapes."""
    if expected_shapes is None:
        return ""
    difference = count_difference({name: tuple(t.shape) for name, t in state.items()}, expected_shapes)
    return f"; by sub-module: {difference}" if difference else ""


def _sinusoid(T, E):
    """(T, E) in float64: PE(pos, 2i) = sin(pos / 10000^(2i/E)), PE(pos, 2i+1) = cos(the same)."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    freq = 10000.0 ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)  # (ceil(E/2),)
    table = torch.zeros(T, E, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: E // 2])
    return table


def _positional_tables(ctx, d_model):
    """(rows, d_model) tables a TransformerModel may hold as its positional-encoding buffer: the
    sinusoid, and whatever the student's own PositionalEncoding holds (its values are graded in
    part positional_encoding, not here)."""
    tables = [_sinusoid(5000, d_model).float()]
    try:
        handle = ctx.student.construct(MODULE, "PositionalEncoding", d_model, 0.1)
        state = state_tensors(ctx, handle, "PositionalEncoding")
    except (StudentError, CheckFailed):
        return tables
    tables += [t.reshape(-1, d_model).float() for t in state.values()
               if t.is_floating_point() and t.numel() and t.numel() % d_model == 0]
    return tables


def _is_table(tensor, tables, d_model):
    if not tensor.is_floating_point() or not tensor.numel() or tensor.numel() % d_model:
        return False
    rows = tensor.reshape(-1, d_model).float()
    return any(rows.shape[0] <= table.shape[0] and torch.allclose(rows, table[: rows.shape[0]], atol=1e-5)
               for table in tables)


def _layer_copies(state):
    """How many encoder layers the state holds, each seen by its attention's in-projection."""
    return sum(name.endswith("self_attn.in_proj_weight") for name in state)


def _layer_count(d_model, d_hid):
    return 4 * d_model * d_model + 4 * d_model + 2 * d_model * d_hid + d_hid + d_model + 4 * d_model


def _as_int(value, what):
    if type(value) is torch.Tensor and value.numel() == 1 and not value.is_floating_point():
        value = int(value.item())
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise CheckFailed(f"{what}: expected an int, got {type(value).__name__} {value!r}"[:300], diagnosis="returns_wrong_type")
    return value


GATE_CONFIG = (20, 8, 2, 16, 1)  # the TransformerModel lm_gate probes, on (2, 5) ids


def lm_gate(ctx):
    """TransformerModel does its job (graders/checks/gates.py), on a model and ids of the gate's own:
    in eval mode its hidden states are repeatable, not constant, and the last position reads the first."""
    ntoken = GATE_CONFIG[0]
    ids = torch.randint(0, ntoken, (2, 5), generator=torch.Generator().manual_seed(31))
    handle = _model(ctx, GATE_CONFIG)

    def change_at(x, t):
        changed = x.clone()
        changed[:, t] = (x[:, t] + 1) % ntoken
        return changed

    sequence_gate(lambda x: _hidden(ctx, handle, x, GATE_CONFIG), ids, change_at,
                  f"hidden states of TransformerModel{GATE_CONFIG} (eval mode, ids of shape {tuple(ids.shape)})")


# ---------------------------------------------------------------- the square subsequent mask


def _mask_variants(sz):
    ninf = float("-inf")
    return {
        "square_mask_polarity": torch.tril(torch.full((sz, sz), ninf), diagonal=-1),
        "square_mask_diagonal": torch.triu(torch.full((sz, sz), ninf), diagonal=0),
    }


@check("causal_lm.square_mask", "generate_square_subsequent_mask: float (sz, sz), 0 on and below the diagonal, -inf above")
def square_mask(ctx):
    @ctx.given(st.integers(1, 8))
    def prop(sz):
        got = ctx.student.call(MODULE, "generate_square_subsequent_mask", sz)
        expect_tensor(got, f"generate_square_subsequent_mask({sz})", shape=(sz, sz))
        # the differential: the reference's mask, by value; a finite fill as low as the dtype's
        # minimum works the same in the encoder, so it is accepted for -inf
        expected = ctx.oracle.call(f"{MODULE}.generate_square_subsequent_mask", sz)
        if got.dtype == torch.bool or not got.is_floating_point():
            raise CheckFailed(f"generate_square_subsequent_mask({sz}) has dtype {got.dtype}, expected a float tensor of 0 and -inf",
                              diagnosis="square_mask_boolean", details={"got": str(got.int().tolist())[:400]})
        above = torch.isinf(expected)
        blocked_ok = bool((got[above] <= torch.finfo(got.dtype).min / 2).all()) if above.any() else True
        open_ok = bool((got[~above] == 0).all())
        if blocked_ok and open_ok:
            return
        diagnosis = None
        for name, variant in _mask_variants(sz).items():
            if torch.equal(got.double(), variant.double()):
                diagnosis = name
        finite = got[torch.isfinite(got)]
        if diagnosis is None and finite.numel() == got.numel() and bool(((finite == 0) | (finite == 1)).all()):
            diagnosis = "square_mask_boolean"
        raise CheckFailed(
            f"generate_square_subsequent_mask({sz}) is wrong: expected {expected.tolist()}, got {got.tolist()}"[:600],
            diagnosis=diagnosis,
            details={"expected": str(expected.tolist())[:400], "got": str(got.tolist())[:400]},
        )


# ---------------------------------------------------------------- the model


@check("causal_lm.causal", "TransformerModel is causal: changing a future token leaves earlier outputs unchanged (eval mode)")
def causal(ctx):
    @ctx.given(causal_inputs())
    def prop(ex):
        config, ids, j = ex
        handle = _model(ctx, config)
        hidden = _hidden(ctx, handle, ids, config)
        row = ids.size(0) - 1
        other = _changed(ids, row, j, config[0])
        changed = _hidden(ctx, handle, other, config)
        close = torch.isclose(hidden[row, :j], changed[row, :j], atol=1e-5, equal_nan=True).all(-1)  # (j,)
        if not bool(close.all()):
            moved = (hidden[row, :j] - changed[row, :j]).abs().amax(-1)
            first = int((~close).nonzero()[0])
            diagnosis = "not_batch_first" if _rows_interact(ctx) else "not_causal"
            raise CheckFailed(
                f"changing the token at position {j} of row {row} changed the output at earlier position {first} "
                f"(by up to {moved.max().item():.3g})",
                diagnosis=diagnosis,
            )

    lm_gate(ctx)


@check("causal_lm.rows_independent", "TransformerModel keeps batch rows apart: changing one sequence leaves the others unchanged")
def rows_independent(ctx):
    @ctx.given(causal_inputs(square=True))
    def prop(ex):
        config, ids, _ = ex
        handle = _model(ctx, config)
        hidden = _hidden(ctx, handle, ids, config)
        other = ids.clone()
        other[0] = (ids[0] + 1) % config[0]
        changed = _hidden(ctx, handle, other, config)
        if not torch.allclose(hidden[1:], changed[1:], atol=1e-5, equal_nan=True):
            raise CheckFailed(
                f"with a batch of {ids.size(0)} sequences of length {ids.size(1)}, changing sequence 0 changed the outputs "
                "of other sequences: attention runs across the batch",
                diagnosis="not_batch_first",
            )

    lm_gate(ctx)


@check("causal_lm.batch_first_shape", "TransformerModel maps (B, T) ids to (B, T, d_model) when B != T")
def batch_first_shape(ctx):
    @ctx.given(causal_inputs(square=False))
    def prop(ex):
        config, ids, _ = ex
        handle = _model(ctx, config)
        try:
            out = ctx.student.call(handle, "__call__", *model_args(ctx, ids))
        except StudentError as error:
            raise explain_model_error(ctx, handle, config, ids, error) from None
        B, T = ids.shape
        if type(out) is torch.Tensor and out.shape == (T, B, config[1]):
            raise CheckFailed(f"output of shape {tuple(out.shape)} for ids {tuple(ids.shape)}: expected (B, T, d_model) = "
                              f"{(B, T, config[1])}", diagnosis="not_batch_first")
        expect_tensor(out, "TransformerModel output", shape=(B, T, config[1]))

    lm_gate(ctx)


class TableInput(NamedTuple):
    d_model: int
    dropout: float
    max_len: int | None  # None: the default, 5000
    mode: str  # "eval", or "train" (at dropout 0: no value dropped)
    xs: tuple  # inputs (B, T, d_model) of two shapes, both given to one instance


@st.composite
def table_inputs(draw):
    """A PositionalEncoding over the space its docstring allows (every embed_dim from 1 to 16, odd
    ones included; dropout 0 or another rate than the default; max_len left at its default, a few
    positions above the longest sequence or exactly the longest) and two inputs of other shapes,
    float32 or float64, long enough for the slow dimensions to move."""
    kind = draw(st.sampled_from(("default", "above", "exact")))
    d_model = draw(st.integers(1, 16))
    mode = draw(st.sampled_from(("eval", "train")))
    dropout = 0.0 if mode == "train" else draw(st.sampled_from((0.1, 0.0, 0.3, 0.7)))
    lengths = draw(st.lists(st.integers(1, 40), min_size=2, max_size=2, unique=True))
    max_len = {"default": None, "above": max(lengths) + draw(st.integers(1, 3)), "exact": max(lengths)}[kind]
    dtype = draw(st.sampled_from((torch.float32, torch.float64)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    xs = tuple(torch.randn(draw(st.integers(1, 3)), T, d_model, generator=g, dtype=dtype) for T in lengths)
    return TableInput(d_model, dropout, max_len, mode, xs)


def long_table_input():
    """A max_len above the default 5000 and a sequence that long (a table of 5000 positions whatever
    max_len says shows only there), then a short one on the same instance; d_model 4, where a float32
    table is within 3e-6 of the formula at every position."""
    g = torch.Generator().manual_seed(5003)
    return TableInput(4, 0.1, 5003, "eval", (torch.randn(1, 5003, 4, generator=g), torch.randn(2, 7, 4, generator=g)))


def _table_variants(T, E):
    """(diagnosis, (T, E) table) of known mistakes in the positional table."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, E, 2, dtype=torch.float64)

    def table(freq, swap=False):
        out = torch.zeros(T, E, dtype=torch.float64)
        first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
        out[:, 0::2] = first(pos * freq)
        out[:, 1::2] = second(pos * freq[: E // 2])
        return out

    return [
        ("pe_log_base", table(torch.exp(two_i * (-math.log10(10000.0) / E)))),  # log10 for the natural log
        ("pe_wrong_exponent", table(10000.0 ** (-torch.arange(E // 2 + E % 2, dtype=torch.float64) / E))),  # i for 2i
        ("pe_wrong_exponent", table(10000.0 ** (two_i / E))),  # the exponent's sign
        ("pe_sin_cos_swapped", table(10000.0 ** (-two_i / E), swap=True)),
    ]


def _table_mistake(x, got):
    """The known mistake whose table the positional encoding added to x, or None."""
    if got.shape != x.shape:
        return None
    B, T, E = x.shape
    added = got.double() - x.double()
    variants = _table_variants(T, E)
    if B == 1:  # the table sliced by x.size(0): one row, position 0's, added at every position
        variants.append(("pe_sliced_by_batch", _sinusoid(1, E).expand(T, E)))
    return next((name for name, table in variants if is_close(added, table.expand_as(added), atol=1e-4)), None)


def _pe_args(ex):
    return (ex.d_model, ex.dropout) if ex.max_len is None else (ex.d_model, ex.dropout, ex.max_len)


def _pe_name(ex):
    return f"PositionalEncoding{_pe_args(ex)}"


def _odd_size_failure(ctx, ex, error):
    """The student's PositionalEncoding raised on an odd embed_dim: where embed_dim + 1 runs (at
    least 8, on 16 positions, where the known mistakes show), fail naming the mistake its values
    show there, or pe_odd_embed_dim when they are right; the StudentError otherwise."""
    E, T = max(ex.d_model + 1, 8), 16
    x = torch.randn(1, T, E, generator=torch.Generator().manual_seed(E))
    try:
        handle = ctx.student.construct(MODULE, "PositionalEncoding", E, 0.0)
        ctx.student.call(handle, "eval")
        got = ctx.student.call(handle, "__call__", x)
    except StudentError:
        return error
    raised = _raised(_pe_name(ex), error)
    expected = x.double() + _sinusoid(T, E)
    if type(got) is torch.Tensor and not is_close(got, expected, atol=1e-4):
        try:
            expect_close(got, expected, f"{raised}; with embed_dim={E} it runs, but on x of shape {tuple(x.shape)} x + PE"
                         [:900], atol=1e-4, diagnosis=_table_mistake(x, got), axes=("batch", "position", "feature"))
        except CheckFailed as failure:
            return failure
    return CheckFailed(f"{raised}; with embed_dim={E} it works: the docstring allows an odd embed_dim, whose last "
                       "dimension holds a sin without its cos"[:900], diagnosis="pe_odd_embed_dim")


def _long_sequence_failure(ctx, ex, handle, x, error):
    """The student's PositionalEncoding(max_len > 5000) raised on a sequence of max_len positions:
    where it runs on 5000 of them, its table holds 5000 positions whatever max_len says."""
    try:
        ctx.student.call(handle, "__call__", x[:, :5000])
    except StudentError:
        return None
    return CheckFailed(f"{_raised(_pe_name(ex) + f' on x of shape {tuple(x.shape)}', error)}; on the first "
                       f"5000 positions it runs: the table must hold max_len = {ex.max_len} positions"[:900],
                       diagnosis="pe_max_len_ignored")


@check("causal_lm.positional_table", "PositionalEncoding adds PE(pos, 2i) = sin(pos / 10000^(2i/d)), "
                                     "PE(pos, 2i+1) = cos(the same) to position pos, for every size, max_len and dtype")
def positional_table(ctx):
    # The differential of PositionalEncoding: compared with the docstring's formula itself (the
    # reference's table), since the model's checks run the student's own pos_encoder. The
    # tolerance: a float32 table built as exp(2i * -log(10000) / d) (the tutorial's) or as
    # 1 / 10000 ** (2i / d) is within 1.3e-6 of the float64 formula up to position 43 (every
    # d_model up to 16) and within 2.9e-6 up to position 5003 at d_model 4, and adding it to x
    # rounds by about 5e-7: atol 1e-4 is some 30 times that; the frequency mistakes below are 600
    # times it and more. Training mode is drawn at dropout 0 only (the rates' effect is
    # causal_lm.dropout's).
    expect_table(ctx, long_table_input())

    @ctx.given(table_inputs())
    def prop(ex):
        expect_table(ctx, ex)


def _right_in_eval(ctx, handle, x, expected):
    """The positional encoding gives x + PE on `x` in eval mode (it is left in training mode)."""
    ctx.student.call(handle, "eval")
    try:
        return is_close(ctx.student.call(handle, "__call__", x), expected, atol=1e-4)
    except StudentError:
        return False
    finally:
        ctx.student.call(handle, "train")


def expect_table(ctx, ex):
    """One PositionalEncoding of the example gives x + PE on each of its inputs, in x's dtype."""
    try:
        handle = ctx.student.construct(MODULE, "PositionalEncoding", *_pe_args(ex))
    except StudentError as error:
        raise (_odd_size_failure(ctx, ex, error) if ex.d_model % 2 else error) from None
    ctx.student.call(handle, "train" if ex.mode == "train" else "eval")
    for x in ex.xs:
        B, T, E = x.shape
        what = f"{_pe_name(ex)} ({ex.mode} mode) on x of shape {(B, T, E)}, {str(x.dtype)[6:]}"
        try:
            got = ctx.student.call(handle, "__call__", x)
        except StudentError as error:
            explained = _long_sequence_failure(ctx, ex, handle, x, error) if T > 5000 else None
            if explained is None and E % 2:
                explained = _odd_size_failure(ctx, ex, error)
            raise (explained or explain_pe_error(ctx, handle, E, x.shape, error, what)) from None
        got = expect_tensor(got, f"{what}: output", shape=(B, T, E))
        expected = x.double() + _sinusoid(T, E)
        if got.dtype != x.dtype:
            table_float64 = got.dtype == torch.float64 and is_close(got, expected, atol=1e-4)
            raise CheckFailed(f"{what}: the output is {str(got.dtype)[6:]}; the docstring: 'the output has x's dtype'"
                              + (" (its values are right: the table is float64)" if table_float64 else ""),
                              diagnosis="pe_table_float64" if table_float64 else None)
        if is_close(got, expected, atol=1e-4):
            continue
        if ex.mode == "train" and _right_in_eval(ctx, handle, x, expected):
            continue  # it drops at rate 0: how it handles its rate is causal_lm.dropout's to judge
        expect_close(got, expected, f"{what}: x + PE[:T]", atol=1e-4, diagnosis=_table_mistake(x, got),
                     axes=("batch", "position", "feature"))


# ---------------------------------------------------------------- dropout (training mode)
#
# Judged at rates 0 and 1, where training mode is deterministic: at 1 a dropout drops everything it
# is applied to, at 0 nothing. PositionalEncoding drops after adding the table, at its own rate (a
# rate between, 0.3, judged by the values it keeps and the share it zeroes); TransformerModel hands
# its rate to its positional encoding and its encoder layers (the docstring's dropout).

PE_RATE = 0.3  # neither PositionalEncoding's default 0.1 nor TransformerModel's 0.5


def _in_modes(ctx, module, *args, **kwargs):
    """(training mode under one worker seed, under another, eval mode): the module's outputs on `args`."""
    outputs = []
    for mode, seed in (("train", 1), ("train", 2), ("eval", 1)):
        ctx.student.call(module, mode)
        ctx.student.seed(seed)
        outputs.append(expect_tensor(ctx.student.call(module, "__call__", *args, **kwargs), "output", shape=args[0].shape))
    return outputs


def _pe_drops_after_add(ctx, d_model, x):
    """PositionalEncoding(d_model, dropout=1.0) in training mode outputs zeros: its dropout comes after
    the table is added. Named by what it outputs: x + PE (it never drops) or PE alone (x dropped first)."""
    handle = ctx.student.construct(MODULE, "PositionalEncoding", d_model, 1.0)
    got, _, in_eval = _in_modes(ctx, handle, x)
    if is_close(got, torch.zeros_like(x), atol=1e-6):
        return
    as_in_eval = is_close(got, in_eval, atol=1e-5)
    keep_rate = as_in_eval and _drops_everything_at_zero(ctx, d_model, x)
    diagnosis = ("pe_dropout_keep_rate" if keep_rate else "pe_dropout_missing" if as_in_eval else
                 "pe_dropout_before_add" if is_close(got, in_eval.double() - x.double(), atol=1e-5) else None)
    seen = {"pe_dropout_missing": ": x + PE, as in eval mode (no dropout applied)",
            "pe_dropout_keep_rate": ": x + PE, as in eval mode, and with dropout=0.0 it drops everything (the rate is "
                                    "taken for the probability of keeping)",
            "pe_dropout_before_add": ": the table alone (x dropped before the table is added)"}.get(diagnosis, "")
    raise CheckFailed(f"PositionalEncoding({d_model}, dropout=1.0) in training mode on x of shape {tuple(x.shape)} must "
                      f"drop everything (the dropout comes after the add), got values up to {got.abs().max().item():.3g}"
                      + seen, diagnosis=diagnosis)


def _drops_everything_at_zero(ctx, d_model, x):
    """PositionalEncoding(d_model, 0.0) in training mode zeroes everything: its dropout is applied at
    1 - dropout (the rate taken for the probability of keeping), not missing."""
    handle = ctx.student.construct(MODULE, "PositionalEncoding", d_model, 0.0)
    got, _, _ = _in_modes(ctx, handle, x)
    return is_close(got, torch.zeros_like(x), atol=1e-6)


def _pe_drops_at_rate(ctx, d_model, seed):
    """PositionalEncoding(d_model, PE_RATE) in training mode keeps each value of its eval-mode output
    (x + its own table: the table is causal_lm.positional_table's) scaled by 1 / (1 - rate)
    (inverted dropout, as nn.Dropout) and zeroes the others, a share within 6 sigma of the rate (a
    right dropout fails it with a probability of about 2e-9)."""
    T = 24  # a square input (B == T), as the other dropout tests': the batch axis is charged elsewhere
    x = torch.randn(T, T, d_model, generator=torch.Generator().manual_seed(seed))
    handle = ctx.student.construct(MODULE, "PositionalEncoding", d_model, PE_RATE)
    ctx.student.call(handle, "train")
    ctx.student.seed(ctx.seed)
    what = f"PositionalEncoding({d_model}, dropout={PE_RATE}) in training mode on x of shape {tuple(x.shape)}"
    got = expect_tensor(ctx.student.call(handle, "__call__", x), f"{what}: output", shape=x.shape)
    kept = got != 0
    share = 1 - kept.double().mean().item()
    sigma = math.sqrt(PE_RATE * (1 - PE_RATE) / got.numel())
    low, high = PE_RATE - 6 * sigma, PE_RATE + 6 * sigma
    if not low <= share <= high:
        raise CheckFailed(f"{what}: {share:.3f} of the outputs are zero, expected within [{low:.3f}, {high:.3f}] of the "
                          "rate it was given", details={"proportions": [{"name": "share of values zeroed", "value": share,
                                                                         "target": PE_RATE, "low": low, "high": high}]})
    ctx.student.call(handle, "eval")
    in_eval = expect_tensor(ctx.student.call(handle, "__call__", x), f"{what}: eval-mode output", shape=x.shape)
    expected = in_eval.double() / (1 - PE_RATE)
    expect_close(got[kept], expected[kept], f"{what}: the values it keeps, its eval-mode output / (1 - dropout)",
                 atol=1e-4)


@check("causal_lm.dropout", "PositionalEncoding drops after the add, and TransformerModel's dropout is the rate of its "
                            "positional encoding and of its encoder layers (training mode)")
def dropout(ctx):
    @ctx.given(lm_configs(), st.integers(0, 2**16))
    def prop(config, seed):
        d_model = config[1]
        # a square input (B == T): read batch-first or not, it runs (the layout is charged elsewhere)
        x = torch.randn(5, 5, d_model, generator=torch.Generator().manual_seed(seed))
        _pe_drops_after_add(ctx, d_model, x)
        _pe_drops_at_rate(ctx, d_model, seed)
        causal_mask = torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
        for rate in (0.0, 1.0):
            ctx.student.seed(ctx.seed)
            model = ctx.student.construct(MODULE, "TransformerModel", *config, rate)
            mods = sub_modules(ctx, model)
            for role, kwargs in (("pos_encoder", {}), ("transformer_encoder", {"mask": causal_mask})):
                first, second, in_eval = _in_modes(ctx, mods[role], x, **kwargs)
                repeatable = is_close(first, second, atol=1e-5)
                if rate == 0.0 and repeatable and is_close(first, in_eval, atol=1e-4):
                    continue
                if rate == 1.0 and repeatable and not is_close(first, in_eval, atol=1e-4):
                    continue
                seen = ("differs between two passes" if not repeatable else
                        "equals its eval-mode output" if rate == 1.0 else "differs from its eval-mode output")
                raise CheckFailed(f"TransformerModel{config} built with dropout={rate}: in training mode its {role} "
                                  f"({_class_name(mods[role])}) {seen}, so it drops at another rate than the model's "
                                  f"dropout", diagnosis="lm_dropout_not_passed")

    lm_gate(ctx)


# The roles the model's checks run on their own, the template's attribute name and the class that fills
# each. The names are the template's, not the contract's: a model that names them otherwise (the
# PyTorch word-language-model example calls its embedding `encoder`) is found by class.
SUB_MODULES = {"embedding": ("embedding", "Embedding"), "pos_encoder": ("pos_encoder", "PositionalEncoding"),
               "transformer_encoder": ("transformer_encoder", "TransformerEncoder")}


def _class_name(handle):
    """The class of an object of the student's ("torch.nn.modules.sparse.Embedding" -> "Embedding")."""
    return str(getattr(handle, "type_name", "")).rsplit(".", 1)[-1]


def sub_modules(ctx, handle):
    """{role: the model's sub-module in that role}: the attribute the template names, or else the
    one child module of the role's class (found among the model's direct children)."""
    try:
        children = ctx.student.getattr(handle, "_modules")
    except StudentError:
        children = None
    if not isinstance(children, dict):
        children = {}
    found = {}
    for role, (name, cls) in SUB_MODULES.items():
        of_class = [child for child in children.values() if _class_name(child) == cls]
        if name in children and (_class_name(children[name]) == cls or not of_class):
            found[role] = children[name]  # the template's name (a class of the student's own under it too)
        elif len(of_class) == 1:
            found[role] = of_class[0]
    missing = [role for role in SUB_MODULES if role not in found]
    if missing:
        listed = ", ".join(f"{name} ({_class_name(child)})" for name, child in children.items()) or "none"
        wanted = "; ".join(f"{'an' if SUB_MODULES[role][1][0] in 'AEIOU' else 'a'} {SUB_MODULES[role][1]} (the "
                           f"template's self.{SUB_MODULES[role][0]})" for role in missing)
        raise CheckFailed(f"TransformerModel's forward is run here sub-module by sub-module, and one is missing: {wanted}. "
                          f"Its sub-modules are: {listed}"[:600])
    return found


def forward_variants(ctx, handle, ids, d_model, ntoken, src_mask=None):
    """(the right hidden states, [(diagnosis, hidden states)] of known mistakes), from the model's own
    sub-modules, with the caller's `src_mask` or else the causal one."""
    mods = sub_modules(ctx, handle)

    def run(name, *args, **kwargs):
        out = ctx.student.call(mods[name], "__call__", *args, **kwargs)
        return expect_tensor(out, f"{name} output")

    T = ids.size(1)
    causal_mask = _causal_mask(T)
    mask = causal_mask if src_mask is None else src_mask

    def encode(x):
        return run("transformer_encoder", x, mask=mask)

    embedded = run("embedding", ids)
    scaled = embedded * math.sqrt(d_model)
    right = encode(run("pos_encoder", scaled))
    mistakes = [
        ("lm_embedding_not_scaled", encode(run("pos_encoder", embedded))),
        ("lm_embedding_wrong_scale", encode(run("pos_encoder", embedded * d_model))),
        ("lm_embedding_wrong_scale", encode(run("pos_encoder", embedded * math.sqrt(ntoken)))),
        ("lm_no_positional_encoding", encode(scaled)),
        ("not_causal", run("transformer_encoder", run("pos_encoder", scaled))) if src_mask is None else
        ("src_mask_ignored", run("transformer_encoder", run("pos_encoder", scaled), mask=causal_mask)),
    ]
    return right, mistakes


# ---------------------------------------------------------------- the model against the reference
#
# The differential of TransformerModel: its hidden states compared by value with the reference's
# holding the same weights (the grader's, loaded by torch's names into the model's embedding and
# encoder), over the space its docstring allows: 1 to 3 layers, 1 to 3 heads, odd d_model, every
# kind of src_mask, batches and sequences of one, one instance called on two shapes, eval mode at
# any rate and training mode at rate 0. What another clause owns is judged around it: the mask
# function's mistakes (the right causal mask is passed, `model_args`), the positional encoding's
# (the reference's encoder run on what the student's own pos_encoder gives), dropout at a rate
# other than the model's (training mode is judged only where two passes agree).

MASK_KINDS = ("none", "causal", "open", "blocking")


class ModelInput(NamedTuple):
    config: LMConfig
    dropout: float
    mode: str  # "eval", or "train" (at dropout 0, where training mode is deterministic)
    calls: tuple  # ((ids (B, T), src_mask (T, T) or None), ...): one instance, two shapes
    weights_seed: int


def _src_mask(kind, T, seed):
    """A (T, T) mask of the kind the docstring allows, or None (the model's own causal mask)."""
    if kind == "none":
        return None
    if kind == "causal":
        return _causal_mask(T)
    if kind == "open":
        return torch.zeros(T, T)
    # another pattern of 0 and -inf than the causal one; every position sees itself
    blocked = torch.rand(T, T, generator=torch.Generator().manual_seed(seed)) < 0.4
    blocked.fill_diagonal_(False)
    return torch.zeros(T, T).masked_fill(blocked, float("-inf"))


@st.composite
def model_inputs(draw):
    """A TransformerModel (d_model from 4 to 12, odd sizes 5 and 9 too: any size nhead divides; below
    4 the layers' LayerNorms leave too few features for a wrong scale to show) and two calls of
    different shapes on it."""
    nhead = draw(st.integers(1, 3))
    d_model = nhead * draw(st.integers(-(-4 // nhead), 5 if nhead == 1 else 4))
    config = LMConfig(draw(st.integers(2, 30)), d_model, nhead, draw(st.integers(1, 12)), draw(st.integers(1, 3)))
    mode = draw(st.sampled_from(("eval", "train")))
    dropout = 0.0 if mode == "train" else draw(st.sampled_from((0.5, 0.0, 0.1, 0.3)))
    shapes = draw(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 6)), min_size=2, max_size=2, unique=True))
    kinds = [draw(st.sampled_from(MASK_KINDS)) for _ in shapes]
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    calls = tuple((torch.randint(0, config.ntoken, (B, T), generator=g), _src_mask(kind, T, seed + i))
                  for i, ((B, T), kind) in enumerate(zip(shapes, kinds)))
    return ModelInput(config, dropout, mode, calls, seed)


def encoder_layout(d_model, d_hid, nlayers):
    """{name: shape} of nn.TransformerEncoder's parameters for nlayers
    nn.TransformerEncoderLayer(d_model, nhead, d_hid) (torch's names; nhead changes no shape)."""
    layer = {"self_attn.in_proj_weight": (3 * d_model, d_model), "self_attn.in_proj_bias": (3 * d_model,),
             "self_attn.out_proj.weight": (d_model, d_model), "self_attn.out_proj.bias": (d_model,),
             "linear1.weight": (d_hid, d_model), "linear1.bias": (d_hid,),
             "linear2.weight": (d_model, d_hid), "linear2.bias": (d_model,),
             "norm1.weight": (d_model,), "norm1.bias": (d_model,), "norm2.weight": (d_model,), "norm2.bias": (d_model,)}
    return {f"layers.{i}.{name}": shape for i in range(nlayers) for name, shape in layer.items()}


def grader_weights(shapes, seed):
    """Values of the grader's for every entry: matrices scaled by their fan-in, norms' gains away from
    1 and every bias away from 0 (so that a norm or a bias in the wrong place shows)."""
    g = torch.Generator().manual_seed(seed)
    values = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=g)
        owner = name.split(".")[-2] if "." in name else ""
        if owner.startswith("norm") and name.endswith(".weight"):
            values[name] = 1 + 0.3 * noise
        else:
            values[name] = noise / math.sqrt(shape[1]) if len(shape) == 2 else 0.3 * noise
    return values


def load_grader_weights(ctx, handle, config, seed):
    """The grader's weights loaded into the model's embedding and encoder (torch's names within each),
    then read back: the state the model holds, in the reference's names. None where those sub-modules
    do not hold the docstring's parameters (another depth, a final norm, a class of the student's
    own: counted in causal_lm.model_parameters); the model is then judged on its own sub-modules."""
    ntoken, d_model, _, d_hid, nlayers = config
    mods = sub_modules(ctx, handle)
    layouts = {"embedding": {"weight": (ntoken, d_model)}, "transformer_encoder": encoder_layout(d_model, d_hid, nlayers)}
    held = {}
    for offset, (role, layout) in enumerate(layouts.items()):
        if state_shapes(ctx, mods[role], role) != layout:
            return None
        ctx.student.load_state_dict(mods[role], grader_weights(layout, seed + offset))
        back = state_tensors(ctx, mods[role], role)
        held.update({f"{role}.{name}": back[name] for name in layout})
    return held


def _repeatable_in_training(ctx, handle, ids, config, src_mask, got):
    """Two training-mode passes under other worker seeds give `got` again: at dropout 0 a model that
    drops differs (the rate is causal_lm.dropout's to judge)."""
    for seed in (1, 2):
        ctx.student.seed(seed)
        if not is_close(_hidden(ctx, handle, ids, config, src_mask), got, atol=1e-6):
            return False
    return True


def _around_own_positions(ctx, handle, ex, state, ids, src_mask):
    """Where the model's own pos_encoder does not add the docstring's table to the scaled embedding
    (causal_lm.positional_table's to judge): the hidden states the reference's encoder gives on what
    it returns (a self-check, without the reference, runs the model's own encoder on it). None where
    the positional encoding is right or cannot be run on its own."""
    mods = sub_modules(ctx, handle)
    d_model = ex.config.d_model
    x = F.embedding(ids, state["embedding.weight"]) * math.sqrt(d_model)
    try:
        positioned = ctx.student.call(mods["pos_encoder"], "__call__", x)
    except StudentError:
        return None
    if type(positioned) is not torch.Tensor or positioned.shape != x.shape or positioned.dtype != x.dtype:
        return None
    if is_close(positioned, x.double() + _sinusoid(ids.size(1), d_model), atol=1e-4):
        return None
    try:
        return ctx.oracle.call("lm_encoder_on", state, list(ex.config), ex.dropout, positioned, src_mask,
                               ex.mode == "train")
    except OracleUnavailable:
        mask = _causal_mask(ids.size(1)) if src_mask is None else src_mask
        return expect_tensor(ctx.student.call(mods["transformer_encoder"], "__call__", positioned, mask=mask),
                             "transformer_encoder output")


def _layer_variants(config):
    """[(diagnosis, how the reference's layers are built otherwise)] of known mistakes in the layers."""
    ntoken, d_model, nhead, d_hid, nlayers = config
    variants = [("lm_layers_wrong_nhead", {"nhead": h}) for h in range(1, d_model + 1) if d_model % h == 0 and h != nhead]
    variants += [("lm_layers_norm_first", {"norm_first": True}), ("lm_layers_gelu", {"activation": "gelu"})]
    if nlayers > 1:
        variants += [("lm_layers_not_all_run", {"run": [0] * nlayers})]
        variants += [("lm_layers_not_all_run", {"run": list(range(k))}) for k in range(1, nlayers)]
    return variants


def _model_mistake(ctx, handle, ex, state, ids, src_mask, got):
    """The known mistake whose hidden states `got` equals, or None: from the model's own sub-modules
    (its wiring), or from the reference with its layers built otherwise (a self-check has only the
    right answers: there a layer mistake goes unnamed, never unseen)."""
    config = ex.config
    own, mistakes = forward_variants(ctx, handle, ids, config.d_model, config.ntoken, src_mask)
    # a mistake is named where its output is seen, and the right wiring gives another one there
    named = next((name for name, out in mistakes if is_close(got, out, atol=1e-4) and not is_close(out, own, atol=1e-4)),
                 None)
    if named or state is None:
        return named
    if is_close(got, own, atol=1e-4) and _rows_interact(ctx):  # wired right, around layers that mix the batch
        return "not_batch_first"
    for diagnosis, layers in _layer_variants(config):
        try:
            variant = ctx.oracle.call("lm_hidden", state, list(config), ex.dropout, ids, src_mask, ex.mode == "train",
                                      layers)
        except OracleUnavailable:
            return None
        if is_close(got, variant, atol=1e-4):
            return diagnosis
    return None


def _kept_from_first_call(ctx, ex, ids, src_mask, error):
    """Why a model raised `error` on its second call (another shape) where a new model of the same
    configuration runs the same input: it keeps something of its first call; None otherwise."""
    fresh = _built_model(ctx, ex)
    if not _runs(ctx, fresh, *(model_args(ctx, ids) if src_mask is None else (ids, src_mask))):
        return None
    first_ids = ex.calls[0][0]
    call = (f"TransformerModel{tuple(ex.config)} called on ids of shape {tuple(first_ids.shape)}, then on ids of shape "
            f"{tuple(ids.shape)}")
    return CheckFailed(f"{_raised(call, error)}; a new model runs the second input: the model keeps something of its "
                       "first call (a causal mask of its length?)"[:900], diagnosis="lm_instance_keeps_state")


def _built_model(ctx, ex):
    """The student's TransformerModel of the example, in its mode; None where it raises on an odd
    d_model because its PositionalEncoding does on its own (charged in causal_lm.positional_table)."""
    ctx.student.seed(ctx.seed)
    try:
        handle = ctx.student.construct(MODULE, "TransformerModel", *ex.config, ex.dropout)
    except StudentError:
        if ex.config.d_model % 2 and not _constructs(ctx, "PositionalEncoding", ex.config.d_model, ex.dropout):
            return None
        raise
    ctx.student.call(handle, "train" if ex.mode == "train" else "eval")
    return handle


def _constructs(ctx, class_name, *args):
    try:
        ctx.student.construct(MODULE, class_name, *args)
        return True
    except StudentError:
        return False


def _described_mask(src_mask):
    if src_mask is None:
        return "no src_mask (the causal one)"
    T = src_mask.size(0)
    if torch.equal(src_mask, _causal_mask(T)):
        return f"the causal ({T}, {T}) src_mask"
    return f"a ({T}, {T}) src_mask of the caller's ({src_mask.tolist()})"[:300]


@check("causal_lm.model_matches_reference", "TransformerModel's hidden states are the reference's under the same weights: "
                                            "any depth, heads, src_mask and shape, one instance, eval and training mode")
def model_matches_reference(ctx):
    @ctx.given(model_inputs())
    def prop(ex):
        handle = _built_model(ctx, ex)
        if handle is None:
            return
        state = load_grader_weights(ctx, handle, ex.config, ex.weights_seed)
        train = ex.mode == "train"
        for index, (ids, src_mask) in enumerate(ex.calls):
            kept = functools.partial(_kept_from_first_call, ctx, ex, ids, src_mask) if index else None
            got = _hidden(ctx, handle, ids, ex.config, src_mask, explain=kept)
            if train and not _repeatable_in_training(ctx, handle, ids, ex.config, src_mask, got):
                return
            if state is None:  # not the docstring's sub-modules: judged on its own ones
                expected = forward_variants(ctx, handle, ids, ex.config.d_model, ex.config.ntoken, src_mask)[0]
                against = "its own embedding, pos_encoder and transformer_encoder"
            else:
                expected = ctx.oracle.call("lm_hidden", state, list(ex.config), ex.dropout, ids, src_mask, train)
                against = "the reference holding the same weights"
            if is_close(got, expected, atol=1e-4):
                continue
            around = _around_own_positions(ctx, handle, ex, state, ids, src_mask) if state is not None else None
            if around is not None and is_close(got, around, atol=1e-4):
                continue
            if around is not None:
                against = "the reference's encoder layers holding the same weights, run on what your own pos_encoder gives"
            what = (f"hidden states of TransformerModel{tuple(ex.config)} with dropout={ex.dropout} ({ex.mode} mode) on ids "
                    f"of shape {tuple(ids.shape)} with {_described_mask(src_mask)}, against {against}")
            inputs = [ids] if src_mask is None else [ids, src_mask]
            expect_close(got, expected if around is None else around, what, atol=1e-4,
                         diagnosis=_model_mistake(ctx, handle, ex, state, ids, src_mask, got),
                         axes=("batch", "position", "feature"),
                         locate=functools.partial(where_model, ctx, handle, ex.config, inputs, ex.dropout))

    lm_gate(ctx)


def _square_batches_only(ctx, config, ids):
    """The model, which raised on `ids` (B != T), gives the right hidden states on a batch of T
    sequences of length T: the mistake of a causal mask sized by src.size(0)."""
    T = ids.size(1)
    square = torch.randint(0, config[0], (T, T), generator=torch.Generator().manual_seed(7))
    handle = _model(ctx, config)
    try:
        got = ctx.student.call(handle, "__call__", square)
    except StudentError:
        return False
    return is_close(got, forward_variants(ctx, handle, square, config[1], config[0])[0], atol=1e-4)


@check("causal_lm.src_mask_argument", "A src_mask passed to forward replaces the causal mask")
def src_mask_argument(ctx):
    @ctx.given(causal_inputs(square=False))
    def prop(ex):
        config, ids, _ = ex
        ntoken, d_model = config[0], config[1]
        handle = _model(ctx, config)
        T = ids.size(1)
        # every position sees every other one: the encoder's output without a mask
        open_mask = torch.zeros(T, T)
        got = _hidden(ctx, handle, ids, config, open_mask)
        expected, mistakes = forward_variants(ctx, handle, ids, d_model, ntoken, open_mask)
        # judged on the model's own wiring (charged in causal_lm.model_matches_reference): a scale or
        # a positional encoding left out still honours the mask it is given
        honoured = [expected] + [out for name, out in mistakes if name != "src_mask_ignored"]
        if any(is_close(got, out, atol=1e-4) for out in honoured):
            return
        diagnosis = "src_mask_ignored" if is_close(got, dict(mistakes)["src_mask_ignored"], atol=1e-4) else None
        expect_close(got, expected, f"hidden states of TransformerModel{config} called with src_mask = zeros({T}, {T}) "
                                    "(no position blocked) against its own sub-modules", atol=1e-4, diagnosis=diagnosis,
                     axes=("batch", "position", "feature"),
                     locate=lambda: where_model(ctx, handle, config, [ids, open_mask]))

    lm_gate(ctx)


# ---------------------------------------------------------------- heads
#
# The differential of each head: its logits compared by value with the reference head's holding
# the same Linear weights (the grader's, loaded into the head's one (n_out, d_model) weight and
# (n_out,) bias, found by shape, so that any attribute name passes), on hidden states of two shapes
# given to one instance, sequences of one position among them.


def _linear_entries(state, n_out, d_model):
    """The names of a head's Linear weight (n_out, d_model) and bias (n_out,) in its state_dict `state`
    (the bias None where it has none), or None when the head holds no such tensors."""
    state = learnable(state)
    weights = [name for name, t in state.items() if tuple(t.shape) == (n_out, d_model)]
    biases = [name for name, t in state.items() if tuple(t.shape) == (n_out,) and name not in weights]
    if len(weights) != 1 or len(biases) > 1:
        return None
    return weights[0], (biases[0] if biases else None)


def _linear_weights(ctx, handle, n_out, d_model, what):
    """The head's own Linear weight and bias (or None), read back with state_dict(), or None when the
    head holds no such tensors."""
    state = state_tensors(ctx, handle, what)
    names = _linear_entries(state, n_out, d_model)
    if names is None:
        return None
    return state[names[0]], (None if names[1] is None else state[names[1]])


def load_head_weights(ctx, handle, n_out, d_model, seed, what):
    """The grader's weight (n_out, d_model) and bias (n_out,) loaded into the head's Linear, then read
    back: (weight, bias) as the head holds them; the check fails where it holds no such pair (its
    sizes are counted first)."""
    state = state_tensors(ctx, handle, what)
    names = _linear_entries(state, n_out, d_model)
    if names is None or names[1] is None:
        shapes = {name: tuple(t.shape) for name, t in state.items()}
        raise CheckFailed(f"{what} holds no Linear(d_model={d_model}, {n_out}) weight of shape {(n_out, d_model)} with a bias "
                          f"of shape {(n_out,)}, which the grader loads its weights into: its state_dict holds {shapes}"[:600])
    g = torch.Generator().manual_seed(seed)
    chosen = {names[0]: torch.randn(n_out, d_model, generator=g) / math.sqrt(d_model),
              names[1]: 0.5 * torch.randn(n_out, generator=g)}
    ctx.student.load_state_dict(handle, chosen, strict=False)
    weight, bias = _linear_weights(ctx, handle, n_out, d_model, what)
    return weight, bias


def expect_reference_head(ctx, handle, got, hidden, kind, n_out, weights, what):
    """`got` is the reference head's output on `hidden` under the same Linear weights: logits, not
    probabilities (named where it is their softmax, log-softmax or sigmoid)."""
    d_model = hidden.size(-1)
    expected = ctx.oracle.call("head_logits", kind, d_model, n_out, weights[0], weights[1], hidden)
    if is_close(got, expected, atol=1e-5):
        return
    probabilities = [torch.softmax(expected, -1), torch.log_softmax(expected, -1), torch.sigmoid(expected)]
    diagnosis = "head_returns_probabilities" if any(is_close(got, p, atol=1e-5) for p in probabilities) else None
    expect_close(got, expected, f"{what} output on hidden states of shape {tuple(hidden.shape)}, against the reference "
                                "holding the same Linear weights", diagnosis=diagnosis,
                 locate=lambda: against_reference(ctx, handle, (f"{MODULE}.{kind}", [d_model, n_out], {}), [hidden]))


def expect_head_count(ctx, handle, kind, d_model, n_out, what):
    """The head holds exactly Linear(d_model, n_out) with bias: d_model * n_out + n_out parameters."""
    state = learnable(state_tensors(ctx, handle, kind))
    expected = d_model * n_out + n_out
    if numel(state) != expected:
        raise CheckFailed(f"{what} has {numel(state)} parameters, expected {expected} (Linear(d_model, {n_out}) with bias)"
                          + by_sub_module(state, reference_shapes(ctx, kind, d_model, n_out)),
                          diagnosis="parameter_count_off")


class HeadInput(NamedTuple):
    d_model: int
    n_out: int  # ntoken or n_classes
    hiddens: tuple  # hidden states (B, T, d_model) of two shapes, given to one instance
    weights_seed: int


@st.composite
def head_inputs(draw):
    d_model = draw(st.integers(1, 8))
    n_out = draw(st.integers(1, 12))
    shapes = draw(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 6)), min_size=2, max_size=2, unique=True))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    return HeadInput(d_model, n_out, tuple(torch.randn(B, T, d_model, generator=g) for B, T in shapes), seed)


@check("causal_lm.lm_head", "LMHead maps (B, T, d_model) to next-token logits (B, T, ntoken), position by position: the "
                            "reference's under the same weights")
def lm_head(ctx):
    @ctx.given(head_inputs())
    def prop(ex):
        d_model, ntoken = ex.d_model, ex.n_out
        handle = ctx.student.construct(MODULE, "LMHead", d_model, ntoken)
        ctx.student.call(handle, "eval")
        what = f"LMHead({d_model}, {ntoken})"
        first = ex.hiddens[0]
        _head_call(ctx, handle, first, ntoken, what, (*first.shape[:2], ntoken))  # an exception, explained
        expect_head_count(ctx, handle, "LMHead", d_model, ntoken, what)
        weights = load_head_weights(ctx, handle, ntoken, d_model, ex.weights_seed, what)
        for hidden in ex.hiddens:
            B, T, _ = hidden.shape
            out = _head_call(ctx, handle, hidden, ntoken, what, (B, T, ntoken))
            other = hidden.clone()
            other[:, 0] += 1.0
            changed = _head_call(ctx, handle, other, ntoken, what, (B, T, ntoken))
            if not torch.allclose(out[:, 1:], changed[:, 1:], atol=1e-5):
                raise CheckFailed("changing the hidden state at position 0 changed the logits at other positions: "
                                  "the head must map every position on its own")
            expect_reference_head(ctx, handle, out, hidden, "LMHead", ntoken, weights, what)
        expect_repeatable(out, ctx.student.call(handle, "__call__", hidden), "LMHead logits")
        expect_changes(out[:, 0], changed[:, 0], "LMHead logits at position 0", "the hidden state there changes")
        expect_varies(out, "LMHead logits", dim=-1)


@check("causal_lm.classification_head", "ClassificationHead reads the last position: (B, T, d_model) -> (B, n_classes), "
                                        "the reference's under the same weights")
def classification_head(ctx):
    @ctx.given(head_inputs())
    def prop(ex):
        d_model, n_classes = ex.d_model, ex.n_out
        handle = ctx.student.construct(MODULE, "ClassificationHead", d_model, n_classes)
        ctx.student.call(handle, "eval")
        what = f"ClassificationHead({d_model}, {n_classes})"
        _class_logits(ctx, handle, ex.hiddens[0], n_classes, what)  # an exception or the batch axis, explained
        expect_head_count(ctx, handle, "ClassificationHead", d_model, n_classes, what)
        weights = load_head_weights(ctx, handle, n_classes, d_model, ex.weights_seed, what)
        for hidden in ex.hiddens:
            B, T, _ = hidden.shape
            out = _class_logits(ctx, handle, hidden, n_classes, what)
            earlier = hidden.clone()
            earlier[:, :-1] = torch.randn(B, T - 1, d_model, generator=torch.Generator().manual_seed(99)) * 3
            same = _class_logits(ctx, handle, earlier, n_classes, what)
            if not torch.allclose(out, same, atol=1e-5):
                raise CheckFailed(f"on hidden states of shape {(B, T, d_model)}, changing positions 0..{T - 2} changed the "
                                  "class logits: only the last position may count", diagnosis="head_wrong_position")
            expect_reference_head(ctx, handle, out, hidden, "ClassificationHead", n_classes, weights, what)
            last = hidden.clone()
            last[:, -1] += 1.0
            moved = _class_logits(ctx, handle, last, n_classes, what)
            if torch.allclose(out, moved, atol=1e-7):
                raise CheckFailed("changing the last position's hidden state did not change the class logits",
                                  diagnosis="head_wrong_position")


def _class_logits(ctx, handle, hidden, n_classes, what):
    """The head's (B, n_classes) logits, or the check fails saying that it read the batch's last sequence."""
    try:
        out = ctx.student.call(handle, "__call__", hidden)
    except StudentError as error:
        raise explain_head_error(ctx, handle, error, hidden, n_classes, what) from None
    B, T, d_model = hidden.shape
    # hidden[-1] gives (T, n_classes): another shape than (B, n_classes), or the same on a square batch
    suspect = type(out) is torch.Tensor and (tuple(out.shape) != (B, n_classes) or B == T)
    found = _linear_weights(ctx, handle, n_classes, d_model, what) if suspect else None
    if found is not None and not (B == T and is_close(out, F.linear(hidden[:, -1].double(), found[0].double(),
                                                                   None if found[1] is None else found[1].double()),
                                                      atol=1e-5)):
        last_row = F.linear(hidden[-1].double(), found[0].double(), None if found[1] is None else found[1].double())
        if is_close(out, last_row, atol=1e-5):
            raise CheckFailed(f"{what} on hidden states of shape {(B, T, d_model)} gave logits of shape {tuple(out.shape)}: "
                              f"those of the batch's last sequence, hidden[-1], at each of its {T} positions; batch-first "
                              "hidden states (B, T, d_model) take the last position of every sequence, hidden[:, -1]",
                              diagnosis="head_reads_batch_axis")
    return expect_tensor(out, f"{what} output", shape=(B, n_classes))


# ---------------------------------------------------------------- counting


@check("causal_lm.count_parameters", "count_parameters equals the number of trainable parameters (no buffers, no frozen "
                                     "ones, a shared one once), on the student's model and on modules of the grader's")
def count_parameters(ctx):
    # The differential of count_parameters: its counts of modules the grader builds in the worker
    # (the probe: frozen layers, a buffer, a weight two layers share) against the reference's
    # count_parameters of the same module, and of the student's own model with all or part of it
    # frozen against what its state_dict holds (its own structure, counted in model_parameters).
    @ctx.given(lm_configs(), st.integers(0, 2), st.booleans())
    def prop(config, frozen, tied):
        ntoken, d_model, nhead, d_hid, nlayers = config
        # the student's own model, every parameter frozen by the grader: nothing left to count
        handle = _model(ctx, config)
        ctx.student.call(handle, "requires_grad_", False)
        got = _as_int(ctx.student.call(MODULE, "count_parameters", handle), "count_parameters(model)")
        sizes = (d_model, d_hid, ntoken)
        if got != 0:
            counts = _frozen_model_counts(*_model_parameters(ctx, handle, d_model))
            diagnosis, said = _count_mistake(ctx, [(counts, got)], sizes, frozen, tied)
            raise CheckFailed(f"count_parameters(TransformerModel{config}) = {got} after model.requires_grad_(False); "
                              f"expected 0: only parameters that require gradients count, and buffers never{said}",
                              diagnosis=diagnosis, details={"numbers": {"expected": 0, "got": got}})
        got = _probe_count(ctx, sizes, frozen, tied)
        expected = ctx.oracle.call("probe_count", list(sizes), frozen, tied)
        if got != expected:
            diagnosis, said = _count_mistake(ctx, [(_probe_counts(sizes, frozen, tied), got)], sizes, frozen, tied)
            raise CheckFailed(f"count_parameters of {_probe_described(sizes, frozen, tied)} = {got}, expected {expected} "
                              f"(only requires_grad parameters count, a shared one once){said}",
                              diagnosis=diagnosis, details={"numbers": {"expected": expected, "got": got}})
        # the same model with only its embedding frozen: the rest counts, where the model holds the
        # closed form's parameters (another structure, a layer shared or kept twice, is model_parameters')
        embedding = _sub_module(ctx, handle, "embedding")
        state, parameters = _model_parameters(ctx, handle, d_model)
        if embedding is None or not _holds_closed_form(ctx, handle, config, parameters):
            return
        ctx.student.call(handle, "requires_grad_", True)
        ctx.student.call(embedding, "requires_grad_", False)
        got = _as_int(ctx.student.call(MODULE, "count_parameters", handle), "count_parameters(model)")
        frozen_part = learnable(state_tensors(ctx, embedding, "embedding"))
        counts = {**_frozen_model_counts(state, parameters), "right": numel(parameters) - numel(frozen_part),
                  "tensors": len(parameters) - len(frozen_part)}
        if got != counts["right"]:
            diagnosis, said = _count_mistake(ctx, [(counts, got)], sizes, frozen, tied)
            raise CheckFailed(f"count_parameters(TransformerModel{config}) = {got} with only its embedding frozen "
                              f"(model.embedding.requires_grad_(False)); expected {counts['right']}, the elements of its "
                              f"other parameters{said}", diagnosis=diagnosis,
                              details={"numbers": {"expected": counts["right"], "got": got}})


# What a count may have added up instead of the trainable parameters' elements, and the diagnosis of
# each: it is named only when one of them gives every count seen, on modules where they all differ.
COUNT_MISTAKES = {
    "frozen": ("the elements of every parameter, frozen ones too", "count_includes_frozen"),
    "state": ("the elements of the whole state_dict, frozen parameters and buffers", "count_from_state_dict"),
    "tensors": ("the trainable parameter tensors, not their elements", "count_tensors"),
    "all_tensors": ("the parameter tensors, not their elements", "count_tensors"),
    "nothing": ("nothing", "count_state_dict_requires_grad"),
}


def _probe_counts(sizes, frozen, tied=False):
    """{what is counted: the count} on the probe module Sequential(Linear(a, b), Linear(b, c)) with its
    first `frozen` layers frozen and a buffer of 100 elements; `tied`: a third Linear(a, b) holding the
    first one's weight (in the state_dict twice) and a bias of its own, never frozen."""
    a, b, c = sizes
    layers = [a * b + b, b * c + c]
    own_bias = b if tied else 0
    return {"right": sum(layers[frozen:]) + own_bias, "frozen": sum(layers) + own_bias,
            "state": sum(layers) + 100 + (a * b + b if tied else 0),
            "tensors": 2 * (2 - frozen) + tied, "all_tensors": 4 + tied, "nothing": 0}


def _probe_described(sizes, frozen, tied):
    a, b, c = sizes
    third = f", Linear{(a, b)} sharing the first one's weight" if tied else ""
    return (f"Sequential(Linear{(a, b)}, Linear{(b, c)}{third}) with the first {frozen} layer(s) frozen and a buffer "
            "of 100 elements")


def _holds_closed_form(ctx, handle, config, parameters):
    """The model's `parameters` (`_model_parameters`) are the closed form's, none of them shared: its
    count is then the closed form's."""
    base = ctx.oracle.call("causal_lm.closed_form_parameter_count", *config)["base"]
    return numel(parameters) == base and not shared_entries(ctx, handle, parameters, ctx.seed)


def _model_parameters(ctx, handle, d_model):
    """(the model's state_dict read back, its entries less the positional table, a buffer)."""
    state = state_tensors(ctx, handle, "TransformerModel")
    tables = _positional_tables(ctx, d_model)
    return state, {n: t for n, t in learnable(state).items() if not _is_table(t, tables, d_model)}


def _frozen_model_counts(state, parameters):
    """The same for the student's model with every parameter frozen, from its state_dict `state` and its
    `parameters` (`_model_parameters`)."""
    return {"right": 0, "frozen": numel(parameters), "state": numel(state), "tensors": 0,
            "all_tensors": len(parameters), "nothing": 0}


def _probe_count(ctx, sizes, frozen, tied=False):
    """The student's count_parameters of the probe module built in the worker; its state, read back,
    must be what the grader asked for."""
    module = ctx.student.task("causal_lm.probe_module", list(sizes), frozen, tied)
    a, b, c = sizes
    built = {"0.weight": (b, a), "0.bias": (b,), "1.weight": (c, b), "1.bias": (c,), "table": (100,)}
    if tied:
        built.update({"2.weight": (b, a), "2.bias": (b,)})
    if state_shapes(ctx, module, "the probe module") != built:
        raise CheckFailed("the probe module Sequential(Linear, Linear) with a buffer was not built as the grader "
                          "asked: something in the worker interfered")
    return _as_int(ctx.student.call(MODULE, "count_parameters", module), "count_parameters")


def _count_mistake(ctx, seen, sizes, frozen, tied=False):
    """(diagnosis, what was seen) of a wrong count: `seen` [(counts of a module, the student's count)] is
    completed by a second probe module of other sizes and frozen layers; a mistake is named when it
    alone gives every count, else (None, the counts)."""
    other_sizes, other_frozen = tuple(n + i + 1 for i, n in enumerate(sizes)), 1 if frozen != 1 else 0
    try:
        seen = [*seen, (_probe_counts(other_sizes, other_frozen, tied),
                        _probe_count(ctx, other_sizes, other_frozen, tied))]
    except StudentError:
        pass
    fits = [kind for kind in COUNT_MISTAKES if all(counts[kind] == got for counts, got in seen)]
    described = "; ".join(f"{got} where {counts['right']} is right" for counts, got in seen)
    if len({COUNT_MISTAKES[kind][1] for kind in fits}) != 1:
        return None, f" (counts seen: {described})"
    return COUNT_MISTAKES[fits[0]][1], f": on {len(seen)} modules it counted {COUNT_MISTAKES[fits[0]][0]} ({described})"


@check("causal_lm.model_parameters", "TransformerModel has exactly the parameters of its closed form (no extra or shared layer)")
def model_parameters(ctx):
    @ctx.given(lm_configs())
    def prop(config):
        ntoken, d_model, nhead, d_hid, nlayers = config
        handle = _model(ctx, config)
        # counted from the tensors its state_dict returns, less the positional-encoding table
        tables = _positional_tables(ctx, d_model)
        state = {name: t for name, t in learnable(state_tensors(ctx, handle, "TransformerModel")).items()
                 if not _is_table(t, tables, d_model)}
        got = numel(state)
        expected = ctx.oracle.call("causal_lm.closed_form_parameter_count", *config)["base"]
        shapes = reference_shapes(ctx, "TransformerModel", *config)
        if got != expected:
            layer = _layer_count(d_model, d_hid)
            diagnosis = ("extra_layer_copy" if got == expected + layer and _layer_copies(state) > nlayers
                         else "parameter_count_off")
            raise CheckFailed(f"TransformerModel{config} has {got} parameters in its state_dict (besides the positional "
                              f"encoding), expected {expected}"
                              + (" (one encoder layer too many)" if diagnosis == "extra_layer_copy" else "")
                              + by_sub_module(state, shapes),
                              diagnosis=diagnosis, details={"numbers": {"expected": expected, "got": got}})
        shared = shared_entries(ctx, handle, state, ctx.seed)
        if shared:
            raise CheckFailed(f"TransformerModel{config}: {shared[:4]} share their tensor with another entry (a layer used "
                              "twice), so the model has fewer parameters than its closed form",
                              diagnosis="layers_shared")

    # the constructor alone earns nothing: the model must also compute (a stubbed forward)
    lm_gate(ctx)


BERT_SCALE_CONFIG = LMConfig(96_000, 768, 12, 3072, 12)  # vocabulary and widths of bert-base's order


@st.composite
def closed_form_configs(draw):
    """Any configuration the docstring allows, well beyond what the other checks build: vocabularies
    up to 100,000 tokens, d_model up to 2,048 (any size nhead divides), d_hid up to 8,192, up to 24
    layers; n_classes from 1 to 10, or left at its default."""
    nhead = draw(st.integers(1, 16))
    config = LMConfig(draw(st.integers(1, 100_000)), nhead * draw(st.integers(1, 128)), nhead,
                      draw(st.integers(1, 8192)), draw(st.integers(1, 24)))
    return config, draw(st.none() | st.integers(1, 10))


def _expect_counts(ctx, config, n_classes):
    """The student's closed_form_parameter_count against the reference's, key by key."""
    args = (*config,) if n_classes is None else (*config, n_classes)
    got = ctx.student.call(MODULE, "closed_form_parameter_count", *args)
    expected = ctx.oracle.call("causal_lm.closed_form_parameter_count", *args)
    if not isinstance(got, dict) or set(expected) - set(got):
        raise CheckFailed(f"closed_form_parameter_count must return a dict with keys {sorted(expected)}, got {got!r}"[:400],
                          diagnosis="returns_wrong_type")
    call = f"closed_form_parameter_count{args}"
    for key in ("base", "lm_head", "classification_head"):
        if type(got[key]) is not int:  # the docstring: "the counts are Python ints"
            raise CheckFailed(f"{call}[{key!r}] is {type(got[key]).__name__} {got[key]!r}, where the docstring asks for a "
                              "Python int (true division / gives a float: use //, or multiply before dividing)"[:400],
                              diagnosis="returns_wrong_type")
        value = got[key]
        if value != expected[key]:
            raise CheckFailed(f"{call}[{key!r}] = {value}, expected {expected[key]}", diagnosis="closed_form_wrong",
                              details={"numbers": {"expected": expected[key], "got": value}})


@check("causal_lm.closed_form", "closed_form_parameter_count matches the reference's formula for every configuration")
def closed_form(ctx):
    # The differential of closed_form_parameter_count: the reference's counts over the whole range
    # its docstring allows (the reference's formula is what the modules hold, tests/test_reference.py).
    # A model of the seed's scale first, but never the seed's own configuration: its counts are the
    # numeric answers, which the self-check's golden answers and its failure messages would give away
    # (graders/bundle.py refuses them).
    _expect_counts(ctx, BERT_SCALE_CONFIG, 3)

    @ctx.given(closed_form_configs())
    def prop(ex):
        _expect_counts(ctx, *ex)
