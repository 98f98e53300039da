"""Checks for the frozen-BERT + GRU sentiment model and its training loop (seed 004, part 7).

Everything runs on a tiny BertModel built in the worker from a fixed seed (nothing downloaded).
Expected outputs are computed here, in the grader, from BERT's features and a GRU and Linear
whose weights the grader chooses and loads into the student's model: no reference model needed.
"""

import math
import re

import torch
import torch.nn as nn
from hypothesis import strategies as st

from graders.checks.causal_lm import parameter_entries
from graders.checks.compare import expect_tensor, is_close
from graders.checks.framework import CheckFailed, check

MODULE = "sentiment"
BERT = {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 16, "max_position_embeddings": 16}
BERT_SEED = 20240
GRU_PARAM = re.compile(r"(?:^|\.)((?:weight|bias)_(?:ih|hh)_l\d+(?:_reverse)?)$")


# ---------------------------------------------------------------- strategies


@st.composite
def sentiment_inputs(draw, *, padded=False):
    """(hidden_dim, output_dim, n_layers, bidirectional), text (B, T), attention_mask (B, T), weights seed."""
    arch = (draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.booleans()))
    B, T = draw(st.integers(1, 3)), draw(st.integers(2 if padded else 1, 6))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(1, BERT["vocab_size"], (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    if padded:
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        lengths[0] = draw(st.integers(1, T - 1))  # at least one padded position
        mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
        text = text * mask  # pad id 0
    return arch, text, mask, seed + 1


# ---------------------------------------------------------------- helpers


def tiny_bert(ctx):
    return ctx.student.task("sentiment.tiny_bert", BERT_SEED, BERT)


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


def load_head(ctx, handle, arch, rnn, out):
    """Load the grader's GRU and Linear into the student's model, whatever the attribute names."""
    hidden_dim, output_dim, n_layers, bidirectional = arch
    gru_state = rnn.state_dict()
    state, linear = {}, []
    for p in parameter_entries(ctx, handle):
        name, shape = p["name"], tuple(p["shape"])
        if name.startswith("bert."):
            continue
        match = GRU_PARAM.search(name)
        if match and match.group(1) in gru_state:
            state[name] = gru_state[match.group(1)]
        else:
            linear.append((name, shape))
    weights = [(n, s) for n, s in linear if len(s) == 2]
    biases = [(n, s) for n, s in linear if len(s) == 1]
    if len(weights) != 1 or len(biases) != 1:
        raise CheckFailed(f"expected one GRU and one Linear on top of BERT; the other parameters are {linear}")
    (w_name, w_shape), (b_name, _) = weights[0], biases[0]
    if w_shape != tuple(out.weight.shape):
        diagnosis = "gru_wrong_hidden" if bidirectional and w_shape == (output_dim, hidden_dim) else None
        raise CheckFailed(f"the output layer {w_name} has shape {w_shape}, expected {tuple(out.weight.shape)} "
                          f"(hidden_dim={hidden_dim}, bidirectional={bidirectional})", diagnosis=diagnosis)
    state[w_name], state[b_name] = out.weight.detach().clone(), out.bias.detach().clone()
    ctx.student.load_state_dict(handle, state, strict=False)


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
def expected_outputs(ctx, bert, rnn, out, text, mask):
    """(the accepted outputs, {known mistake: its output}): the GRU over every position, as the
    reference runs it, or over the real tokens only (packed), are both right."""
    features = ctx.student.task("sentiment.bert_features", bert, text, mask)
    plain = ctx.student.task("sentiment.bert_features", bert, text, None)
    variants = {name: out(h) for name, h in summaries(rnn, features).items()}
    accepted = [variants.pop("right")]
    packed = _packed_summary(rnn, features, mask)
    if packed is not None:
        accepted.append(out(packed))
    mistakes = {("no_attention_mask", "BERT run without the attention mask"): out(summaries(rnn, plain)["right"])}
    mistakes.update({("gru_wrong_hidden", f"the GRU summary {name}"): value for name, value in variants.items()})
    return accepted, mistakes


def student_forward(ctx, handle, text, mask, output_dim):
    got = ctx.student.call(handle, "__call__", text, attention_mask=mask)
    return expect_tensor(got, "BERTGRUSentiment output", shape=(text.size(0), output_dim))


def _graded_output(ctx, bert, arch, text, mask, seed):
    """(the student's output, the accepted outputs, the known mistakes' outputs) under the grader's
    GRU/Linear weights drawn from `seed`."""
    handle = build_model(ctx, bert, arch)
    ctx.student.call(handle, "eval")
    rnn, out = grader_head(arch, seed)
    load_head(ctx, handle, arch, rnn, out)
    got = student_forward(ctx, handle, text, mask, arch[1])
    accepted, mistakes = expected_outputs(ctx, bert, rnn, out, text, mask)
    return got, accepted, mistakes


def _matching(got, mistakes):
    return [key for key, value in mistakes.items() if is_close(got, value, atol=1e-5)]


# A bigger input on which the known mistakes all differ from each other and from the right
# answers: a mistake seen on a small input is named only when it is seen here too.
CONFIRM_TEXT = torch.tensor([[5, 9, 2, 7, 11, 3], [4, 8, 6, 0, 0, 0], [13, 1, 10, 12, 0, 0]])
CONFIRM_MASK = (CONFIRM_TEXT != 0).long()


def _confirmed(ctx, bert, arch, key):
    hidden_dim, output_dim, n_layers, bidirectional = arch
    bigger = (max(hidden_dim, 3), max(output_dim, 2), n_layers, bidirectional)
    got, accepted, mistakes = _graded_output(ctx, bert, bigger, CONFIRM_TEXT, CONFIRM_MASK, 4242)
    return key in _matching(got, mistakes) and not any(is_close(got, a, atol=1e-5) for a in accepted)


def compare_with_expected(ctx, ex):
    arch, text, mask, seed = ex
    bert = tiny_bert(ctx)
    got, accepted, mistakes = _graded_output(ctx, bert, arch, text, mask, seed)
    if any(is_close(got, value, atol=1e-5) for value in accepted):
        return
    matches = [key for key in _matching(got, mistakes) if _confirmed(ctx, bert, arch, key)]
    diagnosis, what = matches[0] if matches else (None, None)
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


# ---------------------------------------------------------------- the model


@check("sentiment.output_shape", "BERTGRUSentiment maps (B, T) ids and a mask to (B, output_dim)")
def output_shape(ctx):
    @ctx.given(sentiment_inputs())
    def prop(ex):
        arch, text, mask, _ = ex
        handle = build_model(ctx, tiny_bert(ctx), arch)
        ctx.student.call(handle, "eval")
        student_forward(ctx, handle, text, mask, arch[1])


@check("sentiment.gru_summary", "The GRU's final states (both directions when bidirectional) feed the output layer")
def gru_summary(ctx):
    @ctx.given(sentiment_inputs())
    def prop(ex):
        compare_with_expected(ctx, ex)


@check("sentiment.attention_mask", "The attention mask reaches BERT: padded batches give the expected predictions")
def attention_mask(ctx):
    @ctx.given(sentiment_inputs(padded=True))
    def prop(ex):
        compare_with_expected(ctx, ex)


@check("sentiment.bert_frozen", "BERT stays frozen: no gradient reaches it and an optimizer step leaves it unchanged")
def bert_frozen(ctx):
    bert = tiny_bert(ctx)
    handle = build_model(ctx, bert, (4, 1, 2, True), dropout=0.25)
    (text,) = [torch.randint(1, BERT["vocab_size"], (3, 5), generator=torch.Generator().manual_seed(ctx.seed))]
    report = ctx.student.task("sentiment.frozen_step", handle, text, torch.ones(3, 5, dtype=torch.long))
    if report["bert_with_grad"] or report["bert_changed"]:
        names = report["bert_changed"] or report["bert_with_grad"]
        raise CheckFailed(f"after one backward and an Adam step over model.parameters(), {len(report['bert_with_grad'])} BERT "
                          f"parameters had a gradient and {len(report['bert_changed'])} changed (e.g. {names[:3]})",
                          diagnosis="bert_not_frozen")
    if report["head_changed"] == 0:
        raise CheckFailed("after one backward and an Adam step no parameter of the GRU or the output layer changed: "
                          "the head must train")


# ---------------------------------------------------------------- accuracy


@st.composite
def accuracy_inputs(draw):
    B = draw(st.integers(2, 10))
    magnitudes = draw(st.lists(st.floats(0.1, 3.0), min_size=B, max_size=B))
    signs = draw(st.lists(st.booleans(), min_size=B, max_size=B))
    labels = draw(st.lists(st.booleans(), min_size=B, max_size=B))
    preds = torch.tensor([m if s else -m for m, s in zip(magnitudes, signs)], dtype=torch.float32)
    return preds, torch.tensor(labels, dtype=torch.float32)


def _as_float(value):
    if type(value) is torch.Tensor and value.numel() == 1:
        return float(value.item())
    if type(value) in (int, float):
        return float(value)
    raise CheckFailed(f"binary_accuracy must return a number (a 0-d tensor or a float), got {type(value).__name__}",
                      diagnosis="returns_wrong_type")


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
        no_sigmoid = (torch.round(preds) == y).float().mean().item()
        no_sigmoid_clamped = (torch.round(preds).clamp(0, 1) == y).float().mean().item()
        if math.isclose(got, right.sum().item(), abs_tol=1e-6):
            diagnosis = "accuracy_not_fraction"
        elif math.isclose(got, no_sigmoid, abs_tol=1e-6) or math.isclose(got, no_sigmoid_clamped, abs_tol=1e-6):
            diagnosis = "accuracy_no_sigmoid"
        else:
            diagnosis = None
        raise CheckFailed(f"binary_accuracy(preds={[round(v, 3) for v in preds.tolist()]}, y={y.int().tolist()}) = {got:.4g}, "
                          f"expected {expected:.4g}", diagnosis=diagnosis,
                          details={"numbers": {"expected": expected, "got": got}})


# ---------------------------------------------------------------- train and evaluate


def tiny_batches(seed, n_batches=3, B=4, T=5):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        text = torch.randint(1, BERT["vocab_size"], (B, T), generator=g)
        lengths = torch.randint(2, T + 1, (B,), generator=g)
        mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
        label = torch.randint(0, 2, (B,), generator=g).float()
        batches.append((text * mask, mask, label))
    return batches


def run_epoch(ctx, function):
    bert = tiny_bert(ctx)
    handle = build_model(ctx, bert, (4, 1, 2, True), dropout=0.25)
    batches = tiny_batches(ctx.seed)
    report = ctx.student.task("sentiment.run_epoch", function, handle, batches)
    return report, len(batches)


def _check_returns(report, function):
    result = report["result"]
    if not isinstance(result, (tuple, list)) or len(result) != 2 or not all(type(v) in (int, float) for v in result):
        raise CheckFailed(f"{function}(model, iterator, optimizer, criterion) must return (mean loss, mean accuracy) as "
                          f"two numbers, got {result!r}"[:300], diagnosis="returns_wrong_type")


@check("sentiment.train_steps", "train() takes one optimizer step per batch and the model's head learns")
def train_steps(ctx):
    report, n = run_epoch(ctx, "train")
    if report["steps"] != n:
        raise CheckFailed(f"train() over {n} batches called optimizer.step() {report['steps']} times",
                          diagnosis="train_no_step" if report["steps"] == 0 else None)
    if report["head_changed"] == 0:
        raise CheckFailed("after train() no parameter of the GRU or the output layer changed", diagnosis="train_no_step")
    _check_returns(report, "train")


@check("sentiment.train_mode", "train() puts the model in training mode (dropout on)")
def train_mode(ctx):
    report, _ = run_epoch(ctx, "train")
    if not report["modes"] or not all(report["modes"]):
        raise CheckFailed(f"the model was called in modes {['train' if m else 'eval' for m in report['modes']]} during "
                          "train(), which started from eval mode: call model.train() first", diagnosis="train_no_train_mode")


@check("sentiment.evaluate_mode", "evaluate() puts the model in eval mode and computes no gradients")
def evaluate_mode(ctx):
    report, _ = run_epoch(ctx, "evaluate")
    if not report["modes"] or any(report["modes"]):
        raise CheckFailed(f"the model was called in modes {['train' if m else 'eval' for m in report['modes']]} during "
                          "evaluate(), which started from training mode: call model.eval() first",
                          diagnosis="evaluate_no_eval_mode")
    if any(report["grad_enabled"]):
        raise CheckFailed("evaluate() runs the model with gradients enabled: wrap the loop in torch.no_grad()",
                          diagnosis="evaluate_grad_enabled")
    if report["steps"] or report["head_changed"]:
        raise CheckFailed("evaluate() changed the model's parameters")


@check("sentiment.evaluate_values", "evaluate() returns the mean loss and mean accuracy over the batches")
def evaluate_values(ctx):
    report, _ = run_epoch(ctx, "evaluate")
    _check_returns(report, "evaluate")
    got, expected = report["result"], report["expected"]
    if not (math.isclose(got[0], expected[0], rel_tol=1e-4, abs_tol=1e-5) and math.isclose(got[1], expected[1], abs_tol=1e-5)):
        raise CheckFailed(f"evaluate() returned (loss, accuracy) = ({got[0]:.5g}, {got[1]:.4g}), expected the batch means "
                          f"({expected[0]:.5g}, {expected[1]:.4g})",
                          details={"numbers": {"expected": list(expected), "got": list(got)}})


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

