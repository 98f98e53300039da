"""Checks for the frozen-BERT + GRU sentiment model and its training loop (seed 004, part 7).

Everything runs on a tiny transformers.BertModel built in the worker (nothing downloaded) into
which the grader loads its own weights. Expected outputs are computed here, in the grader: BERT's
features by a few lines of torch over those weights (`bert_features`), then a GRU and Linear whose
weights the grader also chooses and loads into the student's model. No reference model needed.

train() and evaluate() are called like any student function, on batches, a criterion and an
optimizer the harness builds (`sentiment.epoch_inputs`, `optimizer`); the grader reads back what
they return and the model's weights, and compares them with its own replay of the epoch. No point
rests on the worker's word: whether BERT stays frozen is judged from its weights read back around
a training step (`expect_frozen_under_a_step`); whether evaluate() runs without gradients shows in
no output, so the harness's watch of it is quoted as evidence and never scored. A count of
optimizer steps made in the worker may name a mistake, never score one.
"""

import itertools
import math
import re
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import strategies as st

from graders.checks.compare import expect_tensor, is_close
from graders.checks.framework import CheckFailed, CheckOutcome, check
from graders.checks.gates import expect_changes
from graders.checks.weights import state_tensors
from graders.sandbox import StudentError

MODULE = "sentiment"
BERT = {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 16, "max_position_embeddings": 16}
BERT_SEED = 20240
GRU_PARAM = re.compile(r"(?:^|\.)((?:weight|bias)_(?:ih|hh)_l\d+(?:_reverse)?)$")


# ---------------------------------------------------------------- strategies


class GRUArch(NamedTuple):
    hidden_dim: int
    output_dim: int
    n_layers: int
    bidirectional: bool


class SentimentInput(NamedTuple):
    """Checks unpack it like a tuple; counterexamples name its fields."""

    arch: GRUArch
    text: torch.Tensor  # (B, T) ids
    attention_mask: torch.Tensor  # (B, T), 1 on real tokens
    weights_seed: int


class AccuracyInput(NamedTuple):
    preds: torch.Tensor  # (B,) logits
    labels: torch.Tensor  # (B,) 0 or 1


@st.composite
def sentiment_inputs(draw, *, padded=False):
    """(hidden_dim, output_dim, n_layers, bidirectional), text (B, T), attention_mask (B, T), weights seed."""
    arch = GRUArch(draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.booleans()))
    B, T = draw(st.integers(1, 3)), draw(st.integers(2 if padded else 1, 6))
    seed = draw(st.integers(0, 2**16))
    return _sentiment_input(arch, B, T, seed, padded, draw)


@st.composite
def sentiment_space(draw, n_layers, bidirectional):
    """Two inputs for one model (BERTGRUSentiment's whole space): another length each, with a
    padded attention mask, an all-ones one, or none at all (the default, None: no padding)."""
    arch = GRUArch(draw(st.integers(1, 5)), draw(st.integers(1, 3)), n_layers, bidirectional)
    B = draw(st.integers(1, 3))
    lengths = [draw(st.integers(1, 6)) for _ in range(2)]
    if lengths[0] == lengths[1]:
        lengths[1] += 1
    seed = draw(st.integers(0, 2**16))
    inputs = []
    for offset, T in enumerate(lengths):
        form = draw(st.sampled_from(("padded", "ones", "none") if T > 1 else ("ones", "none")))
        ex = _sentiment_input(arch, B, T, seed + 7 * offset, form == "padded", draw)
        inputs.append(ex._replace(attention_mask=None, weights_seed=seed + 1) if form == "none"
                      else ex._replace(weights_seed=seed + 1))
    return inputs


def _sentiment_input(arch, B, T, seed, padded, draw):
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(1, BERT["vocab_size"], (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    if padded:
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        lengths[0] = draw(st.integers(1, T - 1))  # at least one padded position
        mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
        text = text * mask  # pad id 0
    return SentimentInput(arch, text, mask, seed + 1)


# ---------------------------------------------------------------- BERT, computed here


def bert_weight_shapes(config=BERT):
    """{name: shape} of a transformers BertModel without its pooler (the names its state_dict uses)."""
    H, I = config["hidden_size"], config["intermediate_size"]
    shapes = {"embeddings.word_embeddings.weight": (config["vocab_size"], H),
              "embeddings.position_embeddings.weight": (config["max_position_embeddings"], H),
              "embeddings.token_type_embeddings.weight": (2, H),
              "embeddings.LayerNorm.weight": (H,), "embeddings.LayerNorm.bias": (H,)}
    for i in range(config["num_hidden_layers"]):
        prefix = f"encoder.layer.{i}."
        for name, shape in (("attention.self.query", (H, H)), ("attention.self.key", (H, H)),
                            ("attention.self.value", (H, H)), ("attention.output.dense", (H, H)),
                            ("intermediate.dense", (I, H)), ("output.dense", (H, I))):
            shapes[prefix + name + ".weight"], shapes[prefix + name + ".bias"] = shape, shape[:1]
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[prefix + name + ".weight"], shapes[prefix + name + ".bias"] = (H,), (H,)
    return shapes


def bert_weights(seed=BERT_SEED, config=BERT):
    """The grader's weights for the tiny BERT, from a seed."""
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in bert_weight_shapes(config).items():
        noise = torch.randn(shape, generator=g)
        if name.endswith("LayerNorm.weight"):
            weights[name] = 1.0 + 0.1 * noise
        elif name.endswith("LayerNorm.bias") or len(shape) == 1:
            weights[name] = 0.1 * noise
        elif name.startswith("embeddings."):
            weights[name] = noise
        else:
            weights[name] = noise / math.sqrt(shape[-1])
    return weights


@torch.no_grad()
def bert_features(text, mask=None, weights=None, config=BERT):
    """BERT's last hidden states (B, T, H) in eval mode under the grader's weights, computed here as
    transformers' BertModel computes them (eager attention, GELU, post-LN, additive key mask)."""
    w = weights or bert_weights(config=config)
    H, n_heads = config["hidden_size"], config["num_attention_heads"]
    d = H // n_heads
    B, T = text.shape

    def norm(x, name):
        return F.layer_norm(x, (H,), w[name + ".weight"], w[name + ".bias"], eps=1e-12)

    x = (w["embeddings.word_embeddings.weight"][text] + w["embeddings.position_embeddings.weight"][:T]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = norm(x, "embeddings.LayerNorm")
    additive = None if mask is None else (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    for i in range(config["num_hidden_layers"]):
        prefix = f"encoder.layer.{i}."

        def linear(x, name, prefix=prefix):
            return F.linear(x, w[prefix + name + ".weight"], w[prefix + name + ".bias"])

        q, k, v = (linear(x, "attention.self." + n).view(B, T, n_heads, d).transpose(1, 2) for n in ("query", "key", "value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if additive is not None:
            scores = scores + additive
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H)
        x = norm(linear(context, "attention.output.dense") + x, prefix + "attention.output.LayerNorm")
        x = norm(linear(F.gelu(linear(x, "intermediate.dense")), "output.dense") + x, prefix + "output.LayerNorm")
    return x


# ---------------------------------------------------------------- helpers


def tiny_bert(ctx):
    """The tiny BertModel in the worker, holding the grader's weights (loaded before any student
    model sees it)."""
    bert = ctx.student.task("sentiment.tiny_bert", BERT_SEED, BERT)
    ctx.student.load_state_dict(bert, bert_weights(), strict=True)
    return bert


def build_model(ctx, bert, arch, dropout=0.5):
    hidden_dim, output_dim, n_layers, bidirectional = arch
    ctx.student.seed(ctx.seed)  # the same initial weights whenever an example is replayed
    return ctx.student.construct(MODULE, "BERTGRUSentiment", bert, hidden_dim, output_dim, n_layers, bidirectional, dropout)


def grader_head(arch, seed):
    """The GRU and Linear whose weights the grader loads into the student's model."""
    hidden_dim, output_dim, n_layers, bidirectional = arch
    g = torch.Generator().manual_seed(seed)
    rnn = nn.GRU(BERT["hidden_size"], hidden_dim, num_layers=n_layers, bidirectional=bidirectional, batch_first=True)
    out = nn.Linear(hidden_dim * (2 if bidirectional else 1), output_dim)
    with torch.no_grad():
        for p in [*rnn.parameters(), *out.parameters()]:
            p.copy_(torch.rand(p.shape, generator=g) * 2 - 1)
    return rnn.eval(), out.eval()


class OutputLayerWidth(CheckFailed):
    """The output layer's weight is not (output_dim, hidden_dim * directions)."""


def load_head(ctx, handle, arch, rnn, out, *, exact=True, seed=0):
    """Load the grader's GRU and Linear into the student's model, whatever the attribute names.
    Returns the state the grader loaded, and the names of the output layer's weight and bias.
    With exact=False a head of other sizes is accepted (graded elsewhere) and gets seeded values
    of its own shapes where the grader's do not fit."""
    hidden_dim, output_dim, n_layers, bidirectional = arch
    gru_state = rnn.state_dict()
    g = torch.Generator().manual_seed(seed)
    state, linear = {}, []
    student_state = state_tensors(ctx, handle, "BERTGRUSentiment")
    gru_names = [name for name in student_state if not name.startswith("bert.") and GRU_PARAM.search(name)]
    if exact and bidirectional and gru_names and not any(name.endswith("_reverse") for name in gru_names):
        raise CheckFailed(f"BERTGRUSentiment(hidden_dim={hidden_dim}, n_layers={n_layers}, bidirectional=True) has a GRU "
                          f"without backward-direction weights (its parameters are {gru_names[:4]}...): the GRU must be "
                          "built with bidirectional=bidirectional", diagnosis="gru_not_bidirectional")
    for name, tensor in student_state.items():
        if name.startswith("bert.") or not tensor.is_floating_point():
            continue
        match = GRU_PARAM.search(name)
        if match and match.group(1) in gru_state:
            value = gru_state[match.group(1)].detach().clone()
            if value.shape != tensor.shape:
                if exact:
                    raise CheckFailed(f"the GRU parameter {name} has shape {tuple(tensor.shape)}, expected "
                                      f"{tuple(value.shape)} (hidden_dim={hidden_dim}, n_layers={n_layers})")
                value = torch.rand(tensor.shape, generator=g) * 2 - 1
            state[name] = value
        else:
            linear.append((name, tuple(tensor.shape)))
    weights = [(n, s) for n, s in linear if len(s) == 2]
    biases = [(n, s) for n, s in linear if len(s) == 1]
    if len(weights) != 1 or len(biases) != 1:
        raise CheckFailed(f"expected one GRU and one Linear on top of BERT; the other parameters are {linear}")
    (w_name, w_shape), (b_name, b_shape) = weights[0], biases[0]
    weight, bias = out.weight.detach().clone(), out.bias.detach().clone()
    if w_shape != tuple(weight.shape):
        if exact:
            raise OutputLayerWidth(f"the output layer {w_name} has shape {w_shape}, expected {tuple(out.weight.shape)} "
                                   f"(hidden_dim={hidden_dim}, bidirectional={bidirectional})")
        weight = (torch.rand(w_shape, generator=g) * 2 - 1) * bool(weight.abs().sum())
    if b_shape != tuple(bias.shape):
        bias = torch.rand(b_shape, generator=g) * 2 - 1
    state[w_name], state[b_name] = weight, bias
    ctx.student.load_state_dict(handle, state, strict=False)
    return state, w_name, b_name


def summaries(rnn, features):
    """GRU summaries of a known mistake (and the right one) from BERT features."""
    output, hidden = rnn(features)
    H = rnn.hidden_size
    found = {"right": torch.cat((hidden[-2], hidden[-1]), dim=1) if rnn.bidirectional else hidden[-1]}
    if rnn.bidirectional:
        found["hidden[0:2]"] = torch.cat((hidden[0], hidden[1]), dim=1)
        found["output[:, -1]"] = output[:, -1]
        found["hidden[-1] twice"] = torch.cat((hidden[-1], hidden[-1]), dim=1)
        found["hidden[-2] twice"] = torch.cat((hidden[-2], hidden[-2]), dim=1)
        found["cat(hidden[-1], hidden[-2]), backward state first"] = torch.cat((hidden[-1], hidden[-2]), dim=1)
    else:
        found["hidden[0]"] = hidden[0]
        found["output[:, 0]"] = output[:, 0, :H]
    return found


def _packed_summary(rnn, features, mask):
    """The right summary of a GRU run over the real tokens only (pack_padded_sequence), or None
    without padding (it then equals the plain one)."""
    if mask is None or bool(mask.bool().all()):
        return None
    lengths = mask.long().sum(1).clamp_min(1).cpu()
    packed = nn.utils.rnn.pack_padded_sequence(features, lengths, batch_first=True, enforce_sorted=False)
    _, hidden = rnn(packed)
    return torch.cat((hidden[-2], hidden[-1]), dim=1) if rnn.bidirectional else hidden[-1]


@torch.no_grad()
def expected_outputs(rnn, out, text, mask):
    """(the accepted outputs, {known mistake: its output}): the GRU over every position, as the
    reference runs it, or over the real tokens only (packed), are both right. BERT's features
    are the grader's own (the same tiny BERT, run here)."""
    features = bert_features(text, mask)
    plain = bert_features(text, None)
    variants = {name: out(h) for name, h in summaries(rnn, features).items()}
    accepted = [variants.pop("right")]
    packed = _packed_summary(rnn, features, mask)
    if packed is not None:
        accepted.append(out(packed))
    mistakes = {("no_attention_mask", "BERT run without the attention mask"): out(summaries(rnn, plain)["right"]),
                ("head_returns_probabilities", "the sigmoid of the right logits"): torch.sigmoid(accepted[0])}
    mistakes.update({("gru_wrong_hidden", f"the GRU summary {name}"): value for name, value in variants.items()})
    return accepted, mistakes


def student_forward(ctx, handle, text, mask, output_dim):
    got = ctx.student.call(handle, "__call__", text, attention_mask=mask)
    return expect_tensor(got, "BERTGRUSentiment output", shape=(text.size(0), output_dim))


def _graded_output(ctx, bert, arch, text, mask, seed, dropout=0.5, handle=None):
    """(the student's output, the accepted outputs, the known mistakes' outputs, the model) under the
    grader's GRU/Linear weights drawn from `seed`; `handle`: a model built for an earlier input."""
    if handle is None:
        handle = build_model(ctx, bert, arch, dropout=dropout)
        ctx.student.call(handle, "eval")
    rnn, out = grader_head(arch, seed)
    load_head(ctx, handle, arch, rnn, out)
    got = student_forward(ctx, handle, text, mask, arch[1])
    accepted, mistakes = expected_outputs(rnn, out, text, mask)
    return got, accepted, mistakes, handle


def _matching(got, mistakes):
    return [key for key, value in mistakes.items() if is_close(got, value, atol=1e-5)]


# A bigger input on which the known mistakes all differ from each other and from the right
# answers: a mistake seen on a small input is named only when it is seen here too.
CONFIRM_TEXT = torch.tensor([[5, 9, 2, 7, 11, 3], [4, 8, 6, 0, 0, 0], [13, 1, 10, 12, 0, 0]])
CONFIRM_MASK = (CONFIRM_TEXT != 0).long()


def _confirmed(ctx, bert, arch, key, dropout=0.5):
    hidden_dim, output_dim, n_layers, bidirectional = arch
    bigger = (max(hidden_dim, 3), max(output_dim, 2), n_layers, bidirectional)
    got, accepted, mistakes, _ = _graded_output(ctx, bert, bigger, CONFIRM_TEXT, CONFIRM_MASK, 4242, dropout)
    return key in _matching(got, mistakes) and not any(is_close(got, a, atol=1e-5) for a in accepted)


def _fed_one_direction(ctx, bert, arch):
    """Whether the model, its output layer loaded with seeded weights of its own shape, computes
    that layer of one final state of the bidirectional GRU (observed on the confirming input)."""
    handle = build_model(ctx, bert, arch)
    ctx.student.call(handle, "eval")
    rnn, out = grader_head(arch, 4242)
    state, w_name, b_name = load_head(ctx, handle, arch, rnn, out, exact=False, seed=4242)
    try:
        got = student_forward(ctx, handle, CONFIRM_TEXT, CONFIRM_MASK, arch[1])
    except (CheckFailed, StudentError):  # a forward that fails shows nothing of what it feeds the layer
        return False
    with torch.no_grad():
        output, hidden = rnn(bert_features(CONFIRM_TEXT, CONFIRM_MASK))
        states = (hidden[-1], hidden[-2], hidden[0], output[:, -1, :rnn.hidden_size])
        return any(state[w_name].shape[1] == h.shape[1] and is_close(got, F.linear(h, state[w_name], state[b_name]), atol=1e-5)
                   for h in states)


def compare_with_expected(ctx, ex, *, charged_elsewhere=(), dropout=0.5, model=None):
    """The student's output on `ex`, in eval mode, from a model built with `dropout`, is an accepted
    one; an output that matches a known mistake in `charged_elsewhere` passes too (another check
    charges it, and what this one looks at holds). `model`: (bert, handle) of an earlier call, to
    call one model on several inputs. Returns (bert, handle)."""
    arch, text, mask, seed = ex
    bert, built = model if model is not None else (tiny_bert(ctx), None)
    try:
        got, accepted, mistakes, handle = _graded_output(ctx, bert, arch, text, mask, seed, dropout, built)
    except OutputLayerWidth as failure:
        if arch.bidirectional and _fed_one_direction(ctx, bert, arch):
            raise CheckFailed(f"{failure.message}; it is given one direction's final state of the GRU",
                              diagnosis="gru_wrong_hidden") from None
        raise
    if any(is_close(got, value, atol=1e-5) for value in accepted):
        return bert, handle
    if not torch.equal(got, student_forward(ctx, handle, text, mask, arch[1])):
        raise CheckFailed(f"two forward passes of BERTGRUSentiment in eval mode on the same ids {text.tolist()} gave "
                          "different outputs: dropout is still active in eval mode (use self.dropout, an nn.Dropout, "
                          "or pass training=self.training)", diagnosis="dropout_in_eval")
    matches = [key for key in _matching(got, mistakes) if _confirmed(ctx, bert, arch, key, dropout)]
    diagnosis, what = matches[0] if matches else (None, None)
    if diagnosis in charged_elsewhere:
        return bert, handle
    hidden_dim, output_dim, n_layers, bidirectional = arch
    summary = "cat(hidden[-2], hidden[-1])" if bidirectional else "hidden[-1]"
    error = min((got - value).abs().max().item() for value in accepted) if got.shape == accepted[0].shape else float("nan")
    raise CheckFailed(
        f"BERTGRUSentiment(hidden_dim={hidden_dim}, output_dim={output_dim}, n_layers={n_layers}, "
        f"bidirectional={bidirectional}) under the grader's GRU/Linear weights: the output differs from "
        f"Linear({summary}) of the GRU over BERT's features (by {error:.3g} at least, over every position or over "
        "the real tokens only)"
        + (f"; it matches {what}" if what else "; it matches none of the known mistakes"),
        diagnosis=diagnosis,
        details={"expected": str(accepted[0].tolist())[:300], "got": str(got.tolist())[:300],
                 "attention_mask": str(mask.tolist())},
    )


# ---------------------------------------------------------------- gate (graders/checks/gates.py)

GATE_ARCH = (3, 2, 1, True)  # hidden_dim, output_dim, n_layers, bidirectional
GATE_TEXT = torch.tensor([[5, 9, 2, 7, 11], [4, 8, 6, 12, 3]])


def sentiment_gate(ctx, bert, arch=GATE_ARCH):
    """BERTGRUSentiment does its job, on ids of the gate's own, in eval mode: its output is
    repeatable, differs between two sentences, and changes when the grader loads other GRU and
    Linear weights (the output is computed by the model's GRU and Linear, not made up)."""
    handle = build_model(ctx, bert, arch)
    ctx.student.call(handle, "eval")
    mask = torch.ones_like(GATE_TEXT)
    what = f"the outputs of BERTGRUSentiment{arch} (eval mode, the grader's GRU/Linear weights)"

    def output():  # seeded alike, so that dropout left on in eval mode (charged in attention_mask) draws alike
        ctx.student.seed(ctx.seed)
        return student_forward(ctx, handle, GATE_TEXT, mask, arch[1])

    outputs = []
    for seed in (11, 12):
        rnn, out = grader_head(arch, seed)
        load_head(ctx, handle, arch, rnn, out, exact=False, seed=seed)
        outputs.append(output())
    if not torch.equal(outputs[-1], output()):
        raise CheckFailed(f"{what} differ between two calls on the same ids: the property earns no points until the "
                          "output is repeatable in eval mode", diagnosis="nondeterministic")
    expect_changes(outputs[0][0], outputs[0][1], what, "the sentence changes")
    expect_changes(outputs[0], outputs[1], what, "the GRU and Linear weights change")


# ---------------------------------------------------------------- the model


@check("sentiment.output_shape", "BERTGRUSentiment maps (B, T) ids and a mask to (B, output_dim)")
def output_shape(ctx):
    @ctx.given(sentiment_inputs())
    def prop(ex):
        arch, text, mask, _ = ex
        handle = build_model(ctx, tiny_bert(ctx), arch)
        ctx.student.call(handle, "eval")
        student_forward(ctx, handle, text, mask, arch[1])

    sentiment_gate(ctx, tiny_bert(ctx))


@check("sentiment.gru_summary", "The GRU's final states (both directions when bidirectional) feed the output layer: "
       "one model on two lengths, with a padded, a full or no attention mask (eval mode)")
def gru_summary(ctx):
    def prop(inputs):
        # dropout 0: in eval mode a right model ignores it, and dropout left on in eval mode is
        # attention_mask's to charge, so that the GRU summary is judged on its own; so is a mask that
        # never reaches BERT (the GRU summary of BERT run without it is right here)
        model = None
        for ex in inputs:
            model = compare_with_expected(ctx, ex, charged_elsewhere=("no_attention_mask",), dropout=0.0, model=model)

    # every pairing of depth and direction: which final states are the summary depends on both
    for n_layers, bidirectional in itertools.product((1, 2), (False, True)):
        ctx.given(sentiment_space(n_layers, bidirectional), max_examples=max(3, ctx.max_examples // 4))(prop)


HEAD_MISTAKES = ("head_returns_probabilities", "gru_wrong_hidden")


@check("sentiment.attention_mask", "The attention mask reaches BERT: padded batches give the expected predictions")
def attention_mask(ctx):
    @ctx.given(sentiment_inputs(padded=True))
    def prop(ex):
        # A head mistake (gru_summary's to charge) computed over BERT run with the mask shows
        # that the mask reached BERT.
        compare_with_expected(ctx, ex, charged_elsewhere=HEAD_MISTAKES)


@check("sentiment.bert_frozen", "BERT stays frozen: no gradient reaches it and an optimizer step leaves it unchanged")
def bert_frozen(ctx):
    bert = tiny_bert(ctx)
    expect_frozen_under_a_step(ctx, build_model(ctx, bert, (4, 1, 2, True), dropout=0.25))
    sentiment_gate(ctx, bert)


FROZEN_STEP_TEXT = torch.tensor([[5, 9, 2, 7, 11], [4, 8, 6, 12, 3], [13, 1, 10, 2, 9]])


def expect_frozen_under_a_step(ctx, handle, *, freeze_by_name=False):
    """One forward, backward and Adam step over every parameter of the student's model (built around
    the grader's tiny BERT) must leave BERT's weights as the grader loaded them and move the head.
    Judged on the weights read back before and after (the step itself reports nothing), and on the
    model's output, which must not change when the grader loads its BERT weights back: a BERT
    that moved cannot hide behind its state_dict."""
    known = bert_weights()
    before = state_tensors(ctx, handle, "BERTGRUSentiment")
    bert_names = {name for name, value in before.items()
                  if any(name.endswith(key) and torch.equal(value, known[key]) for key in known)}
    if len(bert_names) < len(known):
        raise CheckFailed(f"the model's state_dict holds {len(bert_names)} of the {len(known)} weight tensors of the BERT "
                          "it was given, as the grader loaded them: keep it as a sub-module (self.bert = bert) and "
                          "leave its weights as they are")
    ctx.student.task("sentiment.training_step", handle, FROZEN_STEP_TEXT, torch.ones_like(FROZEN_STEP_TEXT),
                     freeze_by_name=freeze_by_name)
    after = state_tensors(ctx, handle, "BERTGRUSentiment")
    changed = sorted(name for name, value in before.items()
                     if name not in after or after[name].shape != value.shape or not torch.equal(after[name], value))
    moved = [name for name in changed if name in bert_names]
    if moved:
        raise CheckFailed(f"after one backward and an Adam step over model.parameters(), {len(moved)} of BERT's "
                          f"{len(bert_names)} weight tensors, read back, had changed (e.g. {moved[:3]})",
                          diagnosis="bert_not_frozen", details={"numbers": {"bert_tensors_changed": len(moved)}})
    if not changed:
        raise CheckFailed("after one backward and an Adam step over model.parameters(), no weight of the GRU or the "
                          "output layer had changed (read back): the head must train")
    ctx.student.call(handle, "eval")
    mask = torch.ones_like(FROZEN_STEP_TEXT)

    def output():  # seeded alike, so that dropout left on in eval mode (graded elsewhere) draws alike
        ctx.student.seed(ctx.seed)
        return student_forward(ctx, handle, FROZEN_STEP_TEXT, mask, 1)

    stepped = output()
    ctx.student.load_state_dict(handle, {name: before[name] for name in bert_names}, strict=False)
    if not torch.equal(stepped, output()):
        raise CheckFailed("after one training step the model's output in eval mode changed when the grader loaded "
                          "BERT's weights back as they were, though the state_dict showed them unchanged: something "
                          "of BERT's that the state_dict does not show moved")


# ---------------------------------------------------------------- accuracy


@st.composite
def accuracy_inputs(draw):
    """Logits of either float dtype, never exactly 0 (where rounding sigmoid's 0.5 is a convention,
    the docstring's silence left open), labels as floats or integers, a batch of one included."""
    B = draw(st.integers(1, 10))
    magnitudes = draw(st.lists(st.floats(0.1, 3.0), min_size=B, max_size=B))
    signs = draw(st.lists(st.booleans(), min_size=B, max_size=B))
    labels = draw(st.lists(st.booleans(), min_size=B, max_size=B))
    dtype = draw(st.sampled_from((torch.float32, torch.float64)))
    label_dtype = draw(st.sampled_from((torch.float32, torch.long)))
    preds = torch.tensor([m if s else -m for m, s in zip(magnitudes, signs)], dtype=dtype)
    return AccuracyInput(preds, torch.tensor(labels, dtype=label_dtype))


def _as_float(value):
    if type(value) is torch.Tensor and value.numel() == 1:
        return float(value.item())
    if type(value) in (int, float):
        return float(value)
    raise CheckFailed(f"binary_accuracy must return a number (a 0-d tensor or a float), got {type(value).__name__}",
                      diagnosis="returns_wrong_type")


def accuracy_mistakes(preds, y):
    """{diagnosis: the values binary_accuracy returns with that mistake} for logits `preds`, labels `y`."""
    rounded = torch.round(preds)
    return {"accuracy_not_fraction": [(torch.round(torch.sigmoid(preds)) == y).float().sum().item()],
            "accuracy_no_sigmoid": [(rounded == y).float().mean().item(),
                                    (rounded.clamp(0, 1) == y).float().mean().item()]}


# Logits where the right accuracy (7/8), the count (7), rounding the logits (3/8 or, clamped,
# 5/8) and other wrong answers (0 or 1 of a floor division) all differ.
CONFIRM_PREDS = torch.tensor([0.3, 0.8, 1.2, -0.4, 2.6, -1.7, 0.1, -0.2])
CONFIRM_LABELS = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])


def _accuracy_mistake_confirmed(ctx, diagnosis):
    got = _as_float(ctx.student.call(MODULE, "binary_accuracy", CONFIRM_PREDS, CONFIRM_LABELS))
    return any(math.isclose(got, v, abs_tol=1e-6) for v in accuracy_mistakes(CONFIRM_PREDS, CONFIRM_LABELS)[diagnosis])


@check("sentiment.binary_accuracy", "binary_accuracy is the fraction of round(sigmoid(preds)) equal to the labels")
def binary_accuracy(ctx):
    @ctx.given(accuracy_inputs())
    def prop(ex):
        preds, y = ex
        got = _as_float(ctx.student.call(MODULE, "binary_accuracy", preds, y))
        right = (torch.round(torch.sigmoid(preds)) == y).float()
        expected = right.mean().item()
        if math.isclose(got, expected, abs_tol=1e-6):
            return
        matching = [d for d, variants in accuracy_mistakes(preds, y).items()
                    if any(math.isclose(got, v, abs_tol=1e-6) for v in variants)]
        # named only when the student's function also gives that mistake's answer on an input
        # where every known mistake answers differently
        confirm = [d for d in matching if _accuracy_mistake_confirmed(ctx, d)]
        diagnosis = confirm[0] if confirm else None
        raise CheckFailed(f"binary_accuracy(preds={[round(v, 3) for v in preds.tolist()]}, y={y.int().tolist()}) = {got:.4g}, "
                          f"expected {expected:.4g}", diagnosis=diagnosis,
                          details={"numbers": {"expected": expected, "got": got}})


# ---------------------------------------------------------------- train and evaluate


LR = 1e-2
EPOCH_ARCH = (4, 1, 2, True)  # hidden_dim, output_dim, n_layers, bidirectional


# An epoch's batch sizes: different, a batch of one among them, so that a mean over the examples
# (not over the batches, as the docstring says) and a batch squeezed to a scalar show.
EPOCH_SIZES = (4, 1, 3)


def tiny_batches(seed, sizes=EPOCH_SIZES, T=5):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for B in sizes:
        text = torch.randint(1, BERT["vocab_size"], (B, T), generator=g)
        lengths = torch.randint(2, T + 1, (B,), generator=g)
        mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
        label = torch.randint(0, 2, (B,), generator=g).float()
        batches.append((text * mask, mask, label))
    return batches


class Epoch:
    """The student's model (the grader's GRU and Linear loaded), batches and a criterion in the
    worker, ready for one call of train() or evaluate()."""

    def __init__(self, ctx, *, dropout, zero_output_weight=False, sizes=EPOCH_SIZES):
        self.ctx = ctx
        self.batches = tiny_batches(ctx.seed, sizes)
        self.handle = build_model(ctx, tiny_bert(ctx), EPOCH_ARCH, dropout=dropout)
        rnn, out = grader_head(EPOCH_ARCH, ctx.seed)
        if zero_output_weight:
            with torch.no_grad():
                out.weight.zero_()
        # the head's own sizes are graded in gru_summary: here any GRU and Linear will do
        self.loaded, self.weight_name, self.bias_name = load_head(ctx, self.handle, EPOCH_ARCH, rnn, out, exact=False,
                                                                  seed=ctx.seed)
        self.iterator, self.criterion = ctx.student.task("sentiment.epoch_inputs", self.batches)

    @property
    def labels(self):
        return [label for _, _, label in self.batches]

    @property
    def bias(self):
        return self.loaded[self.bias_name]

    def optimizer(self, names, lr=LR):
        return self.ctx.student.task("optimizer", self.handle, "Adam", lr, list(names))

    def train(self, optimizer):
        self.ctx.student.call(self.handle, "eval")  # started from the opposite mode
        return _returns(self.ctx.student.call(MODULE, "train", self.handle, self.iterator, optimizer, self.criterion))

    def evaluate(self, *, from_training_mode=True):
        """evaluate()'s (loss, accuracy), started from training mode (the opposite of the mode it
        must set) unless `from_training_mode` is False."""
        self.ctx.student.call(self.handle, "train" if from_training_mode else "eval")
        return _returns(self.ctx.student.call(MODULE, "evaluate", self.handle, self.iterator, self.criterion))

    def changed(self):
        """Names of the loaded head tensors whose value, read back, is not what the grader loaded."""
        back = state_tensors(self.ctx, self.handle, "BERTGRUSentiment")
        return sorted(name for name, value in self.loaded.items()
                      if name not in back or back[name].shape != value.shape or not torch.equal(back[name], value))

    def read_back(self, name):
        return state_tensors(self.ctx, self.handle, "BERTGRUSentiment")[name]

    def outputs_sigmoid_of_bias(self):
        """Whether the model, where its prediction must be its output bias alone (the output
        weight zero, or dropout 1.0 in training mode), returns sigmoid(bias) instead: a head that
        returns probabilities, charged in gru_summary. train() and evaluate() are then judged on
        what this model outputs, so that the head's mistake costs nothing more here."""
        text, mask, _ = self.batches[0]
        self.ctx.student.call(self.handle, "train")
        try:
            got = student_forward(self.ctx, self.handle, text, mask, 1).reshape(-1).float()
        except (StudentError, CheckFailed):
            return False
        bias = self.bias.reshape(-1)[0].float()
        as_bias = torch.allclose(got, bias.expand_as(got), atol=1e-6)
        return not as_bias and torch.allclose(got, torch.sigmoid(bias).expand_as(got), atol=1e-6)

    def eval_predictions(self):
        """The model's own predictions on every batch, asked for here in eval mode: (B,) each."""
        self.ctx.student.call(self.handle, "eval")
        return [student_forward(self.ctx, self.handle, text, mask, 1).reshape(-1) for text, mask, _ in self.batches]

    def relabel_for_accuracies(self, right_per_batch):
        """Shift the output bias so that about half the predictions are positive, then label each
        batch so that exactly right_per_batch[i] of its predictions are right: accuracies computed
        wrongly (a (B, 1) against (B,) comparison, no sigmoid, one batch only, a count) then
        differ from the right one, which they may match when every prediction has one sign."""
        flat = torch.cat(self.eval_predictions()).sort().values
        middle = (flat[(len(flat) - 1) // 2] + flat[len(flat) // 2]) / 2
        self.loaded[self.bias_name] = self.bias - middle
        self.ctx.student.load_state_dict(self.handle, {self.bias_name: self.loaded[self.bias_name]}, strict=False)
        batches = []
        for (text, mask, _), predictions, right in zip(self.batches, self.eval_predictions(), right_per_batch):
            label = (predictions > 0).float()
            wrong = predictions.abs().argsort()[: len(label) - right]  # the least confident ones
            label[wrong] = 1 - label[wrong]
            batches.append((text, mask, label))
        self.batches = batches
        self.iterator, self.criterion = self.ctx.student.task("sentiment.epoch_inputs", self.batches)


def _returns(result):
    """(loss, accuracy) as two floats, or None when train / evaluate returned something else."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return None
    values = []
    for value in result:
        if type(value) is torch.Tensor and value.numel() == 1 and value.is_floating_point():
            value = float(value.reshape(()))
        if type(value) not in (int, float):
            return None
        values.append(float(value))
    return values


def _check_returns(returned, result_repr, function):
    if returned is None:
        raise CheckFailed(f"{function} must return (mean loss, mean accuracy) as two numbers, got {result_repr}"[:300],
                          diagnosis="returns_wrong_type")


def bce_mean(predictions, labels):
    """The mean over batches of BCEWithLogitsLoss, and the same summed (a common variant)."""
    losses = [F.binary_cross_entropy_with_logits(p.float(), y).item() for p, y in zip(predictions, labels)]
    return sum(losses) / len(losses), sum(losses)


def replay_bias(bias, labels, lr, *, zero_grad=True, sigmoid_first=False):
    """The output bias after one epoch of train() when every prediction is that bias (the output
    weight is zero, or dropout 1.0 in training mode zeroes its input): Adam, one step per batch;
    `sigmoid_first` replays a loss taken on sigmoid(predictions) instead of the logits. Adam is
    written out as torch.optim.Adam computes it: torch.optim's first use imports the compiler
    stack, a second of every grade."""
    beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults, as the notebook uses it
    b = bias.detach().clone().float().requires_grad_(True)
    grad, m, v = torch.zeros_like(b), torch.zeros_like(b), torch.zeros_like(b)
    for step, y in enumerate(labels, start=1):
        if zero_grad:
            grad = torch.zeros_like(b)
        predictions = b.expand(len(y), b.numel())[:, 0]
        loss = F.binary_cross_entropy_with_logits(torch.sigmoid(predictions) if sigmoid_first else predictions, y)
        grad = grad + torch.autograd.grad(loss, b)[0]  # without zero_grad, gradients add up
        with torch.no_grad():
            m = beta1 * m + (1 - beta1) * grad  # first moment
            v = beta2 * v + (1 - beta2) * grad * grad  # second moment
            denominator = v.sqrt() / math.sqrt(1 - beta2 ** step) + eps
            b -= lr / (1 - beta1 ** step) * m / denominator  # bias-corrected step
    return b.detach()


def _close(got, expected, rel=1e-4, abs_=1e-5):
    return math.isclose(got, expected, rel_tol=rel, abs_tol=abs_)


@check("sentiment.train_steps", "train() takes one optimizer step per batch and the model's head learns")
def train_steps(ctx):
    # The output weight is zero and the optimizer holds only the output bias, so every prediction
    # is that bias in either mode, whatever the rest of the model computes: the grader replays the
    # epoch exactly and compares the bias read back after train().
    epoch = Epoch(ctx, dropout=0.25, zero_output_weight=True)
    n = len(epoch.batches)
    optimizer = epoch.optimizer([epoch.bias_name])
    counter = ctx.student.task("sentiment.count_steps", optimizer)  # names the mistake, never scores it
    probabilities = epoch.outputs_sigmoid_of_bias()
    returned = epoch.train(optimizer)
    got = epoch.read_back(epoch.bias_name)
    numbers = {"bias_before": epoch.bias.tolist(), "bias_after": got.tolist()}
    if torch.equal(got, epoch.bias):
        steps = ctx.student.getattr(counter, "steps")
        held = (f"after train() over {n} batches the output layer's bias, the one parameter the optimizer held, "
                "did not change")
        if steps == 0:
            raise CheckFailed(f"{held}: optimizer.step() was never called", diagnosis="train_no_step",
                              details={"numbers": numbers})
        calls = f"optimizer.step() was called {steps} times" if type(steps) is int else "optimizer.step() was called"
        raise CheckFailed(f"{held}, though {calls}: no step found a gradient of that batch's loss to apply",
                          details={"numbers": numbers})
    expected = replay_bias(epoch.bias, epoch.labels, LR, sigmoid_first=probabilities)
    numbers["expected_bias_after"] = expected.tolist()
    if not torch.allclose(got, expected, rtol=1e-4, atol=1e-6):
        if torch.allclose(got, replay_bias(epoch.bias, epoch.labels, LR, zero_grad=False, sigmoid_first=probabilities),
                          rtol=1e-4, atol=1e-6):
            diagnosis, why = "zero_grad_missing", ": the gradients of earlier batches were added to each step's"
        elif not probabilities and torch.allclose(got, replay_bias(epoch.bias, epoch.labels, LR, sigmoid_first=True),
                                                  rtol=1e-4, atol=1e-6):
            diagnosis, why = "double_sigmoid", ": the loss was taken on sigmoid(predictions)"
        else:
            diagnosis, why = None, ""
        raise CheckFailed(f"after train() over {n} batches the output bias is {got.tolist()}; one Adam step per batch "
                          f"on BCEWithLogitsLoss gives {expected.tolist()}{why}", diagnosis=diagnosis,
                          details={"numbers": numbers})
    _check_returns(returned, "something else", "train(model, iterator, optimizer, criterion)")


@check("sentiment.train_values", "train() returns the mean loss and mean accuracy over the batches")
def train_values(ctx):
    # The output weight is zero and the optimizer (over the output bias) has learning rate 0, so
    # every prediction of the epoch is that bias, whatever the mode or the steps taken: the loss
    # and accuracy of each batch are known here.
    epoch = Epoch(ctx, dropout=0.25, zero_output_weight=True)
    probabilities = epoch.outputs_sigmoid_of_bias()
    returned = epoch.train(epoch.optimizer([epoch.bias_name], lr=0.0))
    _check_returns(returned, "something else", "train(model, iterator, optimizer, criterion)")
    output = torch.sigmoid(epoch.bias) if probabilities else epoch.bias
    predictions = [output.expand(len(y), 1)[:, 0] for y in epoch.labels]
    expect_epoch_means(ctx, "train()", returned, predictions, epoch.labels)


def expect_epoch_means(ctx, function, returned, predictions, labels):
    """`returned` (loss, accuracy) are the means over the batches of BCEWithLogitsLoss and of the
    accuracy (right, or the student's own binary_accuracy, graded on its own) of `predictions`."""
    loss, loss_sum = bce_mean(predictions, labels)
    right = sum(((torch.sigmoid(p) > 0.5).float() == y).float().mean().item()
                for p, y in zip(predictions, labels)) / len(predictions)
    own = sum(_as_float(ctx.student.call(MODULE, "binary_accuracy", p, y))
              for p, y in zip(predictions, labels)) / len(predictions)
    got = returned
    if _close(got[0], loss) and (math.isclose(got[1], right, abs_tol=1e-5) or math.isclose(got[1], own, abs_tol=1e-5)):
        return
    n = len(predictions)
    summed = _close(got[0], loss_sum) or any(math.isclose(got[1], a * n, abs_tol=1e-5) for a in (right, own))
    sigmoid_first = bce_mean([torch.sigmoid(p) for p in predictions], labels)[0]
    # (B, 1) outputs against (B,) labels broadcast to every (prediction, label) pair of a batch
    pairs = sum(((torch.sigmoid(p)[:, None] > 0.5).float() == y[None, :]).float().mean().item()
                for p, y in zip(predictions, labels)) / n
    broadcast = (_close(got[0], loss) and math.isclose(got[1], pairs, abs_tol=1e-5)
                 and not math.isclose(pairs, right, abs_tol=1e-5))
    weights = [len(y) / sum(len(y) for y in labels) for y in labels]  # each batch by its share of the examples
    per_example = (sum(w * F.binary_cross_entropy_with_logits(p.double(), y.double()).item()
                       for w, p, y in zip(weights, predictions, labels)),
                   sum(w * ((torch.sigmoid(p) > 0.5).float() == y).float().mean().item()
                       for w, p, y in zip(weights, predictions, labels)))
    over_examples = (_close(got[0], per_example[0]) and math.isclose(got[1], per_example[1], abs_tol=1e-5)
                     and not (_close(per_example[0], loss) and math.isclose(per_example[1], right, abs_tol=1e-5)))
    diagnosis = ("epoch_sum_not_mean" if summed and n > 1 else
                 "double_sigmoid" if _close(got[0], sigmoid_first) else
                 "accuracy_broadcast" if broadcast else
                 "epoch_mean_over_examples" if over_examples else None)
    raise CheckFailed(f"{function} returned (loss, accuracy) = ({got[0]:.5g}, {got[1]:.4g}), expected the means over "
                      f"its {n} batches ({loss:.5g}, {right:.4g})"
                      + (": its accuracy is that of every (prediction, label) pair of a batch" if broadcast else ""),
                      diagnosis=diagnosis,
                      details={"numbers": {"expected": [loss, right], "got": list(got),
                                           "margin": max(abs(got[0] - loss) / (1e-5 + 1e-4 * abs(loss)),
                                                         min(abs(got[1] - right), abs(got[1] - own)) / 1e-5)}})


@check("sentiment.train_mode", "train() puts the model in training mode (dropout on)")
def train_mode(ctx):
    # Dropout 1.0 zeroes the summary in training mode, so the model predicts its output bias alone
    # and only that bias can learn; in eval mode the GRU and the output weight learn too.
    epoch = Epoch(ctx, dropout=1.0, sizes=(5,))  # an epoch of one batch
    probabilities = epoch.outputs_sigmoid_of_bias()
    returned = epoch.train(epoch.optimizer(epoch.loaded))
    changed = epoch.changed()
    others = [name for name in changed if name != epoch.bias_name]
    if others:
        raise CheckFailed(f"with dropout 1.0 a model in training mode predicts its output bias alone, so only that bias "
                          f"can learn; after train(), which started from eval mode, {others[:3]} changed too: call "
                          "model.train() first", diagnosis="train_no_train_mode")
    if changed:
        got = epoch.read_back(epoch.bias_name)
        replays = [replay_bias(epoch.bias, epoch.labels, LR, zero_grad=z, sigmoid_first=probabilities) for z in (True, False)]
        if any(torch.allclose(got, r, rtol=1e-4, atol=1e-6) for r in replays):
            return
        raise CheckFailed(f"with dropout 1.0 a model in training mode predicts its output bias alone; after train() the "
                          f"bias is {got.tolist()}, while Adam on those predictions gives {replays[0].tolist()}",
                          details={"numbers": {"expected": replays[0].tolist(), "got": got.tolist()}})
    # no step was taken (graded in train_steps): the loss train() returns tells the mode
    _check_returns(returned, "something else", "train(model, iterator, optimizer, criterion)")
    output = torch.sigmoid(epoch.bias) if probabilities else epoch.bias
    trained = bce_mean([output.expand(len(y), 1)[:, 0] for y in epoch.labels], epoch.labels)
    evaluated = bce_mean(epoch.eval_predictions(), epoch.labels)
    loss = returned[0]
    if any(_close(loss, v) for v in trained):
        return
    if any(_close(loss, v) for v in evaluated):
        raise CheckFailed(f"train() returned the loss {loss:.5g} of the model in eval mode; with dropout 1.0 in training "
                          f"mode it is {trained[0]:.5g}: call model.train() first", diagnosis="train_no_train_mode")
    raise CheckFailed(f"train() returned the loss {loss:.5g}; with dropout 1.0 in training mode the mean loss over "
                      f"the batches is {trained[0]:.5g}", details={"numbers": {"expected": trained[0], "got": loss}})


@check("sentiment.evaluate_mode", "evaluate() puts the model in eval mode (dropout off) and leaves its weights alone")
def evaluate_mode(ctx):
    # The mode shows in the loss evaluate() returns: dropout 1.0 makes a model in training mode
    # predict its output bias alone. Whether gradients were enabled shows in no output; the
    # harness's watch of the model's calls (`sentiment.watch`) is quoted as evidence, never scored.
    epoch = Epoch(ctx, dropout=1.0)
    watch = ctx.student.task("sentiment.watch", epoch.handle)
    returned = epoch.evaluate()
    record = ctx.student.call(watch, "stop")
    if epoch.changed():
        raise CheckFailed("evaluate() changed the model's parameters")
    _check_returns(returned, "something else", "evaluate(model, iterator, criterion)")
    loss = returned[0]
    evaluated = bce_mean(epoch.eval_predictions(), epoch.labels)
    trained = bce_mean([epoch.bias.expand(len(y), 1)[:, 0] for y in epoch.labels], epoch.labels)
    if not any(_close(loss, v) for v in evaluated):
        if any(_close(loss, v) for v in trained):
            raise CheckFailed(f"evaluate(), which started from training mode, returned the loss {loss:.5g} of the model "
                              f"with dropout on (in eval mode it is {evaluated[0]:.5g}): call model.eval() first",
                              diagnosis="evaluate_no_eval_mode")
        raise CheckFailed(f"evaluate() returned the loss {loss:.5g}; the model in eval mode gives a mean loss of "
                          f"{evaluated[0]:.5g} over the batches",
                          details={"numbers": {"expected": evaluated[0], "got": loss}})
    grad_enabled = record.get("grad_enabled") if isinstance(record, dict) else None
    if isinstance(grad_enabled, list) and any(grad_enabled):
        return CheckOutcome(message="Seen in the worker, not scored: evaluate() ran the model with gradients enabled; "
                                    "wrap its loop in torch.no_grad() to save the memory of autograd graphs",
                            details={"observed_mistakes": ["evaluate_grad_enabled"]})
    return None


# Right predictions in the batches of 4, 1 and 3: 0.75, 1.0 and 1/3, a mean of 0.694 over the
# batches (5 of 8 examples: 0.625).
EVALUATE_RIGHT_PER_BATCH = (3, 1, 1)


@check("sentiment.evaluate_values", "evaluate() returns the mean loss and mean accuracy over the batches")
def evaluate_values(ctx):
    epoch = Epoch(ctx, dropout=0.0)  # dropout left on in eval mode is charged in attention_mask, not here
    epoch.relabel_for_accuracies(EVALUATE_RIGHT_PER_BATCH)
    # started in eval mode: a missing model.eval() is evaluate_mode's to charge, not again here
    returned = epoch.evaluate(from_training_mode=False)
    _check_returns(returned, "something else", "evaluate(model, iterator, criterion)")
    # the student's own binary_accuracy is graded on its own: a wrong one is not blamed twice
    expect_epoch_means(ctx, "evaluate()", returned, epoch.eval_predictions(), epoch.labels)


# ---------------------------------------------------------------- hyper-parameters

HYPERPARAMETER_TYPES = {
    "hidden_dim": (int, lambda v: 1 <= v <= 4096),
    "n_layers": (int, lambda v: 1 <= v <= 8),
    "bidirectional": (bool, lambda v: True),
    "dropout": (float, lambda v: 0.0 <= v < 1.0),
    "learning_rate": (float, lambda v: 0.0 < v <= 1.0),
    "n_epochs": (int, lambda v: 1 <= v <= 100),
    "batch_size": (int, lambda v: 1 <= v <= 4096),
}


@check("sentiment.hyperparameters", "HYPERPARAMETERS are complete, sane, and build the model")
def hyperparameters(ctx):
    values = ctx.student.getattr(MODULE, "HYPERPARAMETERS")
    if not isinstance(values, dict):
        raise CheckFailed(f"HYPERPARAMETERS must be a dict, got {type(values).__name__}", diagnosis="hyperparameters_invalid")
    problems = []
    for key, (kind, sane) in HYPERPARAMETER_TYPES.items():
        if key not in values:
            problems.append(f"{key} is missing")
            continue
        value = values[key]
        ok_type = type(value) is kind or (kind is float and type(value) is int and type(value) is not bool)
        if not ok_type:
            problems.append(f"{key} should be {kind.__name__}, got {type(value).__name__} {value!r}")
        elif not sane(value):
            problems.append(f"{key} = {value!r} is out of range")
    if problems:
        raise CheckFailed("HYPERPARAMETERS: " + "; ".join(problems), diagnosis="hyperparameters_invalid")
    arch = {key: values[key] for key in ("hidden_dim", "n_layers", "bidirectional", "dropout")}
    ctx.student.construct(MODULE, "BERTGRUSentiment", tiny_bert(ctx), arch["hidden_dim"], 1, arch["n_layers"],
                          arch["bidirectional"], arch["dropout"])  # the model the fine-tuning will build
    # data alone earns nothing: the model they build must also compute
    sentiment_gate(ctx, tiny_bert(ctx), (arch["hidden_dim"], 1, arch["n_layers"], arch["bidirectional"]))

