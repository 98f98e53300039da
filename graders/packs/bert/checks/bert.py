"""Checks for the BERT model, BERT's masking and the pre-training step (seed 004, parts 5 and 6).

Masking is random, so its checks are statistical: every one draws its batch from the grading seed
(the same seed gives the same batch and seeds the worker's generator), uses batches large enough
that a right solution lies well inside the bounds, and bounds every proportion by 5 binomial
standard deviations (a right solution fails one such bound with probability below 1e-6).
Failures carry details["proportions"] for the report.

The pre-training step is called like any student function, on a stand-in model whose predictions
are perfect on every token it sees unchanged and a plain SGD optimizer (harness builders
`bert.probe_model` and `optimizer`). The grader re-seeds the worker and calls mask_inputs itself to
get the masked batch the step will draw, so it computes the right loss and the right SGD update
of the stand-in's one weight here, and compares them with the loss the step returns and the
weight read back: nothing the worker measures about the step is scored.
"""

import dataclasses
import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from graders.checks.compare import expect_close, expect_tensor, is_close
from graders.checks.framework import CheckFailed, check
from graders.checks.gates import sequence_gate
from graders.checks.localise import against_reference
from graders.checks.weights import distinct_values, state_shapes, state_tensors
from graders.sandbox import StudentError
from .encoder import BlockInput, distinct_norms

MODULE = "bert"
IGNORE = -100
SIGMAS = 5.0


def binomial_bounds(p, n, sigmas=SIGMAS):
    sigma = math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))
    return p - sigmas * sigma, p + sigmas * sigma


def proportion(name, value, target, n, sigmas=SIGMAS):
    low, high = binomial_bounds(target, n, sigmas)
    return {"name": name, "value": value, "target": target, "low": low, "high": high}


def outside(row):
    return not row["low"] <= row["value"] <= row["high"]


# ---------------------------------------------------------------- the model


@dataclass
class BertInput:
    n_layers: int
    vocab_size: int
    embed_dim: int
    n_heads: int
    text: torch.Tensor  # (B, T) ids in [1, V)
    padding: torch.Tensor | None  # (B, T) bool, True at padding; position 0 always real

    def __repr__(self):
        padding = None if self.padding is None else self.padding.int().tolist()
        return (f"BertModel(n_layers={self.n_layers}, vocab_size={self.vocab_size}, embed_dim={self.embed_dim}, "
                f"n_heads={self.n_heads}) on text {self.text.tolist()}, padding mask {padding}")


@st.composite
def bert_inputs(draw, *, padded=False):
    # Even embed_dim (4 to 8): whatever the positional encoding does with odd sizes is graded in
    # part positional_encoding, not here; LayerNorm over 2 features would only give signs.
    n_heads = draw(st.integers(1, 2))
    E = 2 * draw(st.integers(2, 4))
    V = draw(st.integers(3, 30))
    n_layers = draw(st.integers(2, 3))  # several layers: what is wrong only across layers shows
    T = draw(st.integers(2 if padded else 1, 6))
    B = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(1, V, (B, T), generator=g)
    padding = None
    if padded:
        rest = torch.rand(B, T - 1, generator=g) < 0.5
        rest[0, -1] = True
        padding = torch.cat([torch.zeros(B, 1, dtype=torch.bool), rest], dim=1)
        text = text.masked_fill(padding, 0)
    return BertInput(n_layers, V, E, n_heads, text, padding)


@dataclass
class BertSpaceInput:
    """BertModel's whole space: a model (rates eval mode must ignore, any width and depth) and two
    texts of different lengths for it, holding the <mask> id."""

    n_layers: int
    vocab_size: int
    embed_dim: int
    n_heads: int
    rates: tuple  # (attn_drop_rate, layer_drop_rate), never equal
    inputs: list  # [(text (B, T), padding (B, T) bool or None)] * 2, the second of another length

    @property
    def args(self):
        return [self.n_layers, self.vocab_size, self.embed_dim, self.n_heads, *self.rates]

    def __repr__(self):
        texts = "; then ".join(f"text {t.tolist()}, padding mask {None if m is None else m.int().tolist()}"
                               for t, m in self.inputs)
        return (f"BertModel(n_layers={self.n_layers}, vocab_size={self.vocab_size}, embed_dim={self.embed_dim}, "
                f"n_heads={self.n_heads}, attn_drop_rate={self.rates[0]}, layer_drop_rate={self.rates[1]}) in eval mode "
                f"on {texts}")


def _bert_text(B, T, V, g, padded):
    text = torch.randint(1, V + 1, (B, T), generator=g)  # ids up to V: the <mask> token among them
    text[0, 0] = V
    padding = None
    if padded and T > 1:
        rest = torch.rand(B, T - 1, generator=g) < 0.5
        rest[0, -1] = True
        padding = torch.cat([torch.zeros(B, 1, dtype=torch.bool), rest], dim=1)
        text = text.masked_fill(padding, 0)
    return text, padding


@st.composite
def bert_space(draw):
    # Even widths: what the positional encoding (built when the model is) does with odd ones is
    # part positional_encoding's.
    n_heads = draw(st.integers(1, 2))
    E = 2 * n_heads * draw(st.integers(1, 3))
    V = draw(st.integers(3, 30))
    n_layers = draw(st.integers(1, 3))
    rates = draw(st.sampled_from(((0.1, 0.3), (0.5, 0.0), (0.0, 0.9))))
    B = draw(st.integers(1, 3))
    lengths = [draw(st.integers(1, 6)) for _ in range(2)]
    if lengths[0] == lengths[1]:
        lengths[1] += 1
    padded = draw(st.booleans())
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    return BertSpaceInput(n_layers, V, E, n_heads, rates, [_bert_text(B, T, V, g, padded) for T in lengths])


# The modules of other parts BertModel is built from: graded there, replaced here by the grader's
# stand-ins (graders/sandbox/tasks.py), so that their mistakes cost nothing in part bert.
OTHER_PARTS = ["encoder.TransformerBlock", "encoder.PositionalEncoding", "attention.MultiHeadAttention"]


def build_bert(ctx, ex, drop=0.1, mode="eval"):
    handle = ctx.student.construct(MODULE, "BertModel", ex.n_layers, ex.vocab_size, ex.embed_dim, ex.n_heads, drop, drop)
    ctx.student.task("stand_ins", handle, OTHER_PARTS)
    ctx.student.call(handle, mode)
    return handle


def where_bert(ctx, handle, ex):
    """Where the model departs from the reference model holding its weights (both with the
    stand-ins for the other parts' modules), for a failure's message."""
    build = ("with_stand_ins", ["bert", "BertModel", [ex.n_layers, ex.vocab_size, ex.embed_dim, ex.n_heads, 0.0, 0.0],
                                OTHER_PARTS], {})
    return against_reference(ctx, handle, build, [ex.text, ex.padding])


def bert_forward(ctx, handle, ex, text=None, padding="same", seed=None):
    """seed: reseed the worker first, so that an attention left dropping out in eval mode (graded
    in part mha) draws the same masks in two passes that are compared."""
    if seed is not None:
        ctx.student.seed(seed)
    text = ex.text if text is None else text
    padding = ex.padding if isinstance(padding, str) else padding
    B, T = text.shape
    out = ctx.student.call(handle, "__call__", text, padding)
    # logits over vocab_size + 1 classes, or the hidden states without mask_pred
    wrong_width = (type(out) is torch.Tensor and tuple(out.shape[:-1]) == (B, T)
                   and out.size(-1) in (ex.vocab_size + 1, ex.embed_dim) and out.size(-1) != ex.vocab_size)
    return expect_tensor(out, "BertModel output", shape=(B, T, ex.vocab_size),
                         diagnosis="bert_output_size" if wrong_width else None)


GATE_MODEL = dict(n_layers=2, vocab_size=20, embed_dim=8, n_heads=2)  # what bert_gate probes, on (2, 6) text


def bert_gate(ctx):
    """The model does its job (graders/checks/gates.py), on a BertModel and text of the gate's own:
    in eval mode (worker reseeded before every pass), its logits are repeatable, not constant, and
    every position reads the others."""
    V = GATE_MODEL["vocab_size"]
    text = torch.randint(1, V, (2, 6), generator=torch.Generator().manual_seed(29))
    ex = BertInput(GATE_MODEL["n_layers"], V, GATE_MODEL["embed_dim"], GATE_MODEL["n_heads"], text, None)
    handle = build_bert(ctx, ex)

    def change_at(t, position):
        changed = t.clone()
        changed[:, position] = t[:, position] % (V - 1) + 1  # another id in [1, V)
        return changed

    sequence_gate(lambda t: bert_forward(ctx, handle, ex, text=t, seed=ctx.seed), text, change_at,
                  f"logits of BertModel({', '.join(f'{k}={v}' for k, v in GATE_MODEL.items())}) (eval mode, "
                  f"text of shape {tuple(text.shape)})")


def _reference_names(state, V, E):
    """{the reference's name: the student's} for a BertModel whose other parts' modules are the
    stand-ins (which hold nothing): its embedding (V + 1, E) and mask_pred (V, E) and (V,), found by
    shape; None when the student's model holds other entries or lacks one (the message says). An
    embedding of V rows under the template's name is taken too: its missing <mask> row is
    bert.mask_embedding's to charge."""
    wanted = {"embed.weight": (V + 1, E), "mask_pred.weight": (V, E), "mask_pred.bias": (V,)}
    if "embed.weight" in state and tuple(state["embed.weight"].shape) == (V, E):
        wanted["embed.weight"] = (V, E)
    found = {}
    for name, shape in wanted.items():
        matching = [n for n, t in state.items() if tuple(t.shape) == shape and n not in found.values()]
        chosen = name if name in matching else matching[0] if len(matching) == 1 else None
        if chosen is None:
            return None
        found[name] = chosen
    return found if set(found.values()) == set(state) else None


class NotComparable(CheckFailed):
    """The model's weights cannot be given to the reference (the message says why)."""


def _model_with_stand_ins(ctx, args, seed):
    """The student's BertModel(*args) in eval mode, its other parts' modules the grader's stand-ins,
    holding weights of the grader's: (handle, the weights under the reference's names)."""
    V, E = args[1], args[2]
    handle = ctx.student.construct(MODULE, "BertModel", *args)
    ctx.student.task("stand_ins", handle, OTHER_PARTS)
    ctx.student.call(handle, "eval")
    state = state_tensors(ctx, handle, "BertModel")
    names = _reference_names(state, V, E)
    if names is None:
        shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in sorted(state.items())[:8])
        raise NotComparable(f"with the grader's stand-ins for the blocks and the positional encoding (which hold no "
                          f"weights), BertModel should hold its embedding ({V + 1}, {E}) and mask_pred ({V}, {E}) with "
                          f"its bias ({V},) only; it holds {shapes or 'nothing'}")
    weights = distinct_values({ours: state[theirs] for ours, theirs in names.items()}, seed)
    weights = {name: value - 1.0 for name, value in weights.items()}  # centred: logits of both signs
    ctx.student.load_state_dict(handle, {names[ours]: value for ours, value in weights.items()}, strict=False)
    if weights["embed.weight"].size(0) == V:  # no <mask> row: the reference's gets one it never reads
        weights["embed.weight"] = torch.cat([weights["embed.weight"], torch.zeros(1, E)])
        return handle, weights, False
    return handle, weights, True


def _logits_with_stand_ins(ctx, args, handle, weights, text, padding):
    """(the student's logits, the reference's) of a model of _model_with_stand_ins."""
    expected = ctx.oracle.call("forward_with_stand_ins", MODULE, "BertModel", [*args[:4], 0.0, 0.0], OTHER_PARTS,
                               weights, [text, padding])
    got = bert_forward(ctx, handle, BertInput(*args[:4], text, padding), seed=ctx.seed)
    return got, expected


@check("bert.matches_reference", "BertModel's logits match the reference under the same weights, its blocks and "
       "positional encoding the grader's stand-ins: every depth, with and without padding, the <mask> id, one model "
       "on two lengths (eval mode)")
def bert_matches_reference(ctx):
    @ctx.given(bert_space())
    def prop(ex):
        handle, weights, mask_row = _model_with_stand_ins(ctx, ex.args, ctx.seed)
        for text, padding in ex.inputs:
            if not mask_row:  # an embedding without the <mask> row is bert.mask_embedding's to charge
                text = text.masked_fill(text == ex.vocab_size, 1)
            got, expected = _logits_with_stand_ins(ctx, ex.args, handle, weights, text, padding)
            if not is_close(got, expected, atol=1e-4):
                if not _adds_a_block_per_layer(ctx, *ex.args[1:4]):
                    return  # the number of blocks is wrong: bert.layers charges it
                single = BertInput(*ex.args[:4], text, padding)
                expect_close(got, expected, "BertModel logits (eval mode, the grader's stand-ins for its blocks and "
                             "positional encoding)", atol=1e-4, axes=("batch", "position", "token"),
                             locate=lambda single=single: where_bert(ctx, handle, single))

    bert_gate(ctx)


RATES_MODEL = dict(n_layers=2, vocab_size=12, embed_dim=8, n_heads=2)


def _norm_chain(state, x):
    """x through every block's norm1 then norm2, in layer order, under the weights in `state`: a
    block whose attention's and linear_net's outputs are both dropped whole is norm2(norm1(x))."""
    layers = sorted({_layer_index(name) for name in state if name.endswith(("norm1.weight", "norm2.weight"))
                     and _layer_index(name) is not None}, key=int)
    for layer in layers:
        for norm in ("norm1", "norm2"):
            prefix = next(name[: -len("weight")] for name in state if _layer_index(name) == layer
                          and name.endswith(f"{norm}.weight"))
            x = F.layer_norm(x, x.shape[-1:], state[prefix + "weight"].double(), state[prefix + "bias"].double())
    return x, len(layers)


@check("bert.dropout_rates", "In training mode BertModel's rates reach where the docstring says: layer_drop_rate in the "
       "positional encoding and the blocks' dropouts, attn_drop_rate in the blocks' attention")
def bert_dropout_rates(ctx):
    # Rates of 0 and 1 make dropout exact. At attn_drop_rate=0, layer_drop_rate=1 the positional encoding
    # drops everything, and each block, its attention the grader's stand-in, is norm2(norm1(x)).
    bert_gate(ctx)  # a model that does not do its job earns nothing here, though the returns below pass
    V, E, H, L = (RATES_MODEL[k] for k in ("vocab_size", "embed_dim", "n_heads", "n_layers"))
    text = torch.randint(1, V, (2, 5), generator=torch.Generator().manual_seed(ctx.seed))
    if not _other_parts_exact_at_rates(ctx, E, H):
        return None  # the positional encoding's or the block's own rates are wrong: charged in their parts
    wired = [L, V, E, H, 0.0, 1.0]
    try:
        wired_handle, weights, _ = _model_with_stand_ins(ctx, wired, ctx.seed)
    except NotComparable:
        return None  # charged in bert.matches_reference
    if not is_close(*_logits_with_stand_ins(ctx, wired, wired_handle, weights, text, None), atol=1e-4):
        return None  # its eval-mode wiring is wrong: charged in bert.matches_reference
    handle = ctx.student.construct(MODULE, "BertModel", L, V, E, H, 0.0, 1.0)
    ctx.student.task("stand_ins", handle, ["attention.MultiHeadAttention"])
    state = state_tensors(ctx, handle, "BertModel")
    norms = {name: value for name, value in distinct_values(state, ctx.seed).items()
             if name.endswith(("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"))}
    ctx.student.load_state_dict(handle, norms, strict=False)
    state = state_tensors(ctx, handle, "BertModel")
    chain, layers = _norm_chain(state, torch.zeros(2, 5, E, dtype=torch.float64))
    weight, bias = state.get("mask_pred.weight"), state.get("mask_pred.bias")
    if layers != L or weight is None or tuple(weight.shape) != (V, E):
        return None  # blocks or mask_pred not found by the template's names: bert.matches_reference says
    expected = chain @ weight.double().T + (0 if bias is None else bias.double())
    ctx.student.call(handle, "train")
    got = bert_forward(ctx, handle, BertInput(L, V, E, H, text, None), padding=None, seed=ctx.seed)
    if not is_close(got, expected.to(got.dtype), atol=1e-4):
        raise CheckFailed(f"BertModel(n_layers={L}, vocab_size={V}, embed_dim={E}, n_heads={H}, attn_drop_rate=0.0, "
                          "layer_drop_rate=1.0) in training mode, its blocks' attention the grader's stand-in: the "
                          "positional encoding drops everything at rate 1 and every block is then norm2(norm1(x)), so the "
                          "logits are mask_pred of the norms' chain on zeros; they are not: the rates do not reach the "
                          "positional encoding and the blocks as the docstring says", diagnosis="bert_rates_misplaced",
                          details={"numbers": {"max_abs_error": (got.double() - expected).abs().max().item()}})


def _other_parts_exact_at_rates(ctx, E, H):
    """The student's PositionalEncoding(E, 1.0) drops everything in training mode, and its
    TransformerBlock(E, H, 0.0, 1.0), its attention the stand-in, is norm2(norm1(x)): what
    bert.dropout_rates relies on (each is graded in its own part)."""
    x = torch.randn(2, 5, E, generator=torch.Generator().manual_seed(ctx.seed + 1))
    positions = ctx.student.construct("encoder", "PositionalEncoding", E, 1.0)
    ctx.student.call(positions, "train")
    try:
        dropped = ctx.student.call(positions, "__call__", x)
        block = ctx.student.construct("encoder", "TransformerBlock", E, H, 0.0, 1.0)
        ctx.student.task("stand_ins", block, ["attention.MultiHeadAttention"])
        distinct_norms(ctx, block, BlockInput(E, H, x, None))  # else norm2(norm1(x)) is norm2(x)
        ctx.student.call(block, "train")
        out = ctx.student.call(block, "__call__", (x, None))
        norm1, norm2 = (ctx.student.getattr(block, name) for name in ("norm1", "norm2"))
        chain = ctx.student.call(norm2, "__call__", ctx.student.call(norm1, "__call__", x))
    except StudentError:
        return False
    out = out[0] if isinstance(out, (tuple, list)) and out else None
    return (type(dropped) is torch.Tensor and bool((dropped == 0).all()) and type(out) is torch.Tensor
            and type(chain) is torch.Tensor and is_close(out, chain, atol=1e-4))


@check("bert.mask_embedding", "The embedding has vocab_size + 1 rows: the <mask> token (id vocab_size) can be embedded")
def bert_mask_embedding(ctx):
    @ctx.given(bert_inputs())
    def prop(ex):
        V, E = ex.vocab_size, ex.embed_dim
        handle = build_bert(ctx, ex)
        shapes = list(state_shapes(ctx, handle, "BertModel").values())
        if (V + 1, E) not in shapes:
            rows = sorted({s[0] for s in shapes if len(s) == 2 and s[1] == E and s[0] >= V - 1})
            raise CheckFailed(f"vocab_size={V}, embed_dim={E}: no ({V + 1}, {E}) embedding among the parameters "
                              f"(found tables with {rows} rows)", diagnosis="bert_no_mask_embedding")
        text = ex.text.clone()
        text[0, 0] = V  # the <mask> token
        try:
            bert_forward(ctx, handle, ex, text=text)
        except StudentError as error:
            raise CheckFailed(f"the model raised {error.exc_type} on text holding the <mask> id {V}: {error.message}",
                              diagnosis="bert_no_mask_embedding") from None

    bert_gate(ctx)


@check("bert.output_shape", "BertModel returns (B, T, vocab_size) logits, with and without a padding mask")
def bert_output_shape(ctx):
    @ctx.given(st.booleans().flatmap(lambda padded: bert_inputs(padded=padded)))
    def prop(ex):
        handle = build_bert(ctx, ex)
        bert_forward(ctx, handle, ex)

    bert_gate(ctx)


@check("bert.mask_passed", "With a padding mask, predictions at real positions ignore the padded tokens")
def bert_mask_passed(ctx):
    @ctx.given(bert_inputs(padded=True))
    def prop(ex):
        handle = build_bert(ctx, ex)
        got = bert_forward(ctx, handle, ex, seed=ctx.seed)
        g = torch.Generator().manual_seed(int(ex.text.sum()))
        other = torch.randint(1, ex.vocab_size, ex.text.shape, generator=g)
        changed_text = torch.where(ex.padding, other, ex.text)
        changed = bert_forward(ctx, handle, ex, text=changed_text, seed=ctx.seed)
        real = ~ex.padding
        if not torch.allclose(got[real], changed[real], atol=1e-5, equal_nan=True):
            unmasked = bert_forward(ctx, handle, ex, padding=None, seed=ctx.seed)
            # a model that reads 1 as "attend" ignores the padding when given the mask inverted
            inverted = [bert_forward(ctx, handle, ex, text=t, padding=~ex.padding, seed=ctx.seed)
                        for t in (ex.text, changed_text)]
            diagnosis = ("bert_mask_not_passed" if torch.allclose(got, unmasked, atol=1e-6)
                         else "mask_inverted" if torch.allclose(inverted[0][real], inverted[1][real], atol=1e-5)
                         else None)
            raise CheckFailed("changing the tokens at padded positions changed the predictions at real positions",
                              diagnosis=diagnosis,
                              details={"numbers": {"max_change": (got[real] - changed[real]).abs().max().item()}},
                              locate=lambda: where_bert(ctx, handle, ex))

    bert_gate(ctx)


@check("bert.eval_deterministic", "In eval mode two forward passes agree (no dropout)")
def bert_eval_deterministic(ctx):
    @ctx.given(bert_inputs())
    def prop(ex):
        handle = build_bert(ctx, ex, drop=0.5)
        first = bert_forward(ctx, handle, ex)
        second = bert_forward(ctx, handle, ex)
        if not torch.equal(first, second):
            raise CheckFailed("two eval-mode forward passes on the same text differ", diagnosis="dropout_in_eval",
                              locate=lambda: where_bert(ctx, handle, ex))

    bert_gate(ctx)


@check("bert.positions_matter", "BERT adds the positional encoding: reordering the tokens does not just reorder the predictions")
def bert_positions_matter(ctx):
    @ctx.given(bert_inputs(padded=False))
    def prop(ex):
        T = ex.text.size(1)
        if T < 2:
            return
        handle = build_bert(ctx, ex)
        order = torch.arange(T - 1, -1, -1)  # the tokens in reverse order
        got = bert_forward(ctx, handle, ex, seed=ctx.seed)
        reordered = bert_forward(ctx, handle, ex, text=ex.text[:, order], seed=ctx.seed)
        moved = (reordered - got[:, order]).abs().max().item()
        if not moved > 1e-4:
            raise CheckFailed(
                f"the tokens in reverse order get exactly the predictions of the original order, reversed (they differ "
                f"by {moved:.2g} at most): the model cannot tell positions apart",
                diagnosis="bert_no_positional_encoding", details={"numbers": {"max_change": moved}},
                locate=lambda: where_bert(ctx, handle, ex))

    bert_gate(ctx)


def _layer_index(name):
    """The first numeric component of a state entry's name ("net.1.norm1.weight": "1"), the index
    of a block in an nn.Sequential or nn.ModuleList; None for an entry outside such a stack."""
    return next((part for part in name.split(".") if part.isdigit()), None)


def _models_of_depths(ctx, V, E, H):
    """({n_layers: handle}, {n_layers: its state tensors}) of the student's BertModel at depths 1, 2, 3."""
    handles, entries = {}, {}
    for n_layers in (1, 2, 3):
        handles[n_layers] = ctx.student.construct(MODULE, "BertModel", n_layers, V, E, H, 0.1, 0.1)
        entries[n_layers] = state_tensors(ctx, handles[n_layers], "BertModel")
    return handles, entries


def _a_block_per_layer(counts):
    """Whether the state_dict entries of depths 1, 2, 3 grow by the same number (> 0) a layer."""
    return counts[2] - counts[1] == counts[1] - counts[0] > 0


def _adds_a_block_per_layer(ctx, V, E, H):
    """Whether each layer of the student's BertModel adds its block's entries: what bert.layers holds."""
    return _a_block_per_layer([len(entries) for entries in _models_of_depths(ctx, V, E, H)[1].values()])


@check("bert.layers", "BertModel stacks n_layers TransformerBlocks, each with weights of its own")
def bert_layers(ctx):
    # Without the stand-ins: the blocks' own weights are what is counted and loaded.
    @ctx.given(bert_inputs())
    def prop(ex):
        V, E, H = ex.vocab_size, ex.embed_dim, ex.n_heads
        handles, entries = _models_of_depths(ctx, V, E, H)
        counts = [len(entries[n]) for n in (1, 2, 3)]
        call = f"BertModel(n_layers=1, 2, 3, vocab_size={V}, embed_dim={E}, n_heads={H})"
        if counts[0] == counts[1] == counts[2]:
            raise CheckFailed(f"{call} hold the same {counts[0]} state_dict entries: the model does not build "
                              "n_layers blocks", diagnosis="bert_layers_ignored",
                              details={"numbers": {"entries": counts}})
        if not _a_block_per_layer(counts):
            raise CheckFailed(f"{call} hold {counts[0]}, {counts[1]} and {counts[2]} state_dict entries: every layer "
                              "should add one block's entries", details={"numbers": {"entries": counts}})
        # every entry gets its own values, loaded and read back: entries of one module repeated in
        # several layers read back the same values, the last written
        state = entries[3]
        sent = distinct_values(state, ctx.seed)
        ctx.student.load_state_dict(handles[3], sent, strict=False)
        back = state_tensors(ctx, handles[3], "BertModel")
        tied = sorted({(a, b) for a in sent for b in sent if a < b and _layer_index(a) != _layer_index(b)
                       and a in back and b in back and back[a].shape == back[b].shape
                       and not torch.equal(back[a], sent[a]) and torch.equal(back[a], back[b])})
        if tied:
            raise CheckFailed(f"{call}: with n_layers=3 the layers share their weights ({', '.join(f'{a} is {b}' for a, b in tied[:3])}): "
                              "the blocks are one module repeated, not n_layers blocks", diagnosis="bert_layers_shared")

    bert_gate(ctx)


# ---------------------------------------------------------------- masking


def call_mask_inputs(ctx, text, vocab_size, mask_id, *, pad_ind=0, mask_rate=0.15, only_mask=False):
    result = ctx.student.call(MODULE, "mask_inputs", text, vocab_size, mask_id,
                              pad_ind=pad_ind, mask_rate=mask_rate, only_mask=only_mask)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckFailed("mask_inputs must return a pair (masked_text, mask_labels)", diagnosis="returns_wrong_type")
    masked = expect_tensor(result[0], "masked_text", shape=text.shape)
    labels = expect_tensor(result[1], "mask_labels", shape=text.shape)
    return masked.long(), labels.long()


def big_batch(seed, *, B=256, T=256, vocab_size=100, padded=True):
    """(B, T) ids in [1, V); with `padded`, every row ends in padding (id 0) after a random length."""
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(1, vocab_size, (B, T), generator=g)
    if padded:
        lengths = torch.randint(T // 2, T + 1, (B, 1), generator=g)
        text = text.masked_fill(torch.arange(T)[None, :] >= lengths, 0)
    return text


def masked_big_batch(ctx, *, vocab_size=100, mask_rate=0.15, padded=True, B=256, T=256, salt=0, mask_id=None):
    text = big_batch(ctx.seed + salt, B=B, T=T, vocab_size=vocab_size, padded=padded)
    ctx.student.seed(ctx.seed + salt)
    mask_id = vocab_size if mask_id is None else mask_id
    masked, labels = call_mask_inputs(ctx, text, vocab_size, mask_id, pad_ind=0, mask_rate=mask_rate)
    return text, masked, labels


def own_unlabelled(text, labels):
    """The label mask_inputs writes at the tokens it did not select: -100 where its labels hold it
    anywhere, otherwise the value it writes instead (0, -1), the most common label that is not the
    original token; None where every label is the original token (the labels tell no selection).
    Writing anything but -100 there is charged in pretraining.labels alone; the other masking
    checks read the selection the function made through its own convention, so that one mistake
    costs one check."""
    if bool((labels == IGNORE).any()):
        return IGNORE
    not_original = labels[labels != text]
    return None if not_original.numel() == 0 else int(not_original.mode().values)


def own_selection(text, masked, labels, unlabelled):
    """The tokens mask_inputs selected, as its own output shows them: those it changed, and those
    it labelled (a label other than `unlabelled`, its own value for "not selected", read by
    own_unlabelled_value: a batch at mask_rate=1.0, or one whose padding is labelled with the
    padding id 0, cannot tell it). Labels that tell no selection (None) leave the tokens changed."""
    changed = masked != text
    return changed if unlabelled is None else (labels != unlabelled) | changed


def categories(text, masked, labels, mask_id, unlabelled):
    """Boolean maps: selected (own_selection), and among all tokens: masked, unchanged, randomised."""
    selected = own_selection(text, masked, labels, unlabelled)
    is_mask = masked == mask_id
    unchanged = masked == text
    randomised = ~is_mask & ~unchanged
    return selected, is_mask, unchanged, randomised


def _gate_batch(ctx):
    """mask_inputs on a 64 x 64 batch without padding at mask_rate=0.15: (text, masked, labels)."""
    V, salt = 100, 7919
    text = big_batch(ctx.seed + salt, B=64, T=64, vocab_size=V, padded=False)
    ctx.student.seed(ctx.seed + salt)
    return (text, *call_mask_inputs(ctx, text, V, V, pad_ind=0, mask_rate=0.15))


def own_unlabelled_value(ctx):
    """own_unlabelled of the gate's batch, where most tokens are not selected: the convention a
    check of small examples reads their selection with."""
    text, _, labels = _gate_batch(ctx)
    return own_unlabelled(text, labels)


def masking_gate(ctx):
    """mask_inputs does its job (graders/checks/gates.py): at mask_rate=0.15 on a 64 x 64 batch
    without padding it selects some tokens but not all (labelled or changed: between 1 and 50%
    of them; a right solution selects 15% +- 0.6%) and changes some of them. What the properties
    of labels, padding and categories hold for trivially (no token selected, every token
    selected, random labels) earns nothing."""
    text, masked, labels = _gate_batch(ctx)
    share = own_selection(text, masked, labels, own_unlabelled(text, labels)).double().mean().item()
    call = "mask_inputs on a 64 x 64 batch without padding (mask_rate=0.15, vocab_size=100)"
    if not 0.01 <= share <= 0.5:
        raise CheckFailed(f"{call} selected {share:.1%} of the tokens: the properties of the masking hold only "
                          "because it does not select at mask_rate yet, so they earn no points",
                          diagnosis="degenerate_output",
                          details={"proportions": [proportion("share of tokens selected", share, 0.15, text.numel())]})
    if not bool((masked != text).any()):
        raise CheckFailed(f"{call} changed no token: the properties of the masking hold only because it does not "
                          "mask yet, so they earn no points", diagnosis="degenerate_output")


@dataclass
class MaskingInput:
    vocab_size: int
    pad_ind: int
    mask_rate: float
    text: torch.Tensor
    seed: int

    def __repr__(self):
        return (f"mask_inputs(text={self.text.tolist()}, vocab_size={self.vocab_size}, "
                f"mask_token_ind={self.vocab_size}, pad_ind={self.pad_ind}, mask_rate={self.mask_rate}) "
                f"with torch.manual_seed({self.seed})")


@st.composite
def masking_inputs(draw, *, rates=(0.15, 0.5, 1.0), pad_share=0.3):
    V = draw(st.integers(3, 50))
    pad = draw(st.sampled_from([0, 1]))
    rate = draw(st.sampled_from(rates))
    B = draw(st.integers(1, 4))
    T = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(0, V - 1, (B, T), generator=g)
    text = text + (text >= pad).long()  # ids in [0, V) without the padding id
    text = text.masked_fill(torch.rand(B, T, generator=g) < pad_share, pad)
    return MaskingInput(V, pad, rate, text, seed)


def _mask_small(ctx, ex, only_mask=False):
    ctx.student.seed(ex.seed)
    return call_mask_inputs(ctx, ex.text, ex.vocab_size, ex.vocab_size, pad_ind=ex.pad_ind,
                            mask_rate=ex.mask_rate, only_mask=only_mask)


@check("pretraining.selection_rate", "mask_inputs selects mask_rate of the non-padding tokens")
def selection_rate(ctx):
    # The selection is what the function did (tokens changed or labelled), whatever value its
    # labels hold elsewhere (charged in pretraining.labels): the share measured is the selection's.
    rows = []
    unlabelled = own_unlabelled_value(ctx)
    for salt, rate in enumerate((0.15, 0.4)):
        text, masked, labels = masked_big_batch(ctx, mask_rate=rate, salt=salt)
        real = text != 0
        n = int(real.sum())
        share = own_selection(text, masked, labels, unlabelled)[real].double().mean().item()
        # labels that tell no selection leave the tokens changed: 80% + 10% (less a draw of the
        # original) of the selected ones, under a right split (pretraining.split's to judge)
        target = rate if unlabelled is not None else rate * (0.9 - 0.1 / 100)
        rows.append(proportion(f"share of tokens {'selected' if unlabelled is not None else 'changed'} "
                               f"(mask_rate={rate})", share, target, n))
        if outside(rows[-1]):
            raise CheckFailed(f"with mask_rate={rate}, {share:.4f} of the non-padding tokens of a 256 x 256 batch "
                              f"are selected (changed or labelled; expected within [{rows[-1]['low']:.4f}, "
                              f"{rows[-1]['high']:.4f}])", diagnosis="mlm_wrong_rate", details={"proportions": rows})


@check("pretraining.split", "Of the selected tokens, 80% become <mask>, 10% a random token, 10% stay unchanged")
def split(ctx):
    # Every token of a 512 x 256 batch selected (mask_rate=1.0), so that a share 0.1 off is more than
    # 10 times the 5-sigma bound; the <mask> id is not vocab_size (the docstring does not say it is).
    V, mask_id = 100, 103
    unlabelled = own_unlabelled_value(ctx)
    text, masked, labels = masked_big_batch(ctx, vocab_size=V, mask_rate=1.0, B=512, mask_id=mask_id)
    selected, is_mask, unchanged, randomised = categories(text, masked, labels, mask_id, unlabelled)
    if unlabelled is None:
        selected = text != 0  # mask_rate=1.0 selects every real token (pretraining.selection_rate's to judge)
    n = int(selected.sum())
    if n == 0:
        raise CheckFailed("no token of a 512 x 256 batch is selected (changed or labelled) with mask_rate=1.0",
                          diagnosis="mlm_wrong_rate")
    shares = {name: (m & selected).sum().item() / n for name, m in
              (("mask", is_mask), ("random", randomised), ("unchanged", unchanged))}
    # A random token equals the original with probability 1/V: it then counts as unchanged.
    rows = [
        proportion("selected tokens replaced by <mask>", shares["mask"], 0.8, n),
        proportion("selected tokens replaced by another token", shares["random"], 0.1 * (1 - 1 / V), n),
        proportion("selected tokens left unchanged", shares["unchanged"], 0.1 + 0.1 / V, n),
    ]
    bad = [row for row in rows if outside(row)]
    if bad:
        changed_to = masked[selected & ~unchanged]
        if shares["mask"] < 0.05 and changed_to.numel() and (changed_to == changed_to.mode().values).double().mean() > 0.7:
            diagnosis = "mlm_wrong_mask_id"  # most selected tokens become one id, not mask_token_ind
        elif shares["mask"] > 0.95:
            diagnosis = "mlm_always_mask"
        elif shares["random"] < 0.06 and shares["unchanged"] > 0.14:
            diagnosis = "mlm_random_share_too_low"
        elif shares["unchanged"] < 0.05:
            diagnosis = "mlm_no_unchanged_share"
        else:
            diagnosis = "mlm_wrong_split"
        text_rows = "; ".join(f"{r['name']}: {r['value']:.3f} (expected {r['target']:.3f})" for r in rows)
        raise CheckFailed(f"over {n} selected tokens (mask_token_ind={mask_id}): {text_rows}", diagnosis=diagnosis,
                          details={"proportions": rows})


@check("pretraining.labels", "Labels hold the original token at selected positions and -100 everywhere else; the "
       "text given is left unchanged")
def labels_check(ctx):
    @ctx.given(masking_inputs())
    def prop(ex):
        masked, labels = _mask_small(ctx, ex)
        labelled = labels != IGNORE
        wrong = labelled & (labels != ex.text)
        if wrong.any():
            values, changed_there = labels[wrong], masked[wrong] != ex.text[wrong]
            if values.unique().numel() == 1 and not bool(changed_there.any()):
                diagnosis = "mlm_labels_not_ignored"  # one value, at tokens the function left as they were
            elif bool(changed_there.all()) and bool((values == masked[wrong]).all()):
                diagnosis = "mlm_labels_hold_mask"  # the labels are what the tokens were changed into
            else:
                diagnosis = None
            raise CheckFailed(f"labels {values.tolist()[:8]} at positions {wrong.nonzero().tolist()[:8]}, where -100 or "
                              f"the original tokens {ex.text[wrong].tolist()[:8]} were expected", diagnosis=diagnosis,
                              details={"got": str(labels.tolist()), "masked_text": str(masked.tolist())})
        changed = masked != ex.text
        if (changed & ~labelled).any():
            raise CheckFailed(f"tokens were changed at positions {(changed & ~labelled).nonzero().tolist()[:8]}, whose "
                              "label is -100: the labels must mark every selected token", diagnosis="mlm_labels_mismatch",
                              details={"got": str(labels.tolist()), "masked_text": str(masked.tolist())})

    # the caller's text stays as it was (the worker's copy of it shows what the function wrote into it)
    text = big_batch(ctx.seed, B=8, T=16, vocab_size=20)
    if _writes_into_text(ctx, text, 20, 0, 0.15):
        raise CheckFailed("mask_inputs(text, vocab_size=20, mask_token_ind=20) changed the text it was given: the "
                          "docstring leaves text unchanged (pretrain_step then reads the masked text as its batch)",
                          diagnosis="mlm_writes_into_text")

    # what one small example cannot tell: labels at every token (a selected token may stay
    # unchanged, but at mask_rate=0.15 a right masking labels 1.5% of the tokens it leaves alone)
    text, masked, labels = _gate_batch(ctx)
    labelled_alone = ((labels != IGNORE) & (masked == text)).double().mean().item()
    if labelled_alone > 0.5:
        raise CheckFailed(f"mask_inputs on a 64 x 64 batch at mask_rate=0.15 labels {labelled_alone:.0%} of the tokens "
                          "it leaves unchanged, with no -100 among its labels: the tokens it did not select must be "
                          "labelled -100", diagnosis="mlm_labels_not_ignored" if not bool((labels == IGNORE).any()) else None,
                          details={"numbers": {"share labelled and unchanged": labelled_alone}})
    masking_gate(ctx)


@check("pretraining.padding_never_selected", "Padding tokens (pad_ind) are never selected, changed or labelled")
def padding_never_selected(ctx):
    unlabelled = own_unlabelled_value(ctx)

    @ctx.given(masking_inputs(rates=(0.5, 1.0), pad_share=0.5))
    def prop(ex):
        masked, labels = _mask_small(ctx, ex)
        pad = ex.text == ex.pad_ind
        selected = own_selection(ex.text, masked, labels, unlabelled) & pad
        if selected.any():
            # seen selected: a padding token changed, or labelled with its own id (the original token)
            seen = bool((masked[selected] != ex.pad_ind).any() or (labels[selected] == ex.pad_ind).any())
            raise CheckFailed(f"padding (id {ex.pad_ind}) at positions {selected.nonzero().tolist()[:8]} was selected: "
                              f"masked_text {masked.tolist()}, labels {labels.tolist()}",
                              diagnosis="mlm_selects_padding" if seen else None)

    masking_gate(ctx)


def own_mask_id(masked, changed, mask_id):
    """The id most changed tokens become: mask_token_ind, or the one fixed id a function masks
    with instead (charged in pretraining.split), so that its random replacements are told apart."""
    if changed.numel() == 0:
        return mask_id
    mode = int(changed.mode().values)
    return mode if (changed == mode).double().mean() > 0.5 else mask_id


@check("pretraining.random_tokens", "Random replacements are uniform over [0, vocab_size)")
def random_tokens(ctx):
    # A small vocabulary and every token of a 1024 x 256 batch selected: each id's share (1/4) is
    # measured on about 26,000 replacements, so one id missing is far outside its bound. The
    # <mask> id is not vocab_size: a replacement drawn from [0, mask_token_ind] (vocab_size and
    # the ids up to <mask> included) then lies outside [0, vocab_size), where with <mask> at
    # vocab_size a draw of vocab_size would look like <mask>.
    V, mask_id = 4, 6
    masking_gate(ctx)
    text, masked, labels = masked_big_batch(ctx, vocab_size=V, mask_rate=1.0, padded=False, B=1024, mask_id=mask_id)
    unlabelled = own_unlabelled_value(ctx)
    selected, _, unchanged, _ = categories(text, masked, labels, mask_id, unlabelled)
    if unlabelled is None:
        selected = torch.ones_like(selected)  # mask_rate=1.0 without padding selects every token
    became = own_mask_id(masked, masked[selected & ~unchanged], mask_id)
    values = masked[selected & ~unchanged & (masked != became)]
    out_of_range = values[(values < 0) | (values >= V)]
    if out_of_range.numel():
        found = sorted(set(out_of_range.tolist()))
        raise CheckFailed(f"random replacements {found[:10]} lie outside [0, {V}) (vocab_size={V}, "
                          f"mask_token_ind={mask_id}): {out_of_range.numel()} of {values.numel()} replacements",
                          diagnosis="mlm_random_out_of_range")
    n = values.numel()
    if n < 100:
        return  # too few random replacements to judge: their share is pretraining.split's to charge
    # A replacement equal to the original looks unchanged: value v is seen with weight 1 - f(v),
    # f(v) the share of selected tokens whose original id is v.
    originals = torch.bincount(text[selected], minlength=V)[:V].double()
    weight = 1 - originals / originals.sum()
    target = weight / weight.sum()
    counts = torch.bincount(values, minlength=V).double()
    rows = [proportion(f"replacements equal to {v}", counts[v].item() / n, target[v].item(), n, sigmas=5.5)
            for v in range(V)]
    bad = [row for row in rows if outside(row)]
    if bad:
        raise CheckFailed(f"over {n} random replacements with vocab_size={V}, the share of "
                          + ", ".join(f"{r['name'].split()[-1]} is {r['value']:.3f} (expected {r['target']:.3f})" for r in bad[:4]),
                          diagnosis="mlm_random_not_uniform", details={"proportions": rows})


@check("pretraining.category_independent", "Which of mask / random / unchanged a token gets does not depend on its row or position")
def category_independent(ctx):
    V = 100
    masking_gate(ctx)
    text, masked, labels = masked_big_batch(ctx, vocab_size=V, padded=False)
    selected, is_mask, _, _ = categories(text, masked, labels, V, own_unlabelled_value(ctx))
    n = int(selected.sum())
    pooled = (is_mask & selected).sum().item() / n  # the gate has seen a selection
    rows = []
    B, T = text.shape
    for axis, size, label in ((0, B, "rows"), (1, T, "positions")):
        for q in range(4):
            part = torch.zeros_like(selected)
            index = slice(q * size // 4, (q + 1) * size // 4)
            if axis == 0:
                part[index, :] = True
            else:
                part[:, index] = True
            n_q = int((selected & part).sum())
            share = (is_mask & selected & part).sum().item() / max(n_q, 1)
            # The quarter is part of the pool: Var(share_q - pooled) = p(1-p)(1/n_q - 1/n).
            sigma = math.sqrt(max(pooled * (1 - pooled), 1e-12) * max(1 / max(n_q, 1) - 1 / n, 0))
            rows.append({"name": f"<mask> share in {label} quarter {q + 1}", "value": share, "target": pooled,
                         "low": pooled - SIGMAS * sigma, "high": pooled + SIGMAS * sigma})
    bad = [row for row in rows if outside(row)]
    if bad:
        raise CheckFailed("the share of selected tokens that become <mask> differs between parts of the batch: "
                          + ", ".join(f"{r['name']} {r['value']:.3f}" for r in bad[:4]) + f" (whole batch {pooled:.3f})",
                          diagnosis="mlm_order_dependent", details={"proportions": rows})


@check("pretraining.only_mask", "only_mask=True turns every selected token into <mask> and changes nothing else")
def only_mask(ctx):
    unlabelled = own_unlabelled_value(ctx)

    @ctx.given(masking_inputs(rates=(0.5, 1.0)))
    def prop(ex):
        masked, labels = _mask_small(ctx, ex, only_mask=True)
        V = ex.vocab_size
        labelled = own_selection(ex.text, masked, labels, unlabelled) if unlabelled is None else labels != unlabelled
        if (masked[labelled] != V).any():
            # ignored, seen: the same seed without only_mask gives the very same output
            plain = _mask_small(ctx, ex)
            ignored = torch.equal(plain[0], masked) and torch.equal(plain[1], labels)
            raise CheckFailed(f"with only_mask=True selected tokens became {masked[labelled].tolist()} "
                              f"(expected all {V})" + (", as they do with only_mask=False under the same seed"
                                                       if ignored else ""),
                              diagnosis="mlm_only_mask_ignored" if ignored else None)
        stray = (masked != ex.text) & ~labelled & (labels != ex.text)
        if stray.any():
            raise CheckFailed(f"with only_mask=True tokens outside the selection were changed, at positions "
                              f"{stray.nonzero().tolist()[:8]}", diagnosis="mlm_labels_mismatch")

    masking_gate(ctx)


# ---------------------------------------------------------------- the pre-training step


def _loss_value(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.reshape(()))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise CheckFailed(f"pretrain_step returned {type(value).__name__}, expected the loss as a float",
                      diagnosis="returns_wrong_type")


PROBE_SCALE, PROBE_LR = 20.0, 0.1
# On <mask> the stand-in's logits lean towards the high ids (scale * MASK_TILT * j / V), so that a
# batch whatever mask_inputs returns (even <mask> at every selected token) gives its weight a
# gradient: pretrain_step is judged by what it does with any masking, and a step is always seen.
MASK_TILT = 0.5
NO_STEP = 2e-5  # a movement this small is no step at all


def _stand_in_logits(inputs, vocab_size, scale):
    """What the stand-in model predicts: `scale` on the id it sees, 0 elsewhere; on <mask>,
    scale * MASK_TILT * j / vocab_size for every id j."""
    ids = inputs.clamp(0, vocab_size)
    onehot = F.one_hot(ids, vocab_size + 1)[..., :vocab_size].double()
    tilt = MASK_TILT * torch.arange(vocab_size, dtype=torch.float64) / vocab_size
    return scale * (onehot + (ids == vocab_size).double()[..., None] * tilt)


@dataclass
class ProbeStep:
    """One pretrain_step on the stand-in: the batch, the masking the grader reproduced, what came back."""

    text: torch.Tensor
    masked: torch.Tensor  # mask_inputs' answer under the same seed: what the step should feed the model
    labels: torch.Tensor
    loss: float
    scale_after: float
    scale_grad: float | None  # the stand-in's own report, only to name the mistake
    seen: torch.Tensor | None  # what the stand-in saw, only to explain a masking that cannot be reproduced
    vocab_size: int
    mask_seen: torch.Tensor | None = None  # the padding mask the step passed the stand-in
    scale_before: float = PROBE_SCALE  # the weight before this step (after the warm-up step, if any)
    stale: float = 0.0  # the warm-up's gradient: what a step that never clears the gradients adds
    pad_ind: int = 0
    mask_rate: float = 0.15
    seed: int = 0  # the worker's seed for this step: mask_inputs under it gives the step's masking

    @property
    def moved(self):
        return self.scale_after - self.scale_before

    def token_losses(self, scale=None, requires_grad=False):
        """Per-token cross-entropy of the stand-in, (B*T,), and the scale: against the labels
        mask_inputs gave where they are tokens, so that a step is judged on the student's own
        masking (labels of another value than -100 are charged in the masking checks), and
        against the original tokens elsewhere."""
        scale = torch.tensor(float(self.scale_before if scale is None else scale), dtype=torch.float64,
                             requires_grad=requires_grad)
        logits = _stand_in_logits(self.masked, self.vocab_size, scale)
        targets = torch.where((self.labels >= 0) & (self.labels < self.vocab_size), self.labels, self.text)
        per_token = F.cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1), reduction="none")
        return per_token, scale

    def loss_forms(self, requires_grad=False):
        """{name: (loss, scale)}: the right loss and the known wrong ones, as functions of the scale."""
        per_token, scale = self.token_losses(requires_grad=requires_grad)
        selected = (self.labels != IGNORE).reshape(-1)
        real = (self.text != self.pad_ind).reshape(-1)
        forms = {"selected": per_token[selected].mean(), "all": per_token.mean(), "real": per_token[real].mean()}
        return {name: (loss, scale) for name, loss in forms.items()}

    def steps(self):
        """{name: the SGD step of the stand-in's weight}, for the right loss and the known wrong ones."""
        steps = {}
        for name, (loss, scale) in self.loss_forms(requires_grad=True).items():
            (grad,) = torch.autograd.grad(loss, scale, retain_graph=True)
            steps[name] = -PROBE_LR * float(grad)
        return steps


def probe_step(ctx, text, vocab_size, seed, *, warm_up=False, pad_ind=0, mask_rate=0.15):
    """pretrain_step on the stand-in, with SGD: reproduces its masking and reads its weight back.
    `warm_up`: a first pretrain_step on another batch comes before, as in training, so that the
    gradient it leaves must not add to this step's (whichever way the code clears it)."""
    V = vocab_size
    model = ctx.student.task("bert.probe_model", V, PROBE_SCALE, None, MASK_TILT)
    optimizer = ctx.student.task("optimizer", model, "SGD", PROBE_LR, ["scale"])
    before, stale = PROBE_SCALE, 0.0
    if warm_up:
        first_text = with_padding_id(big_batch(seed + 1, B=text.size(0), T=text.size(1), vocab_size=V), pad_ind)
        first = _one_step(ctx, model, optimizer, first_text, V, seed + 1, PROBE_SCALE, 0.0, pad_ind, mask_rate)
        before, stale = first.scale_after, -first.steps()["selected"] / PROBE_LR
    return _one_step(ctx, model, optimizer, text, V, seed, before, stale, pad_ind, mask_rate)


def with_padding_id(text, pad_ind):
    """`text` (padding 0, ids in [1, V)) with its padding written as `pad_ind` and the token pad_ind as 0."""
    if pad_ind == 0:
        return text
    return torch.where(text == 0, pad_ind, torch.where(text == pad_ind, 0, text))


def _one_step(ctx, model, optimizer, text, V, seed, before, stale, pad_ind, mask_rate):
    ctx.student.seed(seed)
    masked, labels = call_mask_inputs(ctx, text, V, V, pad_ind=pad_ind, mask_rate=mask_rate)
    ctx.student.seed(seed)
    loss = _loss_value(call_pretrain_step(ctx, model, optimizer, text, V, masked, labels, pad_ind, mask_rate))
    after = state_tensors(ctx, model, "the stand-in model").get("scale")
    if after is None or after.numel() != 1:
        raise CheckFailed("the stand-in model lost its weight during pretrain_step")
    seen = ctx.student.getattr(model, "seen")
    seen = seen[-1] if isinstance(seen, list) and seen and type(seen[-1]) is torch.Tensor else None
    masks = ctx.student.getattr(model, "masks_seen")
    mask_seen = masks[-1] if isinstance(masks, list) and masks and type(masks[-1]) is torch.Tensor else None
    grad = ctx.student.call(model, "scale_grad")
    return ProbeStep(text, masked, labels, loss, float(after.reshape(())), grad if isinstance(grad, float) else None,
                     seen, V, mask_seen, before, stale, pad_ind, mask_rate, seed)


class MaskingFault(Exception):
    """pretrain_step raised on a batch its mask_inputs made outside the docstring's ranges."""


def call_pretrain_step(ctx, model, optimizer, text, V, masked, labels, pad_ind=0, mask_rate=0.15):
    """pretrain_step(model, optimizer, text, V, mask_token_ind=V, pad_ind, mask_rate), whose
    masking, under the seed it runs with, is (masked, labels). An exception that mask_inputs'
    output explains (a label outside [0, V) other than -100, an id outside [0, V]) is a MaskingFault:
    charged in the masking checks, not to the step."""
    try:
        return ctx.student.call(MODULE, "pretrain_step", model, optimizer, text.clone(), V, V, pad_ind, mask_rate)
    except StudentError as error:
        bad_labels = (labels != IGNORE) & ((labels < 0) | (labels >= V))
        out_of_range = bool(bad_labels.any() or ((masked < 0) | (masked > V)).any())
        if out_of_range and error.exc_type != "NotImplementedError":  # a step not written yet earns nothing
            raise MaskingFault() from None
        raise


def judged_on_own_masking(check_fn):
    """A step check passes where the step raised on a batch mask_inputs made out of range: the
    step's own code cannot be seen there, and the masking checks charge the mistake."""
    @functools.wraps(check_fn)
    def run(ctx):
        try:
            return check_fn(ctx)
        except MaskingFault:
            return None

    return run


def _not_reproduced(probe):
    """A failure message when the model saw another masking than mask_inputs gives under the same seed."""
    if probe.seen is None or (tuple(probe.seen.shape) == tuple(probe.masked.shape) and torch.equal(probe.seen.long(), probe.masked)):
        return None
    return ("pretrain_step fed the model a different masked batch than mask_inputs gives under the same seed: the "
            "step must mask with mask_inputs(text, vocab_size, mask_token_ind, pad_ind, mask_rate) before any "
            "other random draw, so that the grader can recompute its loss")


def _masked_with_the_defaults(ctx, probe):
    """Whether the model saw the batch mask_inputs gives under the step's seed with its own default
    for pad_ind, for mask_rate or both, where the step was called with others: its arguments dropped."""
    if probe.seen is None:
        return False
    for pad_ind, mask_rate in {(0, probe.mask_rate), (probe.pad_ind, 0.15), (0, 0.15)} - {(probe.pad_ind, probe.mask_rate)}:
        ctx.student.seed(probe.seed)
        masked, _ = call_mask_inputs(ctx, probe.text, probe.vocab_size, probe.vocab_size, pad_ind=pad_ind,
                                     mask_rate=mask_rate)
        if tuple(probe.seen.shape) == tuple(masked.shape) and torch.equal(probe.seen.long(), masked):
            return True
    return False


def _step_diagnosis(probe):
    return "pretrain_no_backward" if probe.scale_grad is None else "pretrain_no_step"


def _unchanged(probe):
    return probe.scale_after == probe.scale_before


# The step's arguments besides the defaults' (pad_ind, mask_rate, a batch of one), each judged
# as the first: (B, T, pad_ind, mask_rate).
OTHER_STEP_ARGUMENTS = ((1, 64, 3, 0.4), (16, 32, 0, 0.3))


@check("pretraining.step_updates_parameters", "One pretrain_step call moves the model's parameters by one step along "
       "the loss's gradient (gradients cleared, backward, step), after an earlier step, at every pad_ind and mask_rate")
@judged_on_own_masking
def step_updates(ctx):
    # Graded on the batch the student's own mask_inputs gives under the step's seed: a masking
    # mistake is charged in the masking checks, not here.
    V = 20
    _judge_step(ctx, probe_step(ctx, big_batch(ctx.seed, B=32, T=32, vocab_size=V), V, ctx.seed, warm_up=True))
    for salt, (B, T, pad_ind, mask_rate) in enumerate(OTHER_STEP_ARGUMENTS, start=2):
        text = with_padding_id(big_batch(ctx.seed + salt, B=B, T=T, vocab_size=V), pad_ind)
        _judge_step(ctx, probe_step(ctx, text, V, ctx.seed + salt, pad_ind=pad_ind, mask_rate=mask_rate))


def _judge_step(ctx, probe):
    moved = probe.moved
    steps = probe.steps()
    called = (f"pretrain_step(text of shape {tuple(probe.text.shape)}, vocab_size={probe.vocab_size}, "
              f"mask_token_ind={probe.vocab_size}, pad_ind={probe.pad_ind}, mask_rate={probe.mask_rate})")
    numbers = {"numbers": {"moved": moved, "expected": steps["selected"]}}
    if any(math.isclose(moved, step, rel_tol=1e-3, abs_tol=NO_STEP) for step in steps.values()):
        if abs(steps["selected"]) > NO_STEP:
            return
        raise CheckFailed(_unseen_step(probe), details=numbers)
    evaluation_step = _evaluation_masking(ctx, probe).steps()["selected"]
    if math.isclose(moved, evaluation_step, rel_tol=1e-3, abs_tol=NO_STEP):
        raise CheckFailed(f"{called} moved the parameter by {moved:.6g}, the step of the batch masked with "
                          f"only_mask=True; with the batch mask_inputs gives it moves by {steps['selected']:.6g}",
                          diagnosis="pretrain_only_mask", details=numbers)
    problem = _not_reproduced(probe)
    if problem:
        dropped = _masked_with_the_defaults(ctx, probe)
        raise CheckFailed(f"{called}: {problem}" + ("; it is the batch mask_inputs gives with its default "
                                                    "pad_ind=0 or mask_rate=0.15" if dropped else ""),
                          diagnosis="pretrain_arguments_dropped" if dropped else None, details=numbers)
    if _unchanged(probe):  # the expected step is not zero here, or the first test above had passed
        raise CheckFailed(f"after {called} with SGD the model's parameter did not change, where one step "
                          f"moves it by {steps['selected']:.6g}"
                          + (" (it has no gradient)" if probe.scale_grad is None else " (it has a gradient)"),
                          diagnosis=_step_diagnosis(probe), details=numbers)
    if probe.stale and math.isclose(moved, -PROBE_LR * probe.stale, rel_tol=1e-3):
        # Only the old gradient was applied: the new one never reached the parameter (no backward),
        # or was computed but never stepped on (the step ran before it, e.g. inside zero_grad: the
        # step is called, so pretrain_no_step would claim what is not true).
        no_backward = probe.scale_grad is None or math.isclose(probe.scale_grad, probe.stale, rel_tol=1e-6)
        raise CheckFailed(f"{called}, after an earlier step, moved the parameter by {moved:.6g}, the step of the "
                          f"earlier batch's gradient {probe.stale:.6g}: no step on this batch's gradient was taken",
                          diagnosis="pretrain_no_backward" if no_backward else None, details=numbers)
    accumulated = probe.stale and any(math.isclose(moved, step - PROBE_LR * probe.stale, rel_tol=1e-3, abs_tol=NO_STEP)
                                      for step in steps.values())
    raise CheckFailed(f"{called} with SGD (lr={PROBE_LR}) moved the parameter by {moved:.6g}; one step along the "
                      f"gradient of the cross-entropy moves it by {steps['selected']:.6g}"
                      + (f" (an earlier pretrain_step left the gradient {probe.stale:.6g}, which was added to the new "
                         "one: the gradients are never cleared)" if accumulated else ""),
                      diagnosis="zero_grad_missing" if accumulated else None, details=numbers)


def _unseen_step(probe):
    """The failure when the batch mask_inputs gave leaves nothing to learn (a gate, graders/checks/gates.py):
    whether pretrain_step steps cannot be seen, so the check earns nothing yet, and claims nothing of the step."""
    n_selected = int((probe.labels != IGNORE).sum())
    n_changed = int(((probe.masked != probe.text) & (probe.labels != IGNORE)).sum())
    return (f"mask_inputs selected {n_selected} tokens of this batch and changed {n_changed} of them: the loss has no "
            "gradient, so whether pretrain_step takes a step cannot be seen; this check earns its points once "
            "mask_inputs masks (graded in the masking checks)")


def _evaluation_masking(ctx, probe):
    """The probe's step as it would be with the batch masked for evaluation (only_mask=True), drawn
    under the step's seed: what a step that masks with only_mask computes."""
    ctx.student.seed(probe.seed)
    masked, labels = call_mask_inputs(ctx, probe.text, probe.vocab_size, probe.vocab_size, pad_ind=probe.pad_ind,
                                      mask_rate=probe.mask_rate, only_mask=True)
    return dataclasses.replace(probe, masked=masked, labels=labels)


@check("pretraining.loss_on_selected_tokens", "The loss is the mean cross-entropy over the selected tokens only")
@judged_on_own_masking
def loss_on_selected(ctx):
    V, B, T = 50, 32, 64
    text = big_batch(ctx.seed, B=B, T=T, vocab_size=V)
    probe = probe_step(ctx, text, V, ctx.seed)
    loss = probe.loss
    forms = {name: float(value) for name, (value, _) in probe.loss_forms().items()}
    if not forms["selected"] > NO_STEP:  # labels the stand-in already predicts: no loss to tell a step by
        raise CheckFailed(_unseen_step(probe))
    expected_step = probe.steps()["selected"]
    stepped = not _unchanged(probe) or not abs(expected_step) > NO_STEP  # a step of 0 is the right one
    if math.isclose(loss, forms["selected"], rel_tol=1e-4, abs_tol=1e-6) and stepped:
        return
    eval_loss = float(_evaluation_masking(ctx, probe).loss_forms()["selected"][0])
    if math.isclose(loss, eval_loss, rel_tol=1e-4, abs_tol=1e-6) and not math.isclose(loss, forms["selected"], rel_tol=1e-3):
        raise CheckFailed(f"the returned loss {loss:.4f} is the loss of the batch masked with only_mask=True "
                          f"({eval_loss:.4f}); with the 80/10/10 masking it is {forms['selected']:.4f}",
                          diagnosis="pretrain_only_mask",
                          details={"numbers": {"returned_loss": loss, "expected_loss": forms["selected"]}})
    if not stepped:
        raise CheckFailed(f"pretrain_step did not update the model, where one step moves its weight by "
                          f"{expected_step:.6g}", diagnosis=_step_diagnosis(probe))
    problem = _not_reproduced(probe)
    if problem:
        raise CheckFailed(problem)
    per_token, _ = probe.token_losses()
    total = per_token.sum().item()
    n_selected = int((probe.labels != IGNORE).sum())
    n_changed = int(((probe.masked != text) & (text != 0)).sum())
    n_real, n_all = int((text != 0).sum()), text.numel()
    numbers = {"returned_loss": loss, "expected_loss": forms["selected"], "tokens_selected": n_selected,
               "tokens_changed": n_changed, "tokens_not_padding": n_real, "tokens": n_all}
    if loss <= 0 or not math.isfinite(loss):
        raise CheckFailed(f"pretrain_step returned loss {loss}; the mean cross-entropy over the {n_selected} selected "
                          f"tokens is {forms['selected']:.4f}", details={"numbers": numbers})
    implied = total / loss  # how many tokens the loss was averaged over
    numbers["tokens_averaged_over"] = implied
    near = lambda count: abs(implied - count) <= 0.02 * count  # noqa: E731
    on_all = math.isclose(loss, forms["all"], rel_tol=1e-3) or math.isclose(loss, forms["real"], rel_tol=1e-3)
    selected_sum = per_token[(probe.labels != IGNORE).reshape(-1)].sum().item()
    if math.isclose(loss, selected_sum, rel_tol=1e-3):
        diagnosis = "pretrain_loss_not_averaged"
    else:
        diagnosis = "pretrain_loss_on_all_tokens" if on_all or near(n_all) or near(n_real) else None
    raise CheckFailed(
        f"the returned loss {loss:.4f} is the summed loss {total:.1f} divided by {implied:.1f} tokens; the mean over "
        f"the {n_selected} selected tokens is {forms['selected']:.4f} ({n_changed} tokens were changed by masking, "
        f"{n_real} are not padding)",
        diagnosis=diagnosis, details={"numbers": numbers})


@check("pretraining.step_passes_padding_mask", "pretrain_step passes the model the padding mask text == pad_ind")
@judged_on_own_masking
def step_passes_padding_mask(ctx):
    V = 20
    text = big_batch(ctx.seed, B=8, T=16, vocab_size=V)  # every row ends in padding
    _expect_padding_mask(ctx, probe_step(ctx, text, V, ctx.seed), "")
    # A random replacement that happens to be pad_ind is no padding: with 3 tokens and mask_rate 0.9
    # a few dozen of them are.
    small = big_batch(ctx.seed + 2, B=32, T=32, vocab_size=3)
    _expect_padding_mask(ctx, probe_step(ctx, small, 3, ctx.seed + 2, mask_rate=0.9),
                         " (vocab_size=3, mask_rate=0.9: some random replacements are the id pad_ind)")


def _writes_into_text(ctx, text, vocab_size, pad_ind, mask_rate):
    """Whether the student's mask_inputs changes the tensor it is given."""
    after = ctx.student.task("bert.text_after_mask_inputs", text, vocab_size, vocab_size, pad_ind, mask_rate)
    return not torch.equal(after, text)


def _expect_padding_mask(ctx, probe, where):
    """The mask the step passed the stand-in is text == pad_ind, or the check fails with what it is."""
    mask, padding = probe.mask_seen, probe.text == probe.pad_ind
    if type(mask) is not torch.Tensor:
        raise CheckFailed("pretrain_step called the model without a padding mask: pass model(masked_text, "
                          "text == pad_ind), so that padded positions get no attention", diagnosis="pretrain_no_padding_mask")
    if tuple(mask.shape) == tuple(padding.shape) and torch.equal(mask.bool(), padding):
        return
    if _writes_into_text(ctx, probe.text, probe.vocab_size, probe.pad_ind, probe.mask_rate):
        return  # the step reads the text its mask_inputs wrote into: pretraining.labels charges that
    seen = f"shape {tuple(mask.shape)}, {int(mask.bool().sum())} positions set; the batch has {int(padding.sum())} padded ones"
    numbers = {"numbers": {"expected_set": int(padding.sum()), "got_set": int(mask.bool().sum())}}
    if type(probe.seen) is torch.Tensor and probe.seen.shape == mask.shape and torch.equal(mask.bool(), probe.seen == probe.pad_ind):
        raise CheckFailed(f"the padding mask passed to the model{where} is masked_text == pad_ind ({seen}): a token "
                          "replaced by a random id equal to pad_ind is marked as padding; build it from the text the "
                          "step was given, before masking", details=numbers)
    raise CheckFailed(f"the padding mask passed to the model{where} is not text == pad_ind ({seen})",
                      diagnosis="pretrain_no_padding_mask" if not mask.bool().any() else None, details=numbers)


@check("pretraining.first_loss", "The first loss of a freshly initialised masked-LM model is about ln(vocab_size)")
@judged_on_own_masking
def first_loss(ctx):
    V = 100

    def fresh_step(text):
        """pretrain_step's loss on a fresh model (the grader's: BertModel is graded in part bert), the
        worker seeded as for the other batch."""
        ctx.student.seed(ctx.seed)
        masked, labels = call_mask_inputs(ctx, text, V, V, pad_ind=0, mask_rate=0.15)
        model = ctx.student.task("bert.fresh_model", V, 64, ctx.seed)
        optimizer = ctx.student.task("optimizer", model, "AdamW", 1e-4, None, weight_decay=0.01)
        ctx.student.seed(ctx.seed)
        return _loss_value(call_pretrain_step(ctx, model, optimizer, text, V, masked, labels))

    loss = fresh_step(big_batch(ctx.seed, B=16, T=32, vocab_size=V, padded=False))
    # ln(V) is what a constant (or a draw from the seeded generators) returns as easily as a real
    # step: the same seeds on another batch must give another loss.
    other = fresh_step(big_batch(ctx.seed + 1, B=16, T=32, vocab_size=V, padded=False))
    if loss == other:
        raise CheckFailed(f"pretrain_step returned {loss:.4f} for two different batches: the loss does not come "
                          "from the model's predictions on the batch", diagnosis="degenerate_output",
                          details={"numbers": {"loss": loss, "loss on another batch": other}})
    low, high = math.log(V) - 1.0, math.log(V) + 1.5
    if not low <= loss <= high:
        raise CheckFailed(f"first loss {loss:.3f} with vocab_size={V}; expected about ln({V}) = {math.log(V):.3f} "
                          f"(within [{low:.2f}, {high:.2f}])", details={"numbers": {"loss": loss, "ln_vocab": math.log(V)}})
