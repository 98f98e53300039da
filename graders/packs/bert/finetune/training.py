"""Train a student's sentiment model on cached features: pure functions the sandboxed worker calls.

The worker gets the student's module (BERTGRUSentiment, train, evaluate), their HYPERPARAMETERS, the
feature caches (read-only) and the *training* labels. It never gets validation or test labels:

  - validation and test batches carry a placeholder label (0.5 everywhere: a valid BCE target that is
    never a true label), so a student's code that reads `.label` there runs but learns nothing;
  - the student's `evaluate` runs on a labelled slice of the training data (the "probe"), to see that
    it works, not to score it;
  - the worker returns logits on validation after every epoch and on test once, for the weights of
    the epoch the grader found best; the grader, which holds the labels, computes accuracy
    (`accuracy`, `score_accuracy`) and drives the epochs (`drive_training`).

Around the student's `train` and `evaluate` the harness records what it can observe from outside, so
that a broken loop shows up as a number rather than only as a low accuracy (`diagnose` names them):

  - optimizer steps and how far the trainable weights moved    -> optimizer.step() missing
  - the model's mode at each forward in train / evaluate        -> model.train() / model.eval() missing
    (the harness puts the model in the *other* mode before each call, as the previous call would leave
    it in the notebook, so a missing call is visible from the first epoch)
  - whether the loss got the model's own output                 -> sigmoid before BCEWithLogitsLoss
  - whether each step's gradient came from that step's backward -> optimizer.zero_grad() missing
  - the loss and accuracy the harness saw vs those reported     -> wrong averaging, wrong binary_accuracy
  - encoder calls without an attention mask                     -> padding attended to
Everything recorded runs inside the worker, so it is diagnostic only: a hostile submission could forge
it. The score depends only on logits, checked in the grader against labels the worker never saw.
"""

from __future__ import annotations

import inspect
import math
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from .cache import Features
from .standin import CachedEncoder

PLACEHOLDER_LABEL = 0.5
_HYPERPARAMETER_TYPES = {
    "hidden_dim": int, "n_layers": int, "bidirectional": bool, "dropout": float,
    "learning_rate": float, "n_epochs": int, "batch_size": int,
}
_HYPERPARAMETER_RANGES = {  # generous: wide enough for any sensible choice, narrow enough to stop a runaway
    "hidden_dim": (1, 4096), "n_layers": (1, 8), "dropout": (0.0, 0.95), "learning_rate": (1e-8, 1.0),
    "n_epochs": (1, 100), "batch_size": (1, 1024),
}


# -----------------------------------------------------------------------------
# batches

@dataclass
class Batch:
    text: torch.Tensor  # (B, T) long token ids, [CLS] ... [SEP] then padding
    attention_mask: torch.Tensor  # (B, T) long, 1 on tokens, 0 on padding
    label: torch.Tensor  # (B,) float: 0/1 on training batches, PLACEHOLDER_LABEL on validation/test batches
    rows: np.ndarray  # (B,) positions in the iterator's features, to put predictions back in order


class BatchIterator:
    """Batches of one set of features, as torchtext's BucketIterator gave them to the notebook.

    Training: shuffled every epoch, then bucketed (pools of 100 batches sorted by length) so that a
    batch holds reviews of similar length. Evaluation: sorted by length, in a fixed order.
    Each batch is announced to the stand-in encoder before it is yielded. Past `deadline` (a
    time.monotonic() value) it stops early and sets `cut_short`.
    """

    def __init__(self, features: Features, labels: np.ndarray | None, batch_size: int, encoder: CachedEncoder,
                 device: torch.device, *, shuffle_seed: int | None = None, deadline: float = math.inf):
        self.features, self.labels, self.batch_size, self.encoder = features, labels, batch_size, encoder
        self.device, self.shuffle_seed, self.deadline = device, shuffle_seed, deadline
        self.epoch = 0
        self.batches_served = 0
        self.cut_short = False

    def __len__(self) -> int:
        return math.ceil(len(self.features) / self.batch_size)

    def __iter__(self):
        for rows in self._batch_rows():
            if time.monotonic() > self.deadline:
                self.cut_short = True
                return
            text, mask = self.features.batch_ids(rows)
            text, mask = text.to(self.device), mask.to(self.device)
            if self.labels is None:
                label = torch.full((len(rows),), PLACEHOLDER_LABEL)
            else:
                label = torch.as_tensor(self.labels[rows], dtype=torch.float32)
            self.encoder.serve(self.features, rows, text)
            self.batches_served += 1
            yield Batch(text, mask, label.to(self.device), rows)

    def _batch_rows(self) -> list[np.ndarray]:
        lengths = self.features.lengths
        if self.shuffle_seed is None:
            order = np.argsort(lengths, kind="stable")
            return [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        rng = np.random.default_rng([self.shuffle_seed, self.epoch])
        self.epoch += 1
        order = rng.permutation(len(lengths))
        pool = 100 * self.batch_size
        batches = []
        for start in range(0, len(order), pool):
            chunk = order[start:start + pool]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]


@dataclass
class Iterators:
    train: BatchIterator  # labelled
    probe: BatchIterator  # labelled slice of the training data, for the student's evaluate
    valid: BatchIterator  # placeholder labels
    test: BatchIterator  # placeholder labels


def make_iterators(features: Features, train_labels, valid_features: Features, test_features: Features, *,
                   encoder: CachedEncoder, batch_size: int, device, seed: int = 0, probe_size: int = 500,
                   deadline: float = math.inf) -> Iterators:
    train_labels = np.asarray(train_labels, dtype=np.float32)
    if train_labels.shape != (len(features),) or not np.isin(train_labels, (0.0, 1.0)).all():
        raise ValueError(f"train_labels must be {len(features)} values in {{0, 1}}, got shape {train_labels.shape}")
    device = torch.device(device)
    probe_rows = np.random.default_rng(seed).permutation(len(features))[:probe_size]
    return Iterators(
        train=BatchIterator(features, train_labels, batch_size, encoder, device, shuffle_seed=seed, deadline=deadline),
        probe=BatchIterator(features.subset(probe_rows), train_labels[probe_rows], batch_size, encoder, device),
        valid=BatchIterator(valid_features, None, batch_size, encoder, device),
        test=BatchIterator(test_features, None, batch_size, encoder, device),
    )


# -----------------------------------------------------------------------------
# what the harness observes

class ObservedBCEWithLogitsLoss(nn.BCEWithLogitsLoss):
    """The notebook's criterion, noting what it was given; `observer` is set by the harness."""

    observer: TrainingObserver | None = None

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = super().forward(input, target)
        if self.observer is not None:
            self.observer.saw_loss(input, target, loss)
        return loss


@dataclass
class PhaseCounts:
    """What one call of the student's train or evaluate did, seen from outside."""

    batches_served: int = 0
    forward_calls: int = 0
    forwards_in_training_mode: int = 0
    forwards_with_grad_enabled: int = 0
    loss_calls: int = 0
    losses_given_model_output: int = 0  # the criterion's input was the model's output itself
    losses_given_probabilities: int = 0  # the criterion's input lay in [0, 1] and was not the model's output
    optimizer_steps: int = 0
    steps_with_fresh_gradients: int = 0  # the gradient held only what backward gave since the last step
    encoder_calls: int = 0
    encoder_calls_without_attention_mask: int = 0
    # summed over batches then averaged, as the notebook averages: a short last batch weighs as much as a full one
    loss_sum: float = 0.0
    accuracy_sum: float = 0.0  # of the model's outputs (logit > 0) against the loss's targets
    accuracy_batches: int = 0

    @property
    def observed_loss(self) -> float | None:
        return self.loss_sum / self.loss_calls if self.loss_calls else None

    @property
    def observed_accuracy(self) -> float | None:
        return self.accuracy_sum / self.accuracy_batches if self.accuracy_batches else None


class TrainingObserver:
    """Hooks on the model, the criterion and the optimizer that fill a PhaseCounts per student call."""

    def __init__(self, model: nn.Module, criterion: ObservedBCEWithLogitsLoss, optimizer: torch.optim.Optimizer,
                 encoder: CachedEncoder):
        self.encoder = encoder
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.counts = PhaseCounts()
        self._last_output: torch.Tensor | None = None
        # One weight matrix (the output layer's, usually) is watched to tell fresh gradients from
        # accumulated ones: a gradient hook sees each backward's contribution before it is added to .grad.
        self._watched = next((p for p in reversed(self.trainable) if p.numel() > 1), None)
        self._since_step: torch.Tensor | None = None
        if self._watched is not None:
            self._watched.register_hook(self._saw_gradient)
        model.register_forward_hook(self._saw_forward)
        optimizer.register_step_pre_hook(self._saw_step)
        criterion.observer = self

    def start(self) -> None:
        self.counts = PhaseCounts()
        self._encoder_start = (self.encoder.calls, self.encoder.calls_without_attention_mask)

    def finish(self, iterator: BatchIterator, batches_before: int) -> PhaseCounts:
        counts = self.counts
        counts.batches_served = iterator.batches_served - batches_before
        counts.encoder_calls = self.encoder.calls - self._encoder_start[0]
        counts.encoder_calls_without_attention_mask = self.encoder.calls_without_attention_mask - self._encoder_start[1]
        return counts

    def _saw_forward(self, module, args, output) -> None:
        self.counts.forward_calls += 1
        self.counts.forwards_in_training_mode += module.training
        self.counts.forwards_with_grad_enabled += torch.is_grad_enabled()
        self._last_output = output.detach() if isinstance(output, torch.Tensor) else None

    def _saw_gradient(self, grad: torch.Tensor) -> None:
        self._since_step = grad.detach().clone() if self._since_step is None else self._since_step + grad.detach()

    def _saw_step(self, optimizer, args, kwargs) -> None:
        self.counts.optimizer_steps += 1
        held, fresh = (self._watched.grad, self._since_step) if self._watched is not None else (None, None)
        if held is not None and fresh is not None:
            # by direction, not value: clipping rescales a gradient but does not turn it
            similarity = nn.functional.cosine_similarity(held.flatten().float(), fresh.flatten().float(), dim=0)
            self.counts.steps_with_fresh_gradients += bool(similarity > 0.999) or not bool(fresh.any())
        self._since_step = None

    def saw_loss(self, input: torch.Tensor, target: torch.Tensor, loss: torch.Tensor) -> None:
        counts = self.counts
        counts.loss_calls += 1
        counts.loss_sum += float(loss.detach())
        input = input.detach().flatten()
        output = self._last_output.flatten() if self._last_output is not None else None
        if output is not None and output.shape == input.shape:
            if torch.equal(input, output):
                counts.losses_given_model_output += 1
            elif bool(((input >= 0) & (input <= 1)).all()):
                counts.losses_given_probabilities += 1
            counts.accuracy_sum += float(((output > 0).float() == target.detach().flatten()).float().mean())
            counts.accuracy_batches += 1


# -----------------------------------------------------------------------------
# the run

@dataclass
class EpochRecord:
    epoch: int
    seconds: float
    predict_seconds: float  # of which: logits on validation and test
    train: dict  # PhaseCounts of the student's train(), with the loss and accuracy it reported
    probe: dict  # PhaseCounts of the student's evaluate() on the labelled probe slice
    weights_moved: float  # largest absolute change of a trainable weight during train()
    cut_short: bool  # the time budget ended this epoch before its last batch


@dataclass
class TrainingRun:
    hyperparameters: dict
    trainable_parameters: int
    epochs: list[EpochRecord] = field(default_factory=list)
    valid_logits: list[torch.Tensor] = field(default_factory=list)  # one (N_valid,) per epoch
    test_logits: torch.Tensor | None = None  # (N_test,) of the weights kept (`Training.keep_latest`)
    stopped: str = "completed"  # or "time budget" or "error"
    error: str | None = None  # the student's traceback, when stopped == "error"
    gpu_peak_mib: int | None = None  # most GPU memory the run held in tensors (None on CPU)

    def summary(self) -> dict:
        """Everything but the logits, as JSON-able data (what crosses the trust boundary as JSON)."""
        return {
            "hyperparameters": self.hyperparameters,
            "trainable_parameters": self.trainable_parameters,
            "epochs": [asdict(e) for e in self.epochs],
            "stopped": self.stopped,
            "error": self.error,
            "gpu_peak_mib": self.gpu_peak_mib,
        }


class Training:
    """The student's model trained as the notebook does, on cached features, within `time_budget_s`
    seconds, one epoch per `next_epoch` call.

    Whoever holds the validation labels drives it (`drive_training`): after each epoch it calls
    `keep_latest` if that epoch is the best so far, and `finish` predicts the test set once, with
    the weights kept (a copy on the CPU), rather than after every epoch. `student` has
    BERTGRUSentiment, train and evaluate (a module, or anything with those attributes).
    """

    def __init__(self, student, hyperparameters: dict, features: Features, train_labels, valid_features: Features,
                 test_features: Features, time_budget_s: float, device="cpu", *, seed: int = 0, probe_size: int = 500):
        self.deadline = time.monotonic() + time_budget_s
        self.student = student
        hp = validate_hyperparameters(hyperparameters)
        self.device = torch.device(device)
        torch.manual_seed(seed)
        encoder = CachedEncoder(features.config)
        model = student.BERTGRUSentiment(encoder, hp["hidden_dim"], 1, hp["n_layers"], hp["bidirectional"], hp["dropout"])
        freeze_encoder_by_name(model)
        self.model = model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=hp["learning_rate"])
        self.criterion = ObservedBCEWithLogitsLoss().to(self.device)
        self.observer = TrainingObserver(self.model, self.criterion, self.optimizer, encoder)
        self.iterators = make_iterators(features, train_labels, valid_features, test_features, encoder=encoder,
                                        batch_size=hp["batch_size"], device=self.device, seed=seed,
                                        probe_size=probe_size, deadline=self.deadline)
        self.run = TrainingRun(hp, sum(p.numel() for p in self.model.parameters() if p.requires_grad))
        self._kept: dict[str, torch.Tensor] | None = None  # a copy of the weights `finish` predicts with
        self._over = False

    def next_epoch(self) -> tuple[dict, torch.Tensor] | None:
        """Train one epoch and predict validation: (the epoch's record, valid logits (N_valid,)), or
        None once training is over (all epochs, the time budget, or the student's code failed:
        `run.stopped` says which)."""
        run, number = self.run, len(self.run.epochs) + 1
        if self._over or number > run.hyperparameters["n_epochs"]:
            self._over = True
            return None
        started = time.monotonic()
        try:
            record = _run_epoch(number, self.student, self.model, self.optimizer, self.criterion, self.observer,
                                self.iterators)
            predicting = time.monotonic()
            logits = predict(self.model, self.iterators.valid)
        except Exception:  # the student's code failed: keep the epochs that finished
            run.stopped, run.error, self._over = "error", traceback.format_exc(limit=-8), True
            return None
        record.predict_seconds = round(time.monotonic() - predicting, 3)
        record.seconds = round(time.monotonic() - started, 3)
        run.epochs.append(record)
        run.valid_logits.append(logits)
        # The test set is predicted at the end, in about this epoch's prediction time per review.
        test_seconds = record.predict_seconds * len(self.iterators.test.features) / max(1, len(logits))
        if record.cut_short or time.monotonic() + record.seconds + test_seconds > self.deadline:
            if number < run.hyperparameters["n_epochs"]:
                run.stopped = "time budget"
            self._over = True
        return asdict(record), logits

    def keep_latest(self) -> None:
        """The weights the model has now, those of the last epoch (nothing trains between two
        calls), are the ones `finish` predicts the test set with: a copy on the CPU."""
        self._kept = {name: value.detach().to("cpu", copy=True) for name, value in self.model.state_dict().items()}

    def finish(self) -> TrainingRun:
        """The run, with the test logits of the weights kept (none if no epoch was kept)."""
        if self._kept is not None:
            try:
                self.model.load_state_dict(self._kept)
                self.run.test_logits = predict(self.model, self.iterators.test)
            except Exception:  # a model whose weights do not load back: its test accuracy stays unknown
                self.run.stopped, self.run.error = "error", traceback.format_exc(limit=-8)
        if self.device.type == "cuda":
            self.run.gpu_peak_mib = torch.cuda.max_memory_allocated(self.device) >> 20
        return self.run


def drive_training(training, valid_labels, progress: Callable[[dict, float], None] | None = None) -> TrainingRun:
    """Run `training` (a `Training`, or the grader's proxy of one in the worker) to its end, keeping
    the weights of the epoch with the best validation accuracy (the first of equals); `progress`,
    if given, gets each epoch's record and validation accuracy as it ends."""
    best = None
    while (epoch := training.next_epoch()) is not None:
        record, logits = epoch
        valid_accuracy = accuracy(logits, valid_labels)
        if best is None or valid_accuracy > best:
            best = valid_accuracy
            training.keep_latest()
        if progress is not None:
            progress(record, valid_accuracy)
    return training.finish()


def run_training(student, hyperparameters: dict, features: Features, train_labels, valid_features: Features,
                 test_features: Features, valid_labels, time_budget_s: float, device="cpu",
                 progress: Callable[[dict, float], None] | None = None, *, seed: int = 0,
                 probe_size: int = 500) -> TrainingRun:
    """`Training` driven to its end where the validation labels are at hand (tests, benchmarks)."""
    training = Training(student, hyperparameters, features, train_labels, valid_features, test_features,
                        time_budget_s, device, seed=seed, probe_size=probe_size)
    return drive_training(training, valid_labels, progress)


def _run_epoch(epoch, student, model, optimizer, criterion, observer, iterators: Iterators) -> EpochRecord:
    before = [p.detach().clone() for p in observer.trainable]
    model.eval()  # as evaluate() leaves it: a train() that forgets model.train() runs without dropout
    observer.start()
    served = iterators.train.batches_served
    loss, acc = student.train(model, iterators.train, optimizer, criterion)
    train = {**asdict(observer.finish(iterators.train, served)), "reported_loss": _number(loss),
             "reported_accuracy": _number(acc), "observed_loss": observer.counts.observed_loss,
             "observed_accuracy": observer.counts.observed_accuracy}
    moved = max((float((p.detach() - b).abs().max()) for p, b in zip(observer.trainable, before)), default=0.0)

    model.train()  # as train() leaves it: an evaluate() that forgets model.eval() runs with dropout
    observer.start()
    served = iterators.probe.batches_served
    loss, acc = student.evaluate(model, iterators.probe, criterion)
    probe = {**asdict(observer.finish(iterators.probe, served)), "reported_loss": _number(loss),
             "reported_accuracy": _number(acc), "observed_loss": observer.counts.observed_loss,
             "observed_accuracy": observer.counts.observed_accuracy}
    return EpochRecord(epoch, 0.0, 0.0, train, probe, moved, iterators.train.cut_short)


def predict(model: nn.Module, iterator: BatchIterator) -> torch.Tensor:
    """Logits (N,) in the iterator's feature order, the model in eval mode without gradients."""
    model.eval()
    logits = torch.full((len(iterator.features),), float("nan"))
    pass_mask = _accepts_attention_mask(model)
    with torch.no_grad():
        for batch in iterator:
            out = model(batch.text, attention_mask=batch.attention_mask) if pass_mask else model(batch.text)
            if not isinstance(out, torch.Tensor) or out.numel() != len(batch.rows):
                shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise ValueError(f"the model returned {shape} for a batch of {len(batch.rows)}; expected "
                                 f"({len(batch.rows)}, 1)")
            logits[torch.as_tensor(batch.rows)] = out.detach().float().flatten().cpu()
    return logits


def freeze_encoder_by_name(model: nn.Module) -> None:
    """What the notebook does after building the model: parameters named bert.* are not trained."""
    for name, param in model.named_parameters():
        if name.startswith("bert"):
            param.requires_grad = False


def validate_hyperparameters(hyperparameters: dict) -> dict:
    """The student's HYPERPARAMETERS with the right types, or a ValueError listing every problem."""
    if not isinstance(hyperparameters, dict):
        raise ValueError(f"HYPERPARAMETERS must be a dict, not {type(hyperparameters).__name__}")
    problems, clean = [], {}
    for name, kind in _HYPERPARAMETER_TYPES.items():
        value = _coerce(hyperparameters.get(name), kind)
        if value is None:
            article = "an" if kind is int else "a"
            problems.append(f"{name} must be {article} {kind.__name__}, got {hyperparameters.get(name)!r}")
            continue
        low, high = _HYPERPARAMETER_RANGES.get(name, (value, value))
        if not low <= value <= high:
            problems.append(f"{name} must be in [{low}, {high}], got {value!r}")
        clean[name] = value
    if problems:
        raise ValueError("HYPERPARAMETERS: " + "; ".join(problems))
    return clean


# -----------------------------------------------------------------------------
# the frozen-encoder check (with the real encoder, on one batch)

@dataclass
class FrozenCheck:
    violations: list[str]
    output_shape: list[int]
    trainable_parameters: int
    encoder_parameters_left_trainable: int
    encoder_got_gradients: bool
    encoder_changed_by_step: bool
    encoder_given_attention_mask: bool
    encoder_ran_with_grad_enabled: bool  # no torch.no_grad() around it: not wrong if frozen, but costs memory


def check_frozen(model: nn.Module, encoder: nn.Module, batch: Batch, *, learning_rate: float = 1e-3) -> FrozenCheck:
    """Build-time freeze as in the notebook, then one training step: the encoder must not move.

    `model` is the student's model built around the real encoder `encoder` (the smoke encoder is enough:
    this checks the student's code, not the features). The encoder starts trainable, as from_pretrained
    leaves it, so that only the notebook's freeze (or the student's own) can freeze it.
    """
    encoder.requires_grad_(True)
    freeze_encoder_by_name(model)
    encoder_params = list(encoder.parameters())
    encoder_ids = {id(p) for p in encoder_params}
    before = [p.detach().clone() for p in encoder_params]
    left_trainable = sum(p.requires_grad for p in encoder_params)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad and id(p) not in encoder_ids)

    calls = []
    hook = encoder.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append((kwargs.get("attention_mask") is not None or len(args) > 1,
                                                   torch.is_grad_enabled())), with_kwargs=True)
    try:
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
        optimizer.zero_grad()
        pass_mask = _accepts_attention_mask(model)
        out = model(batch.text, attention_mask=batch.attention_mask) if pass_mask else model(batch.text)
        nn.BCEWithLogitsLoss()(out.reshape(-1), batch.label.float().reshape(-1)).backward()
        got_gradients = any(p.grad is not None and bool(p.grad.any()) for p in encoder_params)
        optimizer.step()
    finally:
        hook.remove()
    changed = any(not torch.equal(p.detach(), b) for p, b in zip(encoder_params, before))

    violations = []
    if left_trainable:
        violations.append(f"{left_trainable} encoder parameter tensors still require gradients after freezing the "
                          "parameters named bert.*: keep the encoder in self.bert")
    if got_gradients:
        violations.append("the encoder received gradients: run it under torch.no_grad() and do not re-enable "
                          "requires_grad on it")
    if changed:
        violations.append("an optimizer step changed the encoder's weights: the encoder must stay frozen")
    if out.shape[0] != batch.text.shape[0] or out.numel() != batch.text.shape[0]:
        violations.append(f"the model returned shape {tuple(out.shape)} for a batch of {batch.text.shape[0]}; "
                          f"expected ({batch.text.shape[0]}, 1)")
    if not calls:
        violations.append("the model never called its encoder")
    return FrozenCheck(violations, list(out.shape), trainable, left_trainable, got_gradients, changed,
                       bool(calls) and all(mask for mask, _ in calls), any(grad for _, grad in calls))


# -----------------------------------------------------------------------------
# scoring and diagnoses (in the grader process, from what the worker returned)

def accuracy(logits, labels) -> float:
    """Share of logits on the right side of 0; NaN logits (a review never predicted) count as wrong."""
    logits, labels = torch.as_tensor(logits).float().flatten(), torch.as_tensor(labels).float().flatten()
    if logits.shape != labels.shape:
        raise ValueError(f"{logits.numel()} logits for {labels.numel()} labels")
    correct = ((logits > 0).float() == labels) & ~logits.isnan()
    return float(correct.float().mean())


def score_accuracy(acc: float) -> float:
    """Share of the part's points: 0 at 50% accuracy or below, rising linearly to all of them at 90% (seed 004)."""
    if not math.isfinite(acc):
        return 0.0
    return min(1.0, max(0.0, (acc - 0.5) / 0.4))


def diagnose(summary: dict) -> list[dict]:
    """Known mistakes whose traces show in a run's summary: [{id, text}], most telling first."""
    found: dict[str, str] = {}
    for epoch in summary["epochs"]:
        train, probe = epoch["train"], epoch["probe"]
        if train["batches_served"] and not train["optimizer_steps"]:
            found["no-optimizer-step"] = "train() never called optimizer.step(): the weights did not change"
        elif train["optimizer_steps"] and epoch["weights_moved"] == 0:
            found["weights-not-moving"] = "optimizer.step() ran but no trainable weight changed (no gradients?)"
        if train["forward_calls"] and not train["forwards_in_training_mode"]:
            found["train-mode-missing"] = ("train() ran the model in eval mode (dropout off): call model.train() "
                                           "at its start, since evaluate() leaves the model in eval mode")
        if probe["forwards_in_training_mode"]:
            found["eval-mode-missing"] = "evaluate() ran the model in training mode (dropout on): call model.eval()"
        if probe["forwards_with_grad_enabled"]:
            found["no-grad-missing"] = "evaluate() built autograd graphs: wrap its loop in torch.no_grad()"
        if train["losses_given_probabilities"]:
            found["sigmoid-before-loss"] = ("the loss was given probabilities, not logits: BCEWithLogitsLoss applies "
                                            "the sigmoid itself, so a sigmoid before it is applied twice")
        if train["optimizer_steps"] > 1 and train["steps_with_fresh_gradients"] <= 1:
            found["zero-grad-missing"] = ("gradients were never cleared between batches: call optimizer.zero_grad() "
                                          "before each backward")
        if train["encoder_calls_without_attention_mask"]:
            found["attention-mask-missing"] = ("the encoder was called without attention_mask: BERT then attends "
                                               "to padding and a review's prediction depends on its batch")
        for phase in ("train", "probe"):
            reported, observed = epoch[phase]["reported_accuracy"], epoch[phase]["observed_accuracy"]
            if reported is not None and observed is not None and abs(reported - observed) > 0.05:
                found["accuracy-mismatch"] = (f"the accuracy {'train' if phase == 'train' else 'evaluate'}() reported "
                                              f"({reported:.3f}) is not the share of right answers the harness saw "
                                              f"({observed:.3f}): check binary_accuracy and the averaging")
    return [{"id": key, "text": text} for key, text in found.items()]


# -----------------------------------------------------------------------------
# helpers

def _accepts_attention_mask(model: nn.Module) -> bool:
    parameters = inspect.signature(model.forward).parameters.values()
    return any(p.name == "attention_mask" or p.kind is p.VAR_KEYWORD for p in parameters)


def _coerce(value, kind):
    """`value` as `kind` (bool, int or float) when it is one already, up to int/float; None otherwise."""
    if kind is bool or isinstance(value, bool):
        return value if kind is bool and isinstance(value, bool) else None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if kind is int:
        return int(value) if float(value).is_integer() else None
    return float(value)


def _number(value) -> float | None:
    try:
        number = float(value.item() if isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None

