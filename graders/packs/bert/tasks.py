"""The assignment's own harness tasks (graders/sandbox/harness.py): stand-in models, probes and
builders its checks need in the worker, and the fine-tuning's training loop.

What the checks' plain calls need and cannot construct themselves: a stand-in model, an iterator
of batches. The checks score what the student's code does with them by reading back its return
values and the weights (`state_dict`), compared with what the grader computes itself; a builder
reports nothing about the student's code. The one measurement, `sentiment.watch`, is unscored
evidence: a check may quote it, never score it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from graders.sandbox.harness import TaskContext, task


class _PerfectOnInputs(torch.nn.Module):
    """Stand-in for BertModel in the pre-training step: predicts, with logit `scale`, the id it is
    given, and on <mask> (= vocab_size) logits `scale * mask_tilt * j / vocab_size` leaning towards
    the high ids j. Its loss on a token it sees unchanged is ~0, so the sum of the per-token losses
    is known from its inputs alone (checks/bert.py); every <mask> it sees carries gradient, so a
    batch masked only with <mask> still moves `scale`."""

    def __init__(self, vocab_size: int, scale: float, stale_grad: float | None = None, mask_tilt: float = 0.0) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.mask_tilt = mask_tilt
        self.scale = torch.nn.Parameter(torch.tensor(float(scale)))
        if stale_grad is not None:  # left over from an earlier step: the step must clear it
            self.scale.grad = torch.tensor(float(stale_grad))
        self.seen: list[torch.Tensor] = []  # only to explain a failure, never to score
        self.masks_seen: list[Any] = []  # the padding masks the step passed

    def forward(self, batch_text: torch.Tensor, mask: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.seen.append(batch_text.detach().clone())
        self.masks_seen.append(mask.detach().clone() if isinstance(mask, torch.Tensor) else None)
        ids = batch_text.long().clamp(0, self.vocab_size)
        onehot = torch.nn.functional.one_hot(ids, self.vocab_size + 1)[..., : self.vocab_size].float()
        tilt = self.mask_tilt * torch.arange(self.vocab_size, dtype=torch.float32) / self.vocab_size
        return self.scale * (onehot + (ids == self.vocab_size).float()[..., None] * tilt)

    def scale_grad(self) -> float | None:
        """Only to name a mistake (no backward / no step), never to score."""
        return None if self.scale.grad is None else float(self.scale.grad)


@task("bert.probe_model")
def bert_probe_model(ctx: TaskContext, vocab_size: int, scale: float, stale_grad: float | None = None,
                     mask_tilt: float = 0.0) -> Any:
    """The pre-training stand-in model (above), in training mode, with a gradient left from an
    earlier step if `stale_grad` is given."""
    return _PerfectOnInputs(vocab_size, scale, stale_grad, mask_tilt).train()


class _Batches:
    """What the student's train / evaluate iterate over: batches with .text, .attention_mask, .label."""

    def __init__(self, batches: list) -> None:
        import types

        self.batches = [types.SimpleNamespace(text=t, attention_mask=m, label=y) for t, m, y in batches]

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


@task("sentiment.epoch_inputs")
def sentiment_epoch_inputs(ctx: TaskContext, batches: list) -> list:
    """[iterator, criterion] for the student's train / evaluate: `batches` is a list of
    (text, attention_mask, label), the criterion BCEWithLogitsLoss."""
    return [_Batches(batches), torch.nn.BCEWithLogitsLoss()]


class _Watch:
    """Records, for every forward call of a model, its mode and whether gradients were enabled."""

    def __init__(self, model: Any) -> None:
        self.training: list = []
        self.grad_enabled: list = []
        self._hook = model.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: Any, args: Any, kwargs: Any) -> None:
        self.training.append(bool(module.training))
        self.grad_enabled.append(bool(torch.is_grad_enabled()))

    def stop(self) -> dict:
        self._hook.remove()
        return {"training": list(self.training), "grad_enabled": list(self.grad_enabled)}


class _StepCounter:
    """Counts the optimizer's step() calls."""

    def __init__(self, optimizer: Any) -> None:
        self.steps = 0
        optimizer.register_step_pre_hook(self._count)

    def _count(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.steps += 1


@task("sentiment.count_steps")
def sentiment_count_steps(ctx: TaskContext, optimizer: Any) -> Any:
    """A measurement, evidence for a diagnosis only: count the optimizer's step() calls (`.steps`)."""
    return _StepCounter(optimizer)


@task("sentiment.watch")
def sentiment_watch(ctx: TaskContext, model: Any) -> Any:
    """A measurement, so unscored evidence only: watch the model's forward calls."""
    return _Watch(model)


# ---------------------------------------------------------------- stand-ins for other parts' modules
#
# A check of one part that needs a module graded in another part (BERT is built from the student's
# positional encoding and blocks, a block from the student's multi-head attention) runs with the
# grader's stand-in in its place, so that a mistake of that module is charged in its own part only.
# The stand-ins keep the interface the template's docstrings give, have no parameters, and are
# plainly not the assignment's solution: each position averages the positions the padding mask
# leaves open, weighted by exp(-|i - j|) (position dependent, reads its context, honours the mask),
# and the positional stand-in adds sin((t + 1) / (j + 1)). They are what the grader substitutes,
# not something it scores: a submission that skips the substitution is graded on its own modules.


def _open_keys(x: torch.Tensor, mask: Any) -> torch.Tensor:
    """(B, 1, T) True where a key may be attended to: a (B, T) mask holds 1 / True at padding."""
    B, T = x.shape[0], x.shape[1]
    if mask is None:
        return torch.ones(B, 1, T, dtype=torch.bool, device=x.device)
    if not isinstance(mask, torch.Tensor) or mask.numel() != B * T:
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"the grader's stand-in module was given a padding mask of shape {shape}; "
                         f"the docstring asks for (B, T) = ({B}, {T}) with 1 at padding")
    return ~mask.reshape(B, 1, T).bool().to(x.device)


def _mix(x: torch.Tensor, mask: Any) -> torch.Tensor:
    """Each position's average of the open positions, weighted by exp(-|i - j|)."""
    T = x.shape[1]
    pos = torch.arange(T, device=x.device, dtype=x.dtype)
    weights = torch.exp(-(pos[:, None] - pos[None, :]).abs())[None] * _open_keys(x, mask)  # (B, T, T)
    return weights / weights.sum(-1, keepdim=True).clamp_min(1e-12) @ x


class StandInAttention(torch.nn.Module):
    """For MultiHeadAttention: forward(embedding (B, T, E), mask=None) -> (B, T, E)."""

    def forward(self, embedding: torch.Tensor, mask: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _mix(embedding, mask)


class StandInBlock(torch.nn.Module):
    """For TransformerBlock: forward((embedding, mask)) -> (embedding + mixed, mask)."""

    def forward(self, inputs: Any, *args: Any, **kwargs: Any) -> tuple:
        embedding, mask = inputs
        return embedding + _mix(embedding, mask), mask


class StandInPositions(torch.nn.Module):
    """For PositionalEncoding: forward(x (B, T, E)) -> x + sin((t + 1) / (j + 1)) at position t, feature j."""

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        t = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)[:, None]
        j = torch.arange(1, x.shape[2] + 1, device=x.device, dtype=x.dtype)[None, :]
        return x + torch.sin(t / j)


STAND_INS = {
    "encoder.TransformerBlock": StandInBlock,
    "encoder.PositionalEncoding": StandInPositions,
    "attention.MultiHeadAttention": StandInAttention,
}


@task("stand_ins")
def stand_ins(ctx: TaskContext, model: Any, names: list) -> list:
    """Replace every sub-module of `model` that is an instance of one of the student's classes
    `names` (keys of STAND_INS, e.g. "encoder.TransformerBlock") by the grader's stand-in, the
    outermost first. Returns the paths replaced."""
    classes = []
    for name in names:
        module_name, class_name = name.split(".")
        cls = getattr(ctx.student_module(module_name), class_name, None)
        if isinstance(cls, type):
            classes.append((cls, STAND_INS[name]))
    replaced = []

    def visit(parent: Any, prefix: str) -> None:
        # every place a module holds a child, a module held twice (one block repeated) included
        for child_name, child in list(parent._modules.items()):
            if child is None:
                continue
            path = f"{prefix}{child_name}"
            stand_in = next((s for cls, s in classes if isinstance(child, cls)), None)
            if stand_in is not None:
                setattr(parent, child_name, stand_in().train(child.training))
                replaced.append(path)
            else:
                visit(child, path + ".")

    visit(model, "")
    return replaced


def _dropping_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_drop_rate: float = 0.1,
                        mask: Any = None) -> tuple:
    """A scaled_dot_product as the docstring asks, dropping out at whatever rate it is given: what a
    module's own handling of the rate is seen through (a function that never drops hides it)."""
    logits = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    if mask is not None:
        logits = logits.masked_fill((mask[:, None, None, :] if mask.dim() == 2 else mask).bool(), float("-inf"))
    attention = torch.nn.functional.dropout(torch.softmax(logits, -1), p=attn_drop_rate)
    return attention @ v, attention


def _exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_drop_rate: float = 0.1,
                     mask: Any = None) -> tuple:
    """The docstring's scaled_dot_product, whatever rate it is given: nothing drops."""
    return _dropping_attention(q, k, v, 0.0, mask)


@contextlib.contextmanager
def _grader_attention(ctx: TaskContext, function: Any):
    """The student's attention.py with `function` as its scaled_dot_product (which the student's
    modules call by that name), restored afterwards."""
    module = ctx.student_module("attention")
    original = getattr(module, "scaled_dot_product", None)
    module.scaled_dot_product = function
    try:
        yield
    finally:
        module.scaled_dot_product = original


@task("bert.mha_with_dropping_attention")
def mha_with_dropping_attention(ctx: TaskContext, model: Any, x: torch.Tensor, *, training: bool,
                                passes: int = 2, seed: int = 0) -> list:
    """`passes` forward passes of the student's MultiHeadAttention, or of a module built on it (a
    block, `x` then its (embedding, mask)), with the grader's `_dropping_attention` in place of the
    student's scaled_dot_product, in training or eval mode; the function and the mode are restored."""
    was_training = model.training
    model.train(training)
    torch.manual_seed(seed)
    try:
        with _grader_attention(ctx, _dropping_attention), torch.no_grad():
            return [model(x) for _ in range(passes)]
    finally:
        model.train(was_training)


@task("bert.mha_with_exact_attention")
def mha_with_exact_attention(ctx: TaskContext, model: Any, x: torch.Tensor, mask: Any = None) -> Any:
    """The student's MultiHeadAttention on (x, mask), in the mode it is in, with the docstring's
    scaled_dot_product without dropout in place of the student's: the module's own code, judged
    where the student's function raises (that is charged in part attention; a rate passed in eval
    mode, in mha.eval_deterministic)."""
    with _grader_attention(ctx, _exact_attention), torch.no_grad():
        return model(x, mask)


@task("bert.text_after_mask_inputs")
def text_after_mask_inputs(ctx: TaskContext, text: torch.Tensor, vocab_size: int, mask_token_ind: int,
                           pad_ind: int = 0, mask_rate: float = 0.15) -> torch.Tensor:
    """The tensor the student's mask_inputs was given, after the call: whether it writes into its input."""
    given = text.clone()
    ctx.student_module("bert").mask_inputs(given, vocab_size, mask_token_ind, pad_ind=pad_ind, mask_rate=mask_rate)
    return given


@task("bert.fresh_model")
def bert_fresh_model(ctx: TaskContext, vocab_size: int, embed_dim: int, seed: int) -> Any:
    """A freshly initialised masked-LM model of the grader's, for pretrain_step (in training mode):
    Embedding(vocab_size + 1, E), the positional and block stand-ins, Linear(E, vocab_size).
    forward(batch_text, mask=None) -> (B, T, vocab_size) logits."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _FreshMaskedLM(vocab_size, embed_dim).train()


class _FreshMaskedLM(torch.nn.Module):
    def __init__(self, vocab_size: int, embed_dim: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size + 1, embed_dim)
        self.positions = StandInPositions()
        self.block = StandInBlock()
        self.mask_pred = torch.nn.Linear(embed_dim, vocab_size)

    def forward(self, batch_text: torch.Tensor, mask: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
        x, _ = self.block((self.positions(self.embed(batch_text)), mask))
        return self.mask_pred(x)


# ---------------------------------------------------------------- sentiment (checks/sentiment.py)


@task("sentiment.tiny_bert")
def sentiment_tiny_bert(ctx: TaskContext, seed: int, config: dict) -> Any:
    """A tiny transformers.BertModel with seeded weights, in eval mode; nothing is downloaded.
    The checks load their own weights into it."""
    from transformers import BertConfig, BertModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        bert = BertModel(BertConfig(**config, attn_implementation="eager"), add_pooling_layer=False)
    return bert.eval()


@task("sentiment.training_step")
def sentiment_training_step(ctx: TaskContext, model: Any, text: torch.Tensor, mask: torch.Tensor, *,
                            freeze_by_name: bool = False) -> None:
    """One forward in training mode, backward and Adam step over every parameter of the model, as
    the notebook's optimizer holds them (after its freeze of the parameters named bert* if
    `freeze_by_name`). Reports nothing: the grader reads the weights back before and after."""
    if freeze_by_name:
        for name, param in model.named_parameters():
            if name.startswith("bert"):
                param.requires_grad = False
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    optimizer.zero_grad()
    (model(text, attention_mask=mask).float() ** 2).mean().backward()
    optimizer.step()


# ---------------------------------------------------------------- fine-tuning (checks/finetune.py)


@task("finetune.start")
def finetune_start(ctx: TaskContext, *, features: dict, train_labels: torch.Tensor, hyperparameters: dict,
                   time_budget_s: float, device: str, seed: int, probe_size: int | None = None) -> Any:
    """The student's model, train and evaluate with the `hyperparameters` the grader validated,
    ready to train on cached features (a `Training`, kept here: the grader drives it through the
    tasks below). `features` maps train / valid / test to (cache folder, rows); only the training
    labels are here."""
    import numpy as np

    from graders.packs.bert.finetune.cache import open_features
    from graders.packs.bert.finetune.training import Training

    views = {name: open_features(folder).subset(np.asarray(rows, dtype=np.int64))
             for name, (folder, rows) in features.items()}
    student = ctx.student_module("sentiment")
    return Training(student, hyperparameters, views["train"], train_labels.numpy(), views["valid"], views["test"],
                    time_budget_s, device, seed=seed, **({} if probe_size is None else {"probe_size": probe_size}))


@task("finetune.next_epoch")
def finetune_next_epoch(ctx: TaskContext, training: Any) -> Any:
    """One epoch: (its record, validation logits, test logits), or None once the student's code failed."""
    return training.next_epoch()


@task("finetune.finish")
def finetune_finish(ctx: TaskContext, training: Any) -> dict:
    """What the harness observed (evidence for diagnoses, never scored)."""
    return training.finish().summary()
