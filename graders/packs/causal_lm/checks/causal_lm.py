"""Checks for the causal Transformer LM on nn.TransformerEncoder (seeds 000 and 001)."""

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


class HeadInput(NamedTuple):
    d_model: int
    n_out: int  # ntoken or n_classes
    hidden: torch.Tensor  # (B, T, d_model)


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


def where_model(ctx, handle, config, inputs):
    """Where the model departs from the reference model holding its weights, for a failure's message."""
    return against_reference(ctx, handle, (f"{MODULE}.TransformerModel", [*config, 0.1], {}), inputs)


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


def _hidden(ctx, handle, ids, config):
    try:
        out = ctx.student.call(handle, "__call__", *model_args(ctx, ids))
    except StudentError as error:
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
    if B != T and _sizes_met(error.message) == {B, T}:
        pos_encoder = _sub_module(ctx, handle, "pos_encoder")
        if pos_encoder is not None:
            x = torch.randn(B, T, d_model, generator=torch.Generator().manual_seed(5))
            try:
                ctx.student.call(pos_encoder, "__call__", x)
            except StudentError as inner:
                why = _sliced_by_batch(ctx, pos_encoder, d_model, B, T, inner)
                if why is not None:
                    return CheckFailed(f"{raised}. Its positional encoding raises on its own on x of shape "
                                       f"{(B, T, d_model)}. {why}"[:900], diagnosis="pe_sliced_by_batch")
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
        expected = torch.triu(torch.full((sz, sz), float("-inf")), diagonal=1)
        if got.dtype == torch.bool or not got.is_floating_point():
            raise CheckFailed(f"generate_square_subsequent_mask({sz}) has dtype {got.dtype}, expected a float tensor of 0 and -inf",
                              diagnosis="square_mask_boolean", details={"got": str(got.int().tolist())[:400]})
        above = torch.triu(torch.ones(sz, sz, dtype=torch.bool), diagonal=1)
        # -inf above the diagonal; a finite fill as low as the dtype's minimum works the same in the encoder
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
    x: torch.Tensor  # (B, T, d_model)


@st.composite
def table_inputs(draw):
    """(d_model, x (B, T, d_model)): even sizes, as the model's (the tutorial's table, right for them, is
    accepted), and sequences long enough for the slow dimensions to move."""
    d_model = 2 * draw(st.integers(1, 8))
    B, T = draw(st.integers(1, 3)), draw(st.integers(2, 40))
    seed = draw(st.integers(0, 2**16))
    return TableInput(d_model, torch.randn(B, T, d_model, generator=torch.Generator().manual_seed(seed)))


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


@check("causal_lm.positional_table", "PositionalEncoding adds PE(pos, 2i) = sin(pos / 10000^(2i/d)), "
                                     "PE(pos, 2i+1) = cos(the same) to position pos (eval mode)")
def positional_table(ctx):
    # The table is compared with the docstring's formula itself: the model's checks run the
    # student's own pos_encoder, so a table with other frequencies would pass them all. The
    # tolerance: a float32 table built as exp(2i * -log(10000) / d) (the tutorial's) or as
    # 1 / 10000 ** (2i / d) is within 7.7e-7 of the float64 formula at the positions drawn (up to
    # 40, every even d_model up to 16), and adding it to x (|x| < 5) rounds by about 5e-7: atol 1e-4
    # is some 60 times that; the frequency mistakes below are 600 times it and more.
    @ctx.given(table_inputs())
    def prop(ex):
        d_model, x = ex
        handle = ctx.student.construct(MODULE, "PositionalEncoding", d_model, 0.1)
        ctx.student.call(handle, "eval")
        B, T, _ = x.shape
        try:
            got = ctx.student.call(handle, "__call__", x)
        except StudentError as error:
            raise explain_pe_error(ctx, handle, d_model, x.shape, error,
                                   f"PositionalEncoding({d_model}) on x of shape {(B, T, d_model)}") from None
        got = expect_tensor(got, f"PositionalEncoding({d_model}) output", shape=(B, T, d_model))
        expected = x.double() + _sinusoid(T, d_model)
        if is_close(got, expected, atol=1e-4):
            return
        added = got.double() - x.double()
        variants = _table_variants(T, d_model)
        if B == 1:  # the table sliced by x.size(0): one row, position 0's, added at every position
            variants.append(("pe_sliced_by_batch", _sinusoid(1, d_model).expand(T, d_model)))
        diagnosis = next((name for name, table in variants if is_close(added, table.expand_as(added), atol=1e-4)), None)
        expect_close(got, expected, f"PositionalEncoding({d_model}) (eval mode) on x of shape {(B, T, d_model)}: x + "
                                    "PE[:T]", atol=1e-4, diagnosis=diagnosis)


# ---------------------------------------------------------------- dropout (training mode)
#
# Judged at rates 0 and 1, where training mode is deterministic: at 1 a dropout drops everything it
# is applied to, at 0 nothing. PositionalEncoding drops after adding the table; TransformerModel
# hands its rate to its positional encoding and its encoder layers (the docstring's dropout).


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
    diagnosis = ("pe_dropout_missing" if is_close(got, in_eval, atol=1e-5) else
                 "pe_dropout_before_add" if is_close(got, in_eval.double() - x.double(), atol=1e-5) else None)
    seen = {"pe_dropout_missing": ": x + PE, as in eval mode (no dropout applied)",
            "pe_dropout_before_add": ": the table alone (x dropped before the table is added)"}.get(diagnosis, "")
    raise CheckFailed(f"PositionalEncoding({d_model}, dropout=1.0) in training mode on x of shape {tuple(x.shape)} must "
                      f"drop everything (the dropout comes after the add), got values up to {got.abs().max().item():.3g}"
                      + seen, diagnosis=diagnosis)


@check("causal_lm.dropout", "PositionalEncoding drops after the add, and TransformerModel's dropout is the rate of its "
                            "positional encoding and of its encoder layers (training mode)")
def dropout(ctx):
    @ctx.given(lm_configs(), st.integers(0, 2**16))
    def prop(config, seed):
        d_model = config[1]
        # a square input (B == T): read batch-first or not, it runs (the layout is charged elsewhere)
        x = torch.randn(5, 5, d_model, generator=torch.Generator().manual_seed(seed))
        _pe_drops_after_add(ctx, d_model, x)
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


# The roles forward_wiring runs on their own, the template's attribute name and the class that fills
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


def forward_variants(ctx, handle, ids, d_model, ntoken):
    """(the right hidden states, [(diagnosis, hidden states)] of known mistakes), from the model's own
    sub-modules."""
    mods = sub_modules(ctx, handle)

    def run(name, *args, **kwargs):
        out = ctx.student.call(mods[name], "__call__", *args, **kwargs)
        return expect_tensor(out, f"{name} output")

    T = ids.size(1)
    causal_mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    embedded = run("embedding", ids)
    scaled = embedded * math.sqrt(d_model)
    right = run("transformer_encoder", run("pos_encoder", scaled), mask=causal_mask)
    mistakes = [
        ("lm_embedding_not_scaled", run("transformer_encoder", run("pos_encoder", embedded), mask=causal_mask)),
        ("lm_embedding_wrong_scale", run("transformer_encoder", run("pos_encoder", embedded * d_model), mask=causal_mask)),
        ("lm_embedding_wrong_scale", run("transformer_encoder", run("pos_encoder", embedded * math.sqrt(ntoken)),
                                         mask=causal_mask)),
        ("lm_no_positional_encoding", run("transformer_encoder", scaled, mask=causal_mask)),
        ("not_causal", run("transformer_encoder", run("pos_encoder", scaled))),
    ]
    return right, mistakes


@check("causal_lm.forward_wiring", "forward = transformer_encoder(pos_encoder(embedding(src) * sqrt(d_model)), causal mask), "
                                   "from the model's own sub-modules")
def forward_wiring(ctx):
    @ctx.given(causal_inputs(square=False))
    def prop(ex):
        config, ids, _ = ex
        d_model = config[1]
        handle = _model(ctx, config)
        got = _hidden(ctx, handle, ids, config)
        right, mistakes = forward_variants(ctx, handle, ids, d_model, config[0])
        if is_close(got, right, atol=1e-4):
            return
        diagnosis = next((name for name, out in mistakes if is_close(got, out, atol=1e-4)), None)
        expect_close(got, right, f"hidden states of TransformerModel{config} (eval mode) against its own embedding, "
                                 "pos_encoder and transformer_encoder", atol=1e-4, diagnosis=diagnosis,
                     axes=("batch", "position", "feature"), locate=lambda: where_model(ctx, handle, config, [ids]))


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
        try:
            got = ctx.student.call(handle, "__call__", ids, open_mask)
        except StudentError as error:
            if _runs(ctx, handle, ids):
                call = f"TransformerModel{tuple(config)}(ids of shape {tuple(ids.shape)}, src_mask = zeros({T}, {T}))"
                raise CheckFailed(f"{_raised(call, error)}; without the src_mask it runs: the second argument of "
                                  "forward is the (T, T) additive mask"[:900], diagnosis="src_mask_not_a_mask") from None
            raise explain_model_error(ctx, handle, config, ids, error) from None
        got = expect_tensor(got, "TransformerModel output", shape=(*ids.shape, d_model))
        causal_out, mistakes = forward_variants(ctx, handle, ids, d_model, ntoken)
        expected = dict(mistakes)["not_causal"]
        if is_close(got, expected, atol=1e-4):
            return
        diagnosis = "src_mask_ignored" if is_close(got, causal_out, atol=1e-4) else None
        expect_close(got, expected, f"hidden states of TransformerModel{config} called with src_mask = zeros({T}, {T}) "
                                    "(no position blocked) against its own sub-modules", atol=1e-4, diagnosis=diagnosis,
                     axes=("batch", "position", "feature"),
                     locate=lambda: where_model(ctx, handle, config, [ids, open_mask]))

    lm_gate(ctx)


# ---------------------------------------------------------------- heads


def _linear_weights(ctx, handle, n_out, d_model, what):
    """The head's own Linear weight (n_out, d_model) and bias (n_out,) (or None), read back with
    state_dict(), or None when the head holds no such tensors (its sizes are graded elsewhere)."""
    state = learnable(state_tensors(ctx, handle, what))
    weights = [t for t in state.values() if tuple(t.shape) == (n_out, d_model)]
    biases = [t for t in state.values() if tuple(t.shape) == (n_out,)]
    if len(weights) != 1 or len(biases) > 1:
        return None
    return weights[0], (biases[0] if biases else None)


def expect_linear(ctx, handle, got, hidden, n_out, what, build, inputs):
    """`got` is the head's own Linear applied to `hidden`: logits, not probabilities. `build`
    and `inputs`: the reference head and its input, to say where a head that differs departs."""
    found = _linear_weights(ctx, handle, n_out, hidden.size(-1), what)
    if found is None:
        return
    expected = F.linear(hidden.double(), found[0].double(), None if found[1] is None else found[1].double())
    if is_close(got, expected, atol=1e-5):
        return
    probabilities = [torch.softmax(expected, -1), torch.log_softmax(expected, -1), torch.sigmoid(expected)]
    diagnosis = "head_returns_probabilities" if any(is_close(got, p, atol=1e-5) for p in probabilities) else None
    expect_close(got, expected, f"{what} output against its own Linear weights", diagnosis=diagnosis,
                 locate=lambda: against_reference(ctx, handle, build, inputs))


@st.composite
def head_inputs(draw):
    d_model = draw(st.integers(1, 8))
    B, T = draw(st.integers(1, 4)), draw(st.integers(2, 6))
    n_out = draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**16))
    hidden = torch.randn(B, T, d_model, generator=torch.Generator().manual_seed(seed))
    return HeadInput(d_model, n_out, hidden)


@check("causal_lm.lm_head", "LMHead maps (B, T, d_model) to next-token logits (B, T, ntoken), position by position")
def lm_head(ctx):
    @ctx.given(head_inputs())
    def prop(ex):
        d_model, ntoken, hidden = ex
        handle = ctx.student.construct(MODULE, "LMHead", d_model, ntoken)
        ctx.student.call(handle, "eval")
        B, T, _ = hidden.shape
        what = f"LMHead({d_model}, {ntoken})"
        out = _head_call(ctx, handle, hidden, ntoken, what, (B, T, ntoken))
        other = hidden.clone()
        other[:, 0] += 1.0
        changed = _head_call(ctx, handle, other, ntoken, what, (B, T, ntoken))
        if not torch.allclose(out[:, 1:], changed[:, 1:], atol=1e-5):
            raise CheckFailed("changing the hidden state at position 0 changed the logits at other positions: "
                              "the head must map every position on its own")
        expect_linear(ctx, handle, out, hidden, ntoken, f"LMHead({d_model}, {ntoken})",
                      (f"{MODULE}.LMHead", [d_model, ntoken], {}), [hidden])
        expect_repeatable(out, ctx.student.call(handle, "__call__", hidden), "LMHead logits")
        expect_changes(out[:, 0], changed[:, 0], "LMHead logits at position 0", "the hidden state there changes")
        expect_varies(out, "LMHead logits", dim=-1)
        state = learnable(state_tensors(ctx, handle, "LMHead"))
        shapes = reference_shapes(ctx, "LMHead", d_model, ntoken)
        if numel(state) != d_model * ntoken + ntoken:
            raise CheckFailed(f"LMHead({d_model}, {ntoken}) has {numel(state)} parameters, expected "
                              f"{d_model * ntoken + ntoken} (Linear(d_model, ntoken) with bias)" + by_sub_module(state, shapes),
                              diagnosis="parameter_count_off")


@check("causal_lm.classification_head", "ClassificationHead reads the last position: (B, T, d_model) -> (B, n_classes)")
def classification_head(ctx):
    @ctx.given(head_inputs())
    def prop(ex):
        d_model, n_classes, hidden = ex
        handle = ctx.student.construct(MODULE, "ClassificationHead", d_model, n_classes)
        ctx.student.call(handle, "eval")
        B, T, _ = hidden.shape
        what = f"ClassificationHead({d_model}, {n_classes})"
        out = _class_logits(ctx, handle, hidden, n_classes, what)
        earlier = hidden.clone()
        earlier[:, :-1] = torch.randn(B, T - 1, d_model, generator=torch.Generator().manual_seed(99)) * 3
        same = _class_logits(ctx, handle, earlier, n_classes, what)
        if not torch.allclose(out, same, atol=1e-5):
            raise CheckFailed(f"on hidden states of shape {(B, T, d_model)}, changing positions 0..{T - 2} changed the class "
                              "logits: only the last position may count", diagnosis="head_wrong_position")
        expect_linear(ctx, handle, out, hidden[:, -1], n_classes, f"ClassificationHead({d_model}, {n_classes})",
                      (f"{MODULE}.ClassificationHead", [d_model, n_classes], {}), [hidden])
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
    found = _linear_weights(ctx, handle, n_classes, d_model, what) if type(out) is torch.Tensor else None
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


@check("causal_lm.count_parameters", "count_parameters equals the number of trainable parameters (no buffers, no frozen ones)")
def count_parameters(ctx):
    @ctx.given(lm_configs(), st.integers(0, 2))
    def prop(config, frozen):
        ntoken, d_model, nhead, d_hid, nlayers = config
        # the student's own model, every parameter frozen by the grader: nothing left to count
        handle = _model(ctx, config)
        ctx.student.call(handle, "requires_grad_", False)
        got = _as_int(ctx.student.call(MODULE, "count_parameters", handle), "count_parameters(model)")
        sizes = (d_model, d_hid, ntoken)
        if got != 0:
            diagnosis, said = _count_mistake(ctx, [(_frozen_model_counts(ctx, handle, d_model), got)], sizes, frozen)
            raise CheckFailed(f"count_parameters(TransformerModel{config}) = {got} after model.requires_grad_(False); "
                              f"expected 0: only parameters that require gradients count, and buffers never{said}",
                              diagnosis=diagnosis, details={"numbers": {"expected": 0, "got": got}})
        got = _probe_count(ctx, sizes, frozen)
        expected = _probe_counts(sizes, frozen)["right"]
        if got != expected:
            diagnosis, said = _count_mistake(ctx, [(_probe_counts(sizes, frozen), got)], sizes, frozen)
            raise CheckFailed(f"count_parameters of Sequential(Linear{sizes[:2]}, Linear{sizes[1:]}) with the first {frozen} "
                              f"layer(s) frozen and a buffer of 100 elements = {got}, expected {expected} (only "
                              f"requires_grad parameters count){said}",
                              diagnosis=diagnosis, details={"numbers": {"expected": expected, "got": got}})


# What a count may have added up instead of the trainable parameters' elements, and the diagnosis of
# each: it is named only when one of them gives every count seen, on modules where they all differ.
COUNT_MISTAKES = {
    "frozen": ("the elements of every parameter, frozen ones too", "count_includes_frozen"),
    "state": ("the elements of the whole state_dict, frozen parameters and buffers", "count_from_state_dict"),
    "tensors": ("the trainable parameter tensors, not their elements", "count_tensors"),
    "all_tensors": ("the parameter tensors, not their elements", "count_tensors"),
    "nothing": ("nothing", "count_state_dict_requires_grad"),
}


def _probe_counts(sizes, frozen):
    """{what is counted: the count} on the probe module Sequential(Linear(a, b), Linear(b, c)) with its
    first `frozen` layers frozen and a buffer of 100 elements."""
    a, b, c = sizes
    layers = [a * b + b, b * c + c]
    return {"right": sum(layers[frozen:]), "frozen": sum(layers), "state": sum(layers) + 100,
            "tensors": 2 * (2 - frozen), "all_tensors": 4, "nothing": 0}


def _frozen_model_counts(ctx, handle, d_model):
    """The same for the student's model with every parameter frozen, from its state_dict read back (less
    the positional table, a buffer)."""
    state = state_tensors(ctx, handle, "TransformerModel")
    tables = _positional_tables(ctx, d_model)
    parameters = {n: t for n, t in learnable(state).items() if not _is_table(t, tables, d_model)}
    return {"right": 0, "frozen": numel(parameters), "state": numel(state), "tensors": 0,
            "all_tensors": len(parameters), "nothing": 0}


def _probe_count(ctx, sizes, frozen):
    """The student's count_parameters of the probe module built in the worker; its state, read back,
    must be what the grader asked for."""
    module = ctx.student.task("causal_lm.probe_module", list(sizes), frozen)
    a, b, c = sizes
    built = {"0.weight": (b, a), "0.bias": (b,), "1.weight": (c, b), "1.bias": (c,), "table": (100,)}
    if state_shapes(ctx, module, "the probe module") != built:
        raise CheckFailed("the probe module Sequential(Linear, Linear) with a buffer was not built as the grader "
                          "asked: something in the worker interfered")
    return _as_int(ctx.student.call(MODULE, "count_parameters", module), "count_parameters")


def _count_mistake(ctx, seen, sizes, frozen):
    """(diagnosis, what was seen) of a wrong count: `seen` [(counts of a module, the student's count)] is
    completed by a second probe module of other sizes and frozen layers; a mistake is named when it
    alone gives every count, else (None, the counts)."""
    other_sizes, other_frozen = tuple(n + i + 1 for i, n in enumerate(sizes)), 1 if frozen != 1 else 0
    try:
        seen = [*seen, (_probe_counts(other_sizes, other_frozen), _probe_count(ctx, other_sizes, other_frozen))]
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


@check("causal_lm.closed_form", "closed_form_parameter_count matches the modules and the formula for every configuration")
def closed_form(ctx):
    @ctx.given(lm_configs(), st.integers(1, 5))
    def prop(config, n_classes):
        ntoken, d_model, nhead, d_hid, nlayers = config
        got = ctx.student.call(MODULE, "closed_form_parameter_count", *config, n_classes)
        expected = ctx.oracle.call("causal_lm.closed_form_parameter_count", *config, n_classes)
        if not isinstance(got, dict) or set(expected) - set(got):
            raise CheckFailed(f"closed_form_parameter_count must return a dict with keys {sorted(expected)}, got {got!r}"[:400],
                              diagnosis="returns_wrong_type")
        call = f"closed_form_parameter_count{(*config, n_classes)}"
        for key in ("base", "lm_head", "classification_head"):
            value = _as_int(got[key], f"{call}[{key!r}]")
            if value != expected[key]:
                raise CheckFailed(f"{call}[{key!r}] = {value}, expected {expected[key]}", diagnosis="closed_form_wrong",
                                  details={"numbers": {"expected": expected[key], "got": value}})

