"""General-purpose harness tasks (see `graders.sandbox.harness` for how tasks work)."""

from __future__ import annotations

from typing import Any

import torch

from .harness import TaskContext, task


@task("forward")
def forward(ctx: TaskContext, model: Any, *inputs: Any, training: bool = False,
            seed: int | None = None, **kwargs: Any) -> Any:
    """`model(*inputs, **kwargs)` without gradients, in training or evaluation mode (dropout),
    seeded if asked; the model's own mode is restored afterwards."""
    was_training = model.training
    model.train(training)
    if seed is not None:
        torch.manual_seed(seed)
    try:
        with torch.no_grad():
            return model(*inputs, **kwargs)
    finally:
        model.train(was_training)


@task("call_many")
def call_many(ctx: TaskContext, target: Any, name: str,
              calls: list[tuple[tuple, dict]]) -> list[Any]:
    """Many calls of one function in a single round trip: `target` is a module name of the
    submission or an object, `calls` a list of `(args, kwargs)`; returns the list of results."""
    owner = ctx.student_module(target) if isinstance(target, str) else target
    function = getattr(owner, name)
    return [function(*args, **kwargs) for args, kwargs in calls]


# ---------------------------------------------------------------- BERT pre-training (graders/checks/bert.py)


class _PerfectOnInputs(torch.nn.Module):
    """Stand-in for BertModel in the pre-training step: predicts, with logit `scale`, the id it is
    given (uniform on <mask> = vocab_size). Its loss on a token it sees unchanged is ~0, so the sum
    of the per-token losses is known from its inputs alone. Records the inputs of every call."""

    def __init__(self, vocab_size: int, scale: float) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.scale = torch.nn.Parameter(torch.tensor(float(scale)))
        self.seen: list[torch.Tensor] = []

    def forward(self, batch_text: torch.Tensor, mask: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.seen.append(batch_text.detach().clone())
        ids = batch_text.long().clamp(0, self.vocab_size)
        onehot = torch.nn.functional.one_hot(ids, self.vocab_size + 1)[..., : self.vocab_size].float()
        return self.scale * onehot


@task("bert.pretrain_probe")
def bert_pretrain_probe(ctx: TaskContext, *, text: torch.Tensor, vocab_size: int, seed: int,
                        scale: float = 20.0, lr: float = 0.1) -> dict:
    """One student `pretrain_step` on the stand-in model with SGD. Returns the loss, the inputs the
    model saw (the masked batch), the scale before the step, and whether it changed / has a grad."""
    bert = ctx.student_module("bert")
    torch.manual_seed(seed)
    model = _PerfectOnInputs(vocab_size, scale)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss = bert.pretrain_step(model, optimizer, text.clone(), vocab_size, vocab_size, 0, 0.15)
    after = float(model.scale.detach())
    return {
        "loss": loss.detach().clone() if isinstance(loss, torch.Tensor) else loss,
        "inputs": model.seen[0] if model.seen else None,
        "n_calls": len(model.seen),
        "scale": float(scale),
        "param_changed": after != float(scale),
        "grad_none": model.scale.grad is None,
    }


@task("bert.pretrain_fresh")
def bert_pretrain_fresh(ctx: TaskContext, *, text: torch.Tensor, vocab_size: int, n_layers: int,
                        embed_dim: int, n_heads: int, seed: int, lr: float = 1e-4) -> dict:
    """One student `pretrain_step` on a fresh student BertModel with AdamW (seed 004's set-up).
    Returns the loss and which parameter tensors changed or hold a gradient."""
    bert = ctx.student_module("bert")
    torch.manual_seed(seed)
    model = bert.BertModel(n_layers, vocab_size, embed_dim, n_heads, 0.1, 0.1)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    loss = bert.pretrain_step(model, optimizer, text.clone(), vocab_size, vocab_size, 0, 0.15)
    changed = sum(int(not torch.equal(b, p.detach())) for b, p in zip(before, params))
    return {
        "loss": loss.detach().clone() if isinstance(loss, torch.Tensor) else loss,
        "n_params": len(params),
        "n_changed": changed,
        "grad_none": all(p.grad is None for p in params),
    }


# ---------------------------------------------------------------- causal LM, minGPT, sentiment
# (graders/checks/causal_lm.py, gpt.py, sentiment.py)


@task("causal_lm.count_partly_frozen")
def causal_lm_count_partly_frozen(ctx: TaskContext, sizes: list, frozen: int) -> Any:
    """The student's count_parameters on Sequential(Linear(a, b), Linear(b, c)) with the first
    `frozen` layers frozen and a (100,) buffer registered: only trainable parameters count."""
    a, b, c = sizes
    module = torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Linear(b, c))
    module.register_buffer("table", torch.zeros(100))
    for layer in list(module)[:frozen]:
        layer.requires_grad_(False)
    return ctx.student_module("causal_lm").count_parameters(module)


@task("gpt.dataset_mro")
def gpt_dataset_mro(ctx: TaskContext, dataset: Any) -> list:
    """The qualified names of the classes in the MRO of a built LanguageModelingDataset."""
    return [f"{c.__module__}.{c.__qualname__}" for c in type.mro(type(dataset))]


@task("sentiment.tiny_bert")
def sentiment_tiny_bert(ctx: TaskContext, seed: int, config: dict) -> Any:
    """A tiny transformers.BertModel with seeded weights, in eval mode; nothing is downloaded."""
    from transformers import BertConfig, BertModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        bert = BertModel(BertConfig(**config, attn_implementation="eager"), add_pooling_layer=False)
    return bert.eval()


@task("sentiment.bert_features")
def sentiment_bert_features(ctx: TaskContext, bert: Any, text: torch.Tensor, mask: Any) -> torch.Tensor:
    """BERT's last hidden states (B, T, H), with or without an attention mask, in eval mode."""
    bert.eval()
    with torch.no_grad():
        return bert(text, attention_mask=mask)[0]


def _split_bert_parameters(model: Any) -> tuple[list, list]:
    """(BERT's named parameters, the others') of a BERTGRUSentiment, by identity with model.bert's."""
    bert = getattr(model, "bert", None)
    ids = {id(p) for p in bert.parameters()} if isinstance(bert, torch.nn.Module) else set()
    named = list(model.named_parameters())
    return [(n, p) for n, p in named if id(p) in ids], [(n, p) for n, p in named if id(p) not in ids]


@task("sentiment.frozen_step")
def sentiment_frozen_step(ctx: TaskContext, model: Any, text: torch.Tensor, mask: torch.Tensor) -> dict:
    """One forward (training mode), backward and Adam step over model.parameters(): which BERT
    parameters got a gradient or changed, and how many other parameters changed."""
    bert_params, head_params = _split_bert_parameters(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    optimizer.zero_grad()
    loss = (model(text, attention_mask=mask).float() ** 2).mean()
    loss.backward()
    with_grad = [n for n, p in bert_params if p.grad is not None and bool(p.grad.abs().sum() > 0)]
    optimizer.step()
    changed = [n for n, p in bert_params if not torch.equal(p.detach(), before[n])]
    head_changed = sum(int(not torch.equal(p.detach(), before[n])) for n, p in head_params)
    return {"bert_with_grad": with_grad, "bert_changed": changed, "head_changed": head_changed}


@task("sentiment.run_epoch")
def sentiment_run_epoch(ctx: TaskContext, function: str, model: Any, batches: list) -> dict:
    """The student's `train` or `evaluate` (by name) over a tiny iterator: a list of batches with
    .text, .attention_mask and .label, with Adam and BCEWithLogitsLoss, started from the opposite
    mode. Reports the mode and grad state of every forward call, optimizer steps, head parameters
    changed, the returned value, and for evaluate the batch means recomputed in eval mode (the
    accuracy with the student's own binary_accuracy, so that a wrong one is not blamed twice)."""
    import types

    training = function == "train"
    student_function = getattr(ctx.student_module("sentiment"), function)
    iterator = [types.SimpleNamespace(text=t, attention_mask=m, label=y) for t, m, y in batches]
    _, head_params = _split_bert_parameters(model)
    before = {n: p.detach().clone() for n, p in head_params}
    modes: list = []
    grad_enabled: list = []

    def spy(module: Any, args: Any, kwargs: Any) -> None:
        modes.append(bool(module.training))
        grad_enabled.append(bool(torch.is_grad_enabled()))

    hook = model.register_forward_pre_hook(spy, with_kwargs=True)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    steps: list = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    criterion = torch.nn.BCEWithLogitsLoss()
    model.train(not training)
    try:
        if training:
            result = student_function(model, iterator, optimizer, criterion)
        else:
            result = student_function(model, iterator, criterion)
    finally:
        hook.remove()
    if isinstance(result, (tuple, list)):
        values = [v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v for v in result]
        result = [float(v) if type(v) in (int, float) else repr(v)[:100] for v in values]
    else:
        result = repr(result)[:200]
    head_changed = sum(int(not torch.equal(p.detach(), before[n])) for n, p in head_params)
    expected = None
    if not training:
        model.eval()
        losses, accuracies = [], []
        with torch.no_grad():
            for batch in iterator:
                preds = model(batch.text, attention_mask=batch.attention_mask).reshape(-1)
                losses.append(criterion(preds, batch.label).item())
                accuracy = ctx.student_module("sentiment").binary_accuracy(preds, batch.label)
                accuracies.append(float(accuracy))
        expected = [sum(losses) / len(losses), sum(accuracies) / len(accuracies)]
    return {"modes": modes, "grad_enabled": grad_enabled, "steps": len(steps), "head_changed": head_changed,
            "result": result, "expected": expected}


# ---------------------------------------------------------------- fine-tuning (graders/checks/finetune.py)


@task("finetune.check_frozen")
def finetune_check_frozen(ctx: TaskContext, encoder_dir: str, text: torch.Tensor, attention_mask: torch.Tensor,
                          label: torch.Tensor) -> dict:
    """The student's model built with their hyper-parameters around the real encoder (read from a local
    folder, never downloaded); one training step must leave the encoder unchanged."""
    from dataclasses import asdict

    import numpy as np
    from transformers import AutoModel

    from graders.finetune.training import Batch, check_frozen, validate_hyperparameters

    student = ctx.student_module("sentiment")
    hp = validate_hyperparameters(student.HYPERPARAMETERS)
    encoder = AutoModel.from_pretrained(encoder_dir, local_files_only=True)
    model = student.BERTGRUSentiment(encoder, hp["hidden_dim"], 1, hp["n_layers"], hp["bidirectional"], hp["dropout"])
    return asdict(check_frozen(model, encoder, Batch(text, attention_mask, label, np.arange(len(label)))))


@task("finetune.train")
def finetune_train(ctx: TaskContext, *, features: dict, train_labels: torch.Tensor, time_budget_s: float,
                   device: str, seed: int, overrides: dict) -> dict:
    """The student's model, hyper-parameters (with `overrides`), train and evaluate on cached features.
    `features` maps train / valid / test to (cache folder, rows); only the training labels are here.
    Returns the logits of every epoch on validation and test, and what the harness observed."""
    import numpy as np

    from graders.finetune.cache import open_features
    from graders.finetune.training import run_training

    views = {name: open_features(folder).subset(np.asarray(rows, dtype=np.int64))
             for name, (folder, rows) in features.items()}
    student = ctx.student_module("sentiment")
    hyperparameters = {**student.HYPERPARAMETERS, **overrides}
    run = run_training(student, hyperparameters, views["train"], train_labels.numpy(), views["valid"],
                       views["test"], time_budget_s, device, seed=seed)
    return {"summary": run.summary(), **run.tensors()}
