"""Checks for the sinusoidal positional encoding and the post-LN Transformer block (seed 004, parts 3, 4).

No check here compares with the reference block: the width of `linear_net` is the student's choice
(seed 004's own template uses E, the reference 4E). The block is instead compared with its own
sub-modules (self_attn, linear_net, norm1, norm2) called one by one through the worker, which tests
the wiring whatever the sub-modules hold. The positional table is compared with its closed form.
"""

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from graders.checks.compare import expect_close, expect_tensor, is_close
from graders.checks.framework import _FRAME, CheckFailed, check
from graders.checks.gates import expect_changes, expect_repeatable, expect_varies, sequence_gate
from graders.checks.localise import against_reference
from .attention import explained
from .strategies import tensors_from
from graders.checks.weights import shared_entries, state_tensors
from graders.sandbox import StudentError

MODULE = "encoder"


# ---------------------------------------------------------------- positional encoding: closed forms


def pe_table(T, E, *, layout="interleaved", exponent="2i", base=10000.0, first=0):
    """(T, E) sinusoidal table in float64. layout 'interleaved' (right): sin on even dimensions,
    cos on odd; 'halves': [sin | cos] concatenated; 'swapped': cos on even, sin on odd.
    exponent '2i' (right): pair i uses base^(2i/E); 'i': base^(i/E); 'dim': every dimension j
    uses base^(j/E) (the formula read with the dimension index). `first`: the position of the
    first row (0 is right)."""
    pos = torch.arange(first, first + T, dtype=torch.float64)[:, None]
    half = (E + 1) // 2
    pair = torch.arange(half, dtype=torch.float64)
    if exponent == "2i":
        freq = base ** (-2 * pair / E)
    elif exponent == "i":
        freq = base ** (-pair / E)
    else:  # 'dim'
        freq = None
    table = torch.zeros(T, E, dtype=torch.float64)
    if exponent == "dim":
        dims = torch.arange(E, dtype=torch.float64)
        angle = pos * base ** (-dims / E)
        table[:, 0::2] = torch.sin(angle[:, 0::2])
        table[:, 1::2] = torch.cos(angle[:, 1::2])
        return table
    angle = pos * freq  # (T, half)
    if layout == "halves":
        table[:, :half] = torch.sin(angle)
        table[:, half:] = torch.cos(angle[:, : E - half])
    elif layout == "swapped":
        table[:, 0::2] = torch.cos(angle)
        table[:, 1::2] = torch.sin(angle[:, : E // 2])
    else:
        table[:, 0::2] = torch.sin(angle)
        table[:, 1::2] = torch.cos(angle[:, : E // 2])
    return table


PE_MISTAKES = {
    "pe_not_interleaved": [dict(layout="halves"), dict(layout="swapped")],
    "pe_wrong_exponent": [dict(exponent="i"), dict(exponent="dim")],
    "pe_wrong_base": [dict(base=1000.0), dict(base=100.0), dict(base=100000.0)],
    "pe_positions_shifted": [dict(first=1)],
}


def diagnose_pe(x, got):
    """The known positional-encoding mistake whose output equals the student's, if any."""
    B, T, E = x.shape
    x = x.double()
    if is_close(got, x.to(got.dtype), atol=1e-6):  # seen first: a variant may equal x on a tiny input
        return "pe_not_added"
    for diagnosis, variants in PE_MISTAKES.items():
        for options in variants:
            if is_close(got, (x + pe_table(T, E, **options)).to(got.dtype), atol=1e-4):
                return diagnosis
    if is_close(got, (x * math.sqrt(E) + pe_table(T, E)).to(got.dtype), atol=1e-4):
        return "pe_input_scaled"
    if is_close(got, (x + pe_table(B, E)[:, None, :]).to(got.dtype), atol=1e-4):
        return "pe_batch_axis"
    return None


@dataclass
class PEInput:
    embed_dim: int
    x: torch.Tensor  # (B, T, E)
    dropout: float = 0.1  # the module's rate: eval mode ignores it
    max_len: int | None = None  # None: the default, 5000
    again: torch.Tensor | None = None  # a second input of another length, for the same module

    def __repr__(self):
        dtype = "" if self.x.dtype == torch.float32 else f" and dtype {str(self.x.dtype).replace('torch.', '')}"
        built = f"embed_dim={self.embed_dim}, dropout={self.dropout}" + \
            ("" if self.max_len is None else f", max_len={self.max_len}")
        text = f"PositionalEncoding({built}) in eval mode on input of shape {tuple(self.x.shape)}{dtype}"
        return text + ("" if self.again is None else f", then on input of shape {tuple(self.again.shape)}")


@st.composite
def pe_inputs(draw, *, min_batch=1, min_len=1, whole_space=False):
    """Any embed_dim from 1 to 16, odd ones included (the docstring allows them), batch-first x;
    sequences long enough that high positions, where the frequencies differ most, are exercised.
    `whole_space`: the rest of the constructor's and forward's space too: a rate eval mode must
    ignore, a max_len of the grader's (sequences up to it), float64 input, and a second input of
    another length for the same module."""
    E = draw(st.integers(1, 16))
    T = draw(st.integers(min_len, 40))
    B = draw(st.integers(min_batch, 3))
    seed = draw(st.integers(0, 2**16))
    (x,) = tensors_from(seed, (B, T, E))
    if not whole_space:
        return PEInput(E, x)
    dropout = draw(st.sampled_from((0.1, 0.0, 0.3)))
    T2 = draw(st.integers(1, 40).filter(lambda t: t != T))
    max_len = draw(st.sampled_from((None, max(T, T2), max(T, T2) + 7)))
    dtype = draw(st.sampled_from((torch.float32, torch.float64)))
    (again,) = tensors_from(seed + 1, (B, T2, E))
    return PEInput(E, x.to(dtype), dropout, max_len, again.to(dtype))


def _pe_module(ctx, ex, dropout, mode):
    args = [ex.embed_dim, dropout] + ([] if ex.max_len is None else [ex.max_len])
    handle = ctx.student.construct(MODULE, "PositionalEncoding", *args)
    ctx.student.call(handle, mode)
    return handle


def _pe_guarded(ctx, ex, dropout, run):
    """`run()`, where an exception on an odd embed_dim is explained (_odd_size_failure)."""
    try:
        return run()
    except StudentError as error:
        if ex.embed_dim % 2 == 0:
            raise
        _odd_size_failure(ctx, ex, error, dropout)


def _pe_forward(ctx, ex, dropout=None, mode="eval", x=None, handle=None):
    """The student's PositionalEncoding on `x` (by default the example's), in `handle` or a module
    built for the example."""
    dropout = ex.dropout if dropout is None else dropout
    x = ex.x if x is None else x
    if handle is None:
        handle = _pe_guarded(ctx, ex, dropout, lambda: _pe_module(ctx, ex, dropout, mode))
    got = _pe_guarded(ctx, ex, dropout, lambda: ctx.student.call(handle, "__call__", x))
    return expect_tensor(got, "PositionalEncoding output", shape=x.shape)


def _odd_size_failure(ctx, ex, error, dropout):
    """The student's code raised on an odd embed_dim: if an even size runs (embed_dim + 1, at least 8,
    on at least 16 positions, where the known mistakes show), fail naming the mistake its values
    show, or pe_odd_embed_dim when they are right."""
    B, T, E = ex.x.size(0), max(ex.x.size(1), 16), max(ex.embed_dim + 1, 8)
    (x,) = tensors_from(E, (B, T, E))
    try:
        handle = ctx.student.construct(MODULE, "PositionalEncoding", E, dropout)
        ctx.student.call(handle, "eval")
        got = ctx.student.call(handle, "__call__", x)
    except StudentError:
        raise error from None
    raised = f"PositionalEncoding(embed_dim={ex.embed_dim}) raised {error.exc_type}: {error.message}"[:400]
    expected = (x.double() + pe_table(T, E)).float()
    if type(got) is not torch.Tensor or not is_close(got, expected, atol=1e-4):
        diagnosis = diagnose_pe(x, got) if type(got) is torch.Tensor and got.shape == x.shape else None
        raise CheckFailed(f"{raised}; with embed_dim={E} it runs but x + PE is wrong there", diagnosis=diagnosis)
    raise CheckFailed(f"{raised}; with embed_dim={E} it works", diagnosis="pe_odd_embed_dim")


def confirmed_pe_diagnosis(ctx, diagnosis, embed_dim):
    """`diagnosis`, a table mistake seen on a small input, where the student's module shows it again
    on a larger one of the same parity (on few positions and widths two mistakes can give the same
    table: at embed_dim 3, a table built for 4 has the frequencies of base 1000); else None."""
    if diagnosis not in PE_MISTAKES:
        return diagnosis
    E = 10 + embed_dim % 2
    (x,) = tensors_from(E, (2, 40, E))
    try:
        got = ctx.student.call(_pe_module(ctx, PEInput(E, x), 0.0, "eval"), "__call__", x)
    except StudentError:
        return None
    return diagnosis if type(got) is torch.Tensor and got.shape == x.shape and diagnose_pe(x, got) == diagnosis else None


def pe_gate(ctx):
    """The positional encoding does its job (graders/checks/gates.py), on a module and an input of
    the gate's own (eval mode): repeatable, follows its input, and adds something that is not the
    same at every position (whichever axis it runs along, graded in positional_encoding.sequence_axis)."""
    E, B, T = 8, 2, 6
    x, noise = tensors_from(31, (B, T, E), (B, T, E))
    handle = ctx.student.construct(MODULE, "PositionalEncoding", E, 0.0)
    ctx.student.call(handle, "eval")

    def call(inp):
        return expect_tensor(ctx.student.call(handle, "__call__", inp), "PositionalEncoding output", shape=inp.shape)

    what = f"outputs of PositionalEncoding(embed_dim={E}) (eval mode, input of shape {(B, T, E)})"
    first = call(x)
    expect_repeatable(first, call(x), what)
    expect_changes(first, call(x + 3 * noise), what, "the input changes")
    expect_varies((first - x).reshape(B * T, E), what + " less their input", dim=0)


def split_parameters(entries):
    """(parameters, buffers) of a `ctx.student.parameters` answer."""
    return list(entries["parameters"]), list(entries["buffers"])


# ---------------------------------------------------------------- positional encoding: checks


@check("positional_encoding.values", "sin on even, cos on odd dimensions, frequencies 1/10000^(2i/d), added to the "
       "input: every width, max_len and rate, float32 and float64, one module on two lengths (eval mode)")
def pe_values(ctx):
    @ctx.given(pe_inputs(whole_space=True))
    def prop(ex):
        handle = _pe_guarded(ctx, ex, ex.dropout, lambda: _pe_module(ctx, ex, ex.dropout, "eval"))
        for x, which in ((ex.x, ""), (ex.again, " (the second input, of another length, to the same module, "
                                                 "which was right on the first)")):
            got = _pe_forward(ctx, ex, x=x, handle=handle)
            T, E = x.shape[1:]
            expected = x.double() + pe_table(T, E)
            if not is_close(got, expected, atol=1e-4):
                # after a right first call, an output equal to its input is the module's state, not a
                # table never added (a mistake of the table may show at the second length only)
                diagnosis = confirmed_pe_diagnosis(ctx, diagnose_pe(x, got), E)
                expect_close(got, expected.to(got.dtype), f"x + PE (eval mode){which}", atol=1e-4,
                             diagnosis=None if which and diagnosis == "pe_not_added" else diagnosis,
                             details={"pe_rows": {"expected": pe_table(min(T, 4), E).tolist(),
                                                  "got": (got[0, :4] - x[0, :4]).tolist()}})


@check("positional_encoding.buffer", "The table is a registered buffer, not a (trainable) parameter",
       worker_measured=True)
def pe_buffer(ctx):
    # A buffer and a parameter hold the same tensor: which one it is, only the worker can say.
    @ctx.given(st.integers(1, 8).map(lambda h: 2 * h), st.integers(1, 64))
    def prop(E, max_len):
        handle = ctx.student.construct(MODULE, "PositionalEncoding", E, 0.1, max_len)
        params, buffers = split_parameters(ctx.student.parameters(handle))
        if params:
            names = ", ".join(f"{p['name']} {tuple(p['shape'])}" for p in params)
            raise CheckFailed(f"PositionalEncoding(embed_dim={E}, max_len={max_len}) has parameters: {names}; "
                              "it should have none", diagnosis="pe_parameter",
                              details={"numbers": {"parameters": sum(math.prod(p["shape"]) for p in params)}})
        tables = [b for b in buffers if math.prod(b["shape"]) >= max_len * E]
        if not tables:
            raise CheckFailed(f"PositionalEncoding(embed_dim={E}, max_len={max_len}) registers no buffer holding "
                              f"the {max_len} x {E} table", diagnosis="pe_not_registered")
        if not any(b.get("persistent", True) for b in tables):
            raise CheckFailed(f"PositionalEncoding(embed_dim={E}, max_len={max_len}) registers its table "
                              f"{tables[0]['name']} with persistent=False: the docstring says the table is saved in "
                              "the state_dict", diagnosis="pe_not_persistent")

    pe_gate(ctx)  # a buffer earns points in a module that adds it


@check("positional_encoding.sequence_axis", "The encoding runs along the sequence axis of batch-first input")
def pe_sequence_axis(ctx):
    @ctx.given(pe_inputs(min_batch=2, min_len=2))
    def prop(ex):
        B, T, E = ex.x.shape
        same = ex.x[:1].expand(B, T, E).contiguous()  # identical sequences in the batch
        got = _pe_forward(ctx, PEInput(E, same))
        if not torch.allclose(got, got[:1].expand_as(got), atol=1e-6):
            raise CheckFailed(f"{B} identical sequences of length {T} got different outputs",
                              diagnosis=diagnose_pe(same, got))
        flat = ex.x[:, :1].expand(B, T, E).contiguous()  # every position holds the same vector
        got = _pe_forward(ctx, PEInput(E, flat))
        if torch.allclose(got[:, 1:], got[:, :1].expand(B, T - 1, E), atol=1e-6):
            raise CheckFailed(f"every position of a sequence of length {T} got the same encoding",
                              diagnosis=diagnose_pe(flat, got))


PE_DROPOUT_RATES = (0.3, 0.7)  # two rates, far apart: a rate the code fixes or ignores shows at the other


@check("positional_encoding.dropout", "Dropout is applied after adding the encoding, at the rate given (training mode)")
def pe_dropout(ctx):
    (x,) = tensors_from(ctx.seed, (4, 32, 32))
    seen, rows = {}, []
    for p in PE_DROPOUT_RATES:
        ctx.student.seed(ctx.seed)
        handle = ctx.student.construct(MODULE, "PositionalEncoding", 32, p)
        ctx.student.call(handle, "train")
        seen[p] = got = expect_tensor(ctx.student.call(handle, "__call__", x), "output", shape=x.shape)
        n = got.numel()
        share = (got == 0).double().mean().item()
        sigma = math.sqrt(p * (1 - p) / n)
        rows.append({"name": f"share of values zeroed at dropout={p}", "value": share, "target": p,
                     "low": p - 5 * sigma, "high": p + 5 * sigma})
    shares = [row["value"] for row in rows]
    for p, row in zip(PE_DROPOUT_RATES, rows):
        share, low, high = row["value"], row["low"], row["high"]
        if low <= share <= high:
            continue
        got = seen[p]
        # x dropped out before the table is added: about p of the outputs are the table itself
        table_share = (got.double() - pe_table(x.size(1), 32)).abs().lt(1e-5).double().mean().item()
        if abs(table_share - p) < 0.1:
            diagnosis = "pe_dropout_before_add"
        elif share == 0:
            diagnosis = "pe_no_dropout"
        elif max(shares) - min(shares) < 0.05:
            diagnosis = "pe_dropout_rate_ignored"
        else:
            diagnosis = None  # another rate is no missing dropout
        raise CheckFailed(f"with dropout={p} in training mode {share:.3f} of the outputs are zero "
                          f"(expected within [{low:.3f}, {high:.3f}])", diagnosis=diagnosis, details={"proportions": rows})


# ---------------------------------------------------------------- transformer block


@dataclass
class BlockInput:
    embed_dim: int
    n_heads: int
    x: torch.Tensor  # (B, T, E)
    padding: torch.Tensor | None  # (B, T), 1 at padding; position 0 always real
    rates: tuple = (0.0, 0.3)  # (attn_drop_rate, layer_drop_rate): eval mode ignores them
    again: "BlockInput | None" = None  # a second input of another length, for the same block

    def __repr__(self):
        padding = None if self.padding is None else self.padding.int().tolist()
        text = (f"TransformerBlock(embed_dim={self.embed_dim}, n_heads={self.n_heads}, attn_drop_rate={self.rates[0]}, "
                f"layer_drop_rate={self.rates[1]}) on input of shape {tuple(self.x.shape)}, padding mask {padding}")
        if self.again is not None:
            again = None if self.again.padding is None else self.again.padding.int().tolist()
            text += f", then on input of shape {tuple(self.again.x.shape)}, padding mask {again}"
        return text


def _block_x(B, T, E, seed, padded):
    (x,) = tensors_from(seed, (B, T, E))
    x = 3 * x + 1
    padding = None
    if padded:
        g = torch.Generator().manual_seed(seed + 1)
        rest = (torch.rand(B, T - 1, generator=g) < 0.5).float()
        rest[0, -1] = 1.0
        padding = torch.cat([torch.zeros(B, 1), rest], dim=1)
    return x, padding


# Pairs of (attn_drop_rate, layer_drop_rate) the block is built with where eval mode must ignore them:
# never equal, so that a rate given to the wrong dropout cannot hide.
EVAL_RATES = ((0.0, 0.3), (0.2, 0.6), (0.9, 0.1))


@st.composite
def block_inputs(draw, *, padded=None, whole_space=False):
    """padded: True (a padding mask with at least one padded position), False (mask None),
    None (either). Inputs are scaled and shifted so that LayerNorm has work to do. `whole_space`:
    rates of the block's own (different from each other), and a second input of another length."""
    # embed_dim >= 4: LayerNorm over one feature is always 0, over two only a sign, and a block that
    # drops the mask could then differ from a right one by rounding only (>= 4.7e-3 from 4 on).
    n_heads = draw(st.integers(1, 4))
    head_dim = draw(st.integers(1, 4))
    while n_heads * head_dim < 4:
        head_dim += 1
    E = n_heads * head_dim
    if padded is None:
        padded = draw(st.booleans())
    T = draw(st.integers(2 if padded else 1, 6))
    B = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    x, padding = _block_x(B, T, E, seed, padded)
    if not whole_space:
        return BlockInput(E, n_heads, x, padding)
    rates = draw(st.sampled_from(EVAL_RATES))
    T2 = draw(st.integers(2 if padded else 1, 6).filter(lambda t: t != T))
    x2, padding2 = _block_x(B, T2, E, seed + 2, padded)
    return BlockInput(E, n_heads, x, padding, rates, BlockInput(E, n_heads, x2, padding2, rates))


# The worker's generator is reseeded with RNG_SEED before every forward of the block, so that two
# passes compared with each other draw the same random numbers. The block's own dropouts keep a
# nonzero rate: left on in eval mode, they show when the seed changes.
RNG_SEED = 20_24


def where_block(ctx, handle, ex):
    """Where the block departs from the reference block holding its weights (both with the
    stand-in attention), for a failure's message."""
    build = ("with_stand_ins", ["encoder", "TransformerBlock", [ex.embed_dim, ex.n_heads, 0.0, 0.0],
                                ["attention.MultiHeadAttention"]], {})
    return against_reference(ctx, handle, build, [(ex.x, ex.padding)])


def build_block(ctx, ex, attn_drop=0.0, layer_drop=0.3, mode="eval", stand_in=True):
    """The student's block with its multi-head attention (graded in part mha) replaced by the
    grader's stand-in (graders/sandbox/tasks.py): an attention mistake costs nothing here."""
    handle = ctx.student.construct(MODULE, "TransformerBlock", ex.embed_dim, ex.n_heads, attn_drop, layer_drop)
    if stand_in:
        ctx.student.task("stand_ins", handle, ["attention.MultiHeadAttention"])
    ctx.student.call(handle, mode)
    return handle


def block_forward(ctx, handle, ex, x=None, padding="same", seed=RNG_SEED):
    """The block's (embedding, mask) output; fails with block_drops_mask if it is not a pair."""
    ctx.student.seed(seed)
    x = ex.x if x is None else x
    padding = ex.padding if padding == "same" else padding
    try:
        result = ctx.student.call(handle, "__call__", (x, padding))
    except StudentError as error:
        masked = "None" if padding is None else f"a padding mask of shape {tuple(padding.shape)}"
        # the stand-in replaces the block's MultiHeadAttention; code of the student's attention.py in
        # the traceback ran all the same (an attention kept under another class, or called as functions)
        own_attention = any(path.rsplit("/", 1)[-1] == "attention.py" for path, *_ in _FRAME.findall(error.traceback or ""))
        with_stand_in = ("; the traceback runs through your attention.py, which the block calls itself although its "
                         "MultiHeadAttention is the grader's stand-in here" if own_attention
                         else ", its self_attn the grader's stand-in")
        raise explained(error, f"TransformerBlock(embed_dim={ex.embed_dim}, n_heads={ex.n_heads})((x of shape "
                               f"{tuple(x.shape)}, {masked})){with_stand_in}") from None
    if isinstance(result, torch.Tensor) or not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckFailed(f"the block returned {_kind(result)}, expected a pair (embedding, mask)",
                          diagnosis="block_drops_mask")
    return expect_tensor(result[0], "block output embedding", shape=x.shape), result[1]


def _kind(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return type(value).__name__


BLOCK_SUB_MODULES = ("self_attn", "linear_net", "norm1", "norm2")  # the names the block's docstring gives


class SubModules:
    """The block's own sub-modules, called through the worker."""

    def __init__(self, ctx, handle, names=BLOCK_SUB_MODULES):
        self.ctx = ctx
        self.mods = {name: self._sub_module(handle, name) for name in names}

    def _sub_module(self, handle, name):
        """The block's sub-module `name`, or a failure that lists the sub-modules it has instead."""
        try:
            return self.ctx.student.getattr(handle, name)
        except StudentError as error:
            if error.exc_type != "AttributeError":
                raise
            has = sorted({key.split(".")[0] for key in state_tensors(self.ctx, handle, "TransformerBlock")})
            raise CheckFailed(f"TransformerBlock has no {name}: the checks call its sub-modules by the names its "
                              f"docstring gives ({', '.join(BLOCK_SUB_MODULES)}), and yours has "
                              f"{', '.join(has[:8]) or 'no sub-module with weights'}",
                              diagnosis="block_template_names") from None

    def __call__(self, name, *args):
        out = self.ctx.student.call(self.mods[name], "__call__", *args)
        return expect_tensor(out, f"{name} output")


def wirings(sub, x, padding):
    """Outputs of the right post-LN wiring and of known mistakes, from the block's own sub-modules."""
    attended = sub("self_attn", x, padding)
    out = {"attended": attended}
    h = sub("norm1", x + attended)
    out["right"] = sub("norm2", h + sub("linear_net", h))
    out["missing_residual"] = [
        sub("norm2", sub("norm1", attended) + sub("linear_net", sub("norm1", attended))),
        sub("norm2", sub("linear_net", h)),
        sub("norm2", sub("linear_net", sub("norm1", attended))),
    ]
    x1 = x + sub("self_attn", sub("norm1", x), padding)
    out["pre_ln"] = [x1 + sub("linear_net", sub("norm2", x1))]
    x2 = x + sub("norm1", attended)
    out["residual_outside_norm"] = [x2 + sub("norm2", sub("linear_net", x2))]
    out["ffn_residual_from_input"] = [sub("norm2", x + sub("linear_net", h))]
    h2 = sub("norm2", x + attended)  # told apart from the right wiring by norms of weights of their own
    out["block_norms_swapped"] = [sub("norm1", h2 + sub("linear_net", h2))]
    if padding is not None:
        unmasked = sub("self_attn", x, None)
        h0 = sub("norm1", x + unmasked)
        out["block_ignores_mask"] = [sub("norm2", h0 + sub("linear_net", h0))]
    return out


def diagnose_block(variants, got, rows=None):
    """The one known wiring mistake whose output, computed from the block's own sub-modules, equals
    the block's and differs from the right wiring's on this input; None when none or several do."""
    def pick(t):
        return t if rows is None else t[rows]

    right = pick(variants["right"])
    matching = {diagnosis for diagnosis, outputs in variants.items() if diagnosis not in ("right", "attended")
                for output in outputs
                if is_close(pick(got), pick(output), atol=1e-4) and not is_close(pick(output), right, atol=1e-4)}
    return matching.pop() if len(matching) == 1 else None


GATE_INPUT = (8, 2, (2, 5))  # embed_dim, n_heads, (B, T) of the input the block gate probes


def block_gate(ctx):
    """The block does its job (graders/checks/gates.py), on a block and an input of its own large
    enough that LayerNorm outputs move continuously: in eval mode (worker reseeded before every
    pass), its output is repeatable, not constant, and every position reads the others."""
    E, H, (B, T) = GATE_INPUT
    x, noise = tensors_from(23, (B, T, E), (B, T, E))
    ex = BlockInput(E, H, 3 * x + 1, None)
    handle = build_block(ctx, ex)

    def change_at(inp, t):
        changed = inp.clone()
        changed[:, t] = 3 * noise[:, t] + 1
        return changed

    sequence_gate(lambda inp: block_forward(ctx, handle, ex, x=inp, padding=None)[0], ex.x, change_at,
                  f"outputs of TransformerBlock(embed_dim={E}, n_heads={H}) (eval mode, input of shape {(B, T, E)})")


@check("block.returns_embedding_and_mask", "The block returns (embedding, mask), so blocks chain in nn.Sequential")
def block_returns_pair(ctx):
    @ctx.given(block_inputs())
    def prop(ex):
        handle = build_block(ctx, ex)
        _, mask = block_forward(ctx, handle, ex)
        if ex.padding is None:
            if mask is not None:
                raise CheckFailed(f"the mask passed in was None, the block returned {_kind(mask)}",
                                  diagnosis="block_drops_mask")
        elif not isinstance(mask, torch.Tensor) or not torch.equal(mask.float(), ex.padding):
            raise CheckFailed(f"the block returned {_kind(mask)} as the mask, not the mask it was given",
                              diagnosis="block_drops_mask")

    block_gate(ctx)


@check("block.post_ln", "Post-LN: every output token has mean 0 and standard deviation 1 (default LayerNorm init)")
def block_post_ln(ctx):
    @ctx.given(block_inputs(padded=False))
    def prop(ex):
        if ex.embed_dim < 2:
            return
        handle = build_block(ctx, ex)
        got, _ = block_forward(ctx, handle, ex)
        mean = got.double().mean(-1)
        std = got.double().std(-1, unbiased=False)
        worst_mean = mean.abs().max().item()
        worst_std = (std - 1).abs().max().item()
        if worst_mean > 1e-3 or worst_std > 1e-2:
            variants = wirings(SubModules(ctx, handle), ex.x, None)
            raise CheckFailed(
                f"output tokens have mean up to {worst_mean:.3g} away from 0 and standard deviation up to "
                f"{worst_std:.3g} away from 1: the last operation of the block must be norm2",
                diagnosis=diagnose_block(variants, got),
                details={"numbers": {"max_abs_token_mean": worst_mean, "max_abs_token_std_minus_1": worst_std}},
                locate=lambda: where_block(ctx, handle, ex))

    block_gate(ctx)


def distinct_norms(ctx, handle, ex):
    """norm1 and norm2 given weights and biases of their own, away from LayerNorm's default (ones,
    zeros), so that which norm is applied where shows in the block's output."""
    g = torch.Generator().manual_seed(ex.embed_dim * 1000 + int(ex.x.abs().sum() * 100) % 1000)
    state = state_tensors(ctx, handle, "TransformerBlock")
    chosen = {}
    for name, value in state.items():
        if name.startswith(("norm1.", "norm2.")) and value.is_floating_point():
            draw = torch.rand(value.shape, generator=g, dtype=torch.float64)
            chosen[name] = ((0.5 + draw) if name.endswith("weight") else (draw - 0.5)).to(value.dtype)
    ctx.student.load_state_dict(handle, chosen, strict=False)


@check("block.wiring", "norm2(h + linear_net(h)) with h = norm1(x + self_attn(x, mask)), from the block's own "
       "sub-modules, norm1 and norm2 holding weights of their own; one block on two lengths (eval mode)")
def block_wiring(ctx):
    @ctx.given(block_inputs(whole_space=True))
    def prop(ex):
        handle = build_block(ctx, ex, *ex.rates)
        sub = SubModules(ctx, handle)
        distinct_norms(ctx, handle, ex)
        for each in (ex, ex.again):
            _wired_right(ctx, handle, sub, each)


def _wired_right(ctx, handle, sub, ex):
    got, _ = block_forward(ctx, handle, ex)
    variants = wirings(sub, ex.x, ex.padding)
    if not is_close(got, variants["right"], atol=1e-4):
        diagnosis = diagnose_block(variants, got)
        if diagnosis is None and not torch.equal(got, block_forward(ctx, handle, ex, seed=RNG_SEED + 1)[0]):
            diagnosis = "dropout_in_eval"  # the block's own dropout is active in eval mode
        expect_close(got, variants["right"], "block outputs (eval mode) against its own sub-modules", atol=1e-4,
                     diagnosis=diagnosis, axes=("batch", "position", "feature"),
                     locate=lambda: where_block(ctx, handle, ex))


@check("block.padding", "Outputs at real positions do not change when the content at padded positions changes")
def block_padding(ctx):
    @ctx.given(block_inputs(padded=True))
    def prop(ex):
        handle = build_block(ctx, ex)
        got, _ = block_forward(ctx, handle, ex)
        (noise,) = tensors_from(11, ex.x.shape)
        padded = ex.padding.bool()[:, :, None]
        changed, _ = block_forward(ctx, handle, ex, x=torch.where(padded, 10 * noise, ex.x))
        real = ~padded.expand_as(got)
        if not torch.allclose(got[real], changed[real], atol=1e-5, equal_nan=True):
            variants = wirings(SubModules(ctx, handle), ex.x, ex.padding)
            diagnosis = "block_ignores_mask" if diagnose_block(variants, got) == "block_ignores_mask" else None
            moved = (got - changed).abs().amax(-1) > 1e-5  # (B, T): the positions whose output moved
            rows = ", ".join(f"sequence {b}: positions {moved[b].nonzero().flatten().tolist()}"
                             for b in range(moved.size(0)) if moved[b].any())
            raise CheckFailed(f"changing the embeddings at padded positions changed the outputs at real positions "
                              f"({rows}; padded: {ex.padding.int().tolist()})", diagnosis=diagnosis,
                              locate=lambda: where_block(ctx, handle, ex))

    block_gate(ctx)


@check("block.dropout", "In training mode the block applies dropout at layer_drop_rate, linear_net's own Dropout included")
def block_dropout(ctx):
    (x,) = tensors_from(ctx.seed, (2, 8, 16))
    ex = BlockInput(16, 4, x, None)
    handle = build_block(ctx, ex, attn_drop=0.0, layer_drop=0.9, mode="train")
    first, _ = block_forward(ctx, handle, ex, seed=ctx.seed)  # the block's own output first: is there one
    # linear_net alone, in training mode: the Dropout its docstring lists drops at 0.9, so its
    # output under two seeds differs (the attention branch's dropout is block.attention_dropout's)
    net = SubModules(ctx, handle, ["linear_net"]).mods["linear_net"]
    ctx.student.seed(ctx.seed)
    once = expect_tensor(ctx.student.call(net, "__call__", x), "linear_net output", shape=x.shape)
    ctx.student.seed(ctx.seed + 1)
    again = expect_tensor(ctx.student.call(net, "__call__", x), "linear_net output", shape=x.shape)
    if torch.equal(once, again):
        swapped = _linear_net_drops(ctx, BlockInput(16, 4, x, None), attn_drop=0.9, layer_drop=0.0)
        raise CheckFailed("with layer_drop_rate=0.9 two training-mode calls of linear_net under different seeds agree: "
                          "linear_net applies no dropout"
                          + (" at layer_drop_rate, though it does at attn_drop_rate=0.9" if swapped else ""),
                          diagnosis="block_rate_misplaced" if swapped else "ffn_no_dropout")
    second, _ = block_forward(ctx, handle, ex, seed=ctx.seed + 1)
    if torch.equal(first, second):
        raise CheckFailed("with layer_drop_rate=0.9 two training-mode passes agree, although linear_net alone drops "
                          "out: the block's output does not go through linear_net's dropout")
    block_gate(ctx)


def wired_right_in_eval(ctx, handle, ex):
    """Whether the block, put in eval mode for the question, gives the right wiring of its own
    sub-modules on ex.x: the dropout checks judge the rates of a block wired right (its mode is
    given back)."""
    ctx.student.call(handle, "eval")
    try:
        wired = is_close(block_forward(ctx, handle, ex)[0], wirings(SubModules(ctx, handle), ex.x, None)["right"],
                         atol=1e-4)
    finally:
        ctx.student.call(handle, "train")
    return wired


def _linear_net_drops(ctx, ex, attn_drop, layer_drop):
    """Whether linear_net of a block built with these rates, in training mode, drops out (two seeds differ)."""
    handle = build_block(ctx, ex, attn_drop=attn_drop, layer_drop=layer_drop, mode="train")
    net = SubModules(ctx, handle, ["linear_net"]).mods["linear_net"]
    outputs = []
    for salt in (0, 1):
        ctx.student.seed(ctx.seed + salt)
        outputs.append(ctx.student.call(net, "__call__", ex.x))
    return all(type(o) is torch.Tensor for o in outputs) and not torch.equal(*outputs)


def _attention_output_drops(ctx, ex, attn_drop, layer_drop):
    """Whether a block built with these rates drops out its attention's output in training mode:
    linear_net's weights zero, two passes under different seeds differ."""
    handle = build_block(ctx, ex, attn_drop=attn_drop, layer_drop=layer_drop, mode="train")
    state = state_tensors(ctx, handle, "TransformerBlock")
    ctx.student.load_state_dict(handle, {name: torch.zeros_like(t) for name, t in state.items()
                                         if name.startswith("linear_net.") and t.is_floating_point()}, strict=False)
    first, _ = block_forward(ctx, handle, ex, seed=ctx.seed)
    second, _ = block_forward(ctx, handle, ex, seed=ctx.seed + 1)
    return not torch.equal(first, second)


@check("block.attention_dropout", "In training mode the attention's output is dropped out before the residual: norm1(x + dropout(self_attn(x)))")
def block_attention_dropout(ctx):
    # linear_net's weights are zeroed, so that only a dropout on the attention branch can make two
    # training-mode passes with different seeds differ.
    (x,) = tensors_from(ctx.seed, (2, 8, 16))
    ex = BlockInput(16, 4, 3 * x + 1, None)
    handle = build_block(ctx, ex, attn_drop=0.0, layer_drop=0.9, mode="train")
    if not wired_right_in_eval(ctx, handle, ex):
        block_gate(ctx)
        return None  # what the attention's dropout does cannot be told through a wiring block.wiring charges
    state = state_tensors(ctx, handle, "TransformerBlock")
    ctx.student.load_state_dict(handle, {name: torch.zeros_like(t) for name, t in state.items()
                                         if name.startswith("linear_net.") and t.is_floating_point()}, strict=False)
    first, _ = block_forward(ctx, handle, ex, seed=ctx.seed)
    second, _ = block_forward(ctx, handle, ex, seed=ctx.seed + 1)
    if torch.equal(first, second) and torch.equal(first, first[:1, :1].expand_as(first)):
        ctx.student.call(handle, "eval")
        evaluated, _ = block_forward(ctx, handle, ex)
        seen = diagnose_block(wirings(SubModules(ctx, handle), ex.x, None), evaluated) == "missing_residual"
        raise CheckFailed("with linear_net's weights zero the block's output is the same at every position, so whether "
                          "the attention's output is dropped out cannot show"
                          + (": the feed-forward sub-layer's input h is not added back before norm2" if seen else ""),
                          diagnosis="missing_residual" if seen else None)
    if torch.equal(first, second):
        swapped = _attention_output_drops(ctx, ex, attn_drop=0.9, layer_drop=0.0)
        raise CheckFailed("with layer_drop_rate=0.9 and linear_net's weights zero, two training-mode passes agree: the "
                          "attention's output is not dropped out"
                          + (" at layer_drop_rate, though it is at attn_drop_rate=0.9" if swapped else ""),
                          diagnosis="block_rate_misplaced" if swapped else "block_no_dropout")
    block_gate(ctx)


def _through_dropping_attention(ctx, handle, x, seed, training=True):
    """One pass of the student's module (its own MultiHeadAttention inside) with the grader's
    scaled_dot_product, which drops out at whatever rate it is given, in place of the student's;
    None where the module's output cannot be read."""
    outputs = ctx.student.task("bert.mha_with_dropping_attention", handle, x, training=training, passes=1, seed=seed)
    if not (isinstance(outputs, list) and len(outputs) == 1):
        return None
    out = outputs[0][0] if isinstance(outputs[0], (tuple, list)) and outputs[0] else outputs[0]
    return out if type(out) is torch.Tensor else None


RATES_CALL = "TransformerBlock(embed_dim=8, n_heads=2, attn_drop_rate={}, layer_drop_rate={}) in training mode"


@check("block.dropout_rates", "In training mode each rate drops where the docstring says: attn_drop_rate inside "
       "self_attn, layer_drop_rate on the attention's output and in linear_net")
def block_dropout_rates(ctx):
    # Rates of 0 and 1 make dropout exact: what drops at 1 is zero, what drops at 0 is whole.
    block_gate(ctx)  # a block that does not do its job earns nothing here, though the returns below pass
    (x,) = tensors_from(ctx.seed, (2, 6, 8))
    ex = BlockInput(8, 2, 3 * x + 1, None)

    def trained(attn, layer, stand_in=True):
        handle = build_block(ctx, ex, attn, layer, mode="train", stand_in=stand_in)
        distinct_norms(ctx, handle, ex)
        return handle, SubModules(ctx, handle, ["norm1", "linear_net", "norm2"])

    def dropped_whole(sub):  # the attention's output and linear_net's both zero
        return sub("norm2", sub("norm1", ex.x))

    # The stand-in attention never drops: only the block's own dropouts can.
    layer_only, sub = trained(0.0, 1.0)
    if not wired_right_in_eval(ctx, layer_only, ex):
        return None  # the wiring is block.wiring's to charge
    got_layer = block_forward(ctx, layer_only, ex)[0]
    attn_only, _ = trained(1.0, 0.0)
    got_attn = block_forward(ctx, attn_only, ex)[0]
    ctx.student.call(attn_only, "eval")
    eval_attn = block_forward(ctx, attn_only, ex)[0]
    if not is_close(got_layer, dropped_whole(sub), atol=1e-4):
        if not (_linear_net_drops(ctx, ex, 0.0, 0.9) and _attention_output_drops(ctx, ex, 0.0, 0.9)):
            return None  # a dropout missing, or acting at the other rate: block.dropout and attention_dropout charge it
        raise CheckFailed(f"{RATES_CALL.format(0.0, 1.0)}, its self_attn the grader's stand-in: the attention's output and "
                          "linear_net's are dropped whole at rate 1, so the output must be norm2(norm1(x)); it is not",
                          details={"numbers": {"max_abs_error": (got_layer - dropped_whole(sub)).abs().max().item()}})
    if not is_close(got_attn, eval_attn, atol=1e-4):
        raise CheckFailed(f"{RATES_CALL.format(1.0, 0.0)}, its self_attn the grader's stand-in (which never drops): at "
                          "layer_drop_rate=0 nothing of the block may drop, so training and eval mode must agree; they "
                          "do not")
    # attn_drop_rate reaches self_attn: with the grader's scaled_dot_product inside the student's own
    # MultiHeadAttention, rate 1 drops every weight, and self_attn returns its o_proj's bias.
    bias = torch.linspace(-1, 1, 8)
    alone = ctx.student.construct("attention", "MultiHeadAttention", 8, 2, 1.0)
    if "o_proj.bias" not in state_tensors(ctx, alone, "MultiHeadAttention"):
        return None  # the template's names are charged in part mha
    ctx.student.load_state_dict(alone, {"o_proj.bias": bias}, strict=False)
    try:
        by_itself = _through_dropping_attention(ctx, alone, ex.x, ctx.seed)
    except StudentError:
        return None  # the module raises by itself: charged in part mha
    if by_itself is None or not is_close(by_itself, bias.expand_as(ex.x)):
        return None  # its own handling of the rate is wrong: charged in part mha
    own, sub = trained(1.0, 0.0, stand_in=False)
    ctx.student.load_state_dict(own, {"self_attn.o_proj.bias": bias}, strict=False)
    got = _through_dropping_attention(ctx, own, (ex.x, None), ctx.seed)
    h = sub("norm1", ex.x + bias)
    expected = sub("norm2", h + sub("linear_net", h))  # linear_net in training mode at rate 0: whole
    if got is None or not is_close(got, expected, atol=1e-4):
        kept = _through_dropping_attention(ctx, own, (ex.x, None), ctx.seed, training=False)
        undropped = got is not None and kept is not None and is_close(got, kept, atol=1e-4)
        raise CheckFailed(f"{RATES_CALL.format(1.0, 0.0)}, with the grader's scaled_dot_product inside your own "
                          "MultiHeadAttention (which, built alone with attn_drop_rate=1, returns its o_proj's bias): the "
                          "block's output is not that of a self_attn built with attn_drop_rate"
                          + ("; it is the block's output without any dropout" if undropped else ""),
                          diagnosis="block_attention_rate_not_passed" if undropped else None)
    return None


def _linear_layers(state, embed_dim):
    """[(weight, bias)] of the Linear layers in linear_net's state, in order: exactly two, E -> F -> E."""
    layers = [(t, state.get(name[: -len("weight")] + "bias")) for name, t in state.items()
              if name.endswith("weight") and t.dim() == 2]
    shapes = [tuple(w.shape) for w, _ in layers]
    if len(layers) != 2 or shapes[0][1] != embed_dim or shapes[1] != (embed_dim, shapes[0][0]):
        raise CheckFailed(f"linear_net must be Linear(E, F), GELU, Linear(F, E), Dropout with E={embed_dim}; its "
                          f"state_dict holds weight matrices of shapes {shapes}", diagnosis="ffn_structure")
    return layers


@check("block.feed_forward", "linear_net is Linear, GELU, Linear, Dropout: W2 gelu(W1 h + b1) + b2 in eval mode")
def block_feed_forward(ctx):
    @ctx.given(block_inputs(padded=False))
    def prop(ex):
        handle = build_block(ctx, ex)
        net = ctx.student.getattr(handle, "linear_net")
        (w1, b1), (w2, b2) = _linear_layers(state_tensors(ctx, net, "linear_net"), ex.embed_dim)
        got = expect_tensor(ctx.student.call(net, "__call__", ex.x), "linear_net output", shape=ex.x.shape)

        def through(activation):
            hidden = ex.x.double() @ w1.double().T + (0 if b1 is None else b1.double())
            return activation(hidden) @ w2.double().T + (0 if b2 is None else b2.double())

        accepted = [through(torch.nn.functional.gelu),
                    through(lambda t: torch.nn.functional.gelu(t, approximate="tanh"))]  # both are GELU
        if any(is_close(got, out.to(got.dtype), atol=1e-4) for out in accepted):
            return
        mistakes = {"ffn_activation": [through(torch.relu), through(lambda t: t)]}
        diagnosis = next((name for name, outs in mistakes.items()
                          if any(is_close(got, out.to(got.dtype), atol=1e-4) for out in outs)), None)
        expect_close(got, accepted[0].to(got.dtype), "linear_net outputs (eval mode) against its own Linear weights",
                     atol=1e-4, diagnosis=diagnosis)

    block_gate(ctx)


@check("block.separate_norms", "norm1 and norm2 are two LayerNorms with weights of their own")
def block_separate_norms(ctx):
    @ctx.given(st.integers(1, 4), st.integers(1, 4))
    def prop(n_heads, head_dim):
        ex = BlockInput(n_heads * head_dim, n_heads, None, None)
        handle = build_block(ctx, ex)
        SubModules(ctx, handle, ["norm1", "norm2"])  # norms under other names are said as such
        state = state_tensors(ctx, handle, "TransformerBlock")
        # every entry gets its own values, loaded and read back: a shared LayerNorm keeps one set only
        shared = [name for name in shared_entries(ctx, handle, state, ctx.seed) if name.startswith(("norm1.", "norm2."))]
        if shared:
            raise CheckFailed(f"TransformerBlock(embed_dim={ex.embed_dim}, n_heads={n_heads}): norm1 and norm2 share "
                              f"their weights (values loaded into {', '.join(shared)} read back as the other's)",
                              diagnosis="block_shared_norm")
        without = [name for name in ("norm1", "norm2") if not any(key.startswith(name + ".") for key in state)]
        if without:
            raise CheckFailed(f"TransformerBlock(embed_dim={ex.embed_dim}, n_heads={n_heads}): {' and '.join(without)} "
                              "hold no weights (a LayerNorm has a weight and a bias)")

    block_gate(ctx)

