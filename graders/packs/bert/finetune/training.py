"""Train a student's sentiment model on cached features: pure functions the sandboxed worker calls.

The worker gets the student's module (BERTGRUSentiment, train, evaluate), their HYPERPARAMETERS, the
feature caches (read-only) and the *training* labels. It never gets validation or test labels:

  - validation and test batches carry a placeholder label (0.5 everywhere: a valid BCE target that is
    never a true label), so a student's code that reads `.label` there runs but learns nothing;
  - the student's `evaluate` runs on a labelled slice of the training data (the "probe"), to see that
    it works, not to score it;
  - the worker returns logits on validation and test after every epoch, each epoch asked for in the
    same way; the grader, which holds the labels, computes accuracy (`accuracy`, `score_accuracy`),
    keeps the test logits of the best epoch itself and decides how many epochs run
    (`drive_training`, `epochs_granted`): nothing the worker is told depends on a held-out label.

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
# The most epochs the grader runs, whatever n_epochs asks (more are clamped, and the check says so):
# the best of more epochs would be chosen on validation more often by luck than by learning.
MAX_EPOCHS = 10


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
    """What the worker saw and predicted: evidence and logits, never a verdict."""

    hyperparameters: dict
    trainable_parameters: int
    epochs: list[EpochRecord] = field(default_factory=list)
    stopped: str = "completed"  # or "error"
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
    """The student's model trained as the notebook does, on cached features, one epoch per
    `next_epoch` call, each followed by predictions on validation and test.

    Every epoch ends the same way, whatever its accuracy: the worker cannot tell which epoch the
    grader finds best, since the grader keeps that epoch's test logits itself (`drive_training`).
    How many epochs run is the driver's to decide, from hyper-parameters it validated; the
    deadline here only cuts an epoch short (`time_budget_s` from now). `student` has
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

    def next_epoch(self) -> tuple[dict, torch.Tensor, torch.Tensor] | None:
        """Train one epoch, then predict validation and test: (the epoch's record, valid logits
        (N_valid,), test logits (N_test,)), or None once the student's code has failed
        (`run.error` says how)."""
        run = self.run
        if run.stopped == "error":
            return None
        started = time.monotonic()
        try:
            record = _run_epoch(len(run.epochs) + 1, self.student, self.model, self.optimizer, self.criterion,
                                self.observer, self.iterators)
            predicting = time.monotonic()
            valid_logits = predict(self.model, self.iterators.valid)
            test_logits = predict(self.model, self.iterators.test)
        except Exception:  # the student's code failed: keep the epochs that finished
            run.stopped, run.error = "error", traceback.format_exc(limit=-8)
            return None
        record.predict_seconds = round(time.monotonic() - predicting, 3)
        record.seconds = round(time.monotonic() - started, 3)
        run.epochs.append(record)
        return asdict(record), valid_logits, test_logits

    def finish(self) -> TrainingRun:
        """The run's evidence, with the GPU memory it held at its peak."""
        if self.device.type == "cuda":
            self.run.gpu_peak_mib = torch.cuda.max_memory_allocated(self.device) >> 20
        return self.run


@dataclass
class DrivenRun:
    """A training run as its driver, who holds the validation labels, saw it."""

    summary: dict  # the worker's evidence (`TrainingRun.summary`): diagnostic only, never scored
    valid_accuracy: list[float]  # one per epoch, computed by the driver
    valid_logits: list[torch.Tensor]
    best_epoch: int | None  # index of the first epoch of the best validation accuracy; None if none finished
    test_logits: torch.Tensor | None  # predicted right after the best epoch
    stopped: str  # "completed", "time budget" or "error"
    epoch_seconds: list[float]  # each epoch's request, training and predictions, timed by the driver

    @property
    def error(self) -> str | None:
        return self.summary.get("error")


def drive_training(training, valid_labels, epochs: int, *, time_budget_s: float = math.inf,
                   progress: Callable[[dict, float], None] | None = None) -> DrivenRun:
    """Run `epochs` epochs of `training` (a `Training`, or the grader's proxy of one in the worker),
    fewer if the student's code fails or the next epoch would overrun `time_budget_s` (from now),
    and keep the test logits of the epoch with the best validation accuracy (the first of
    equals). Every epoch is asked for the same way: nothing the worker receives depends on the
    validation labels. `progress`, if given, gets each epoch's record and validation accuracy."""
    deadline = time.monotonic() + time_budget_s
    valid_accuracy, valid_logits, seconds = [], [], []
    best, best_test, stopped = None, None, "completed"
    for number in range(1, epochs + 1):
        started = time.monotonic()
        epoch = training.next_epoch()
        if epoch is None:
            stopped = "error"
            break
        record, logits, test_logits = epoch
        seconds.append(round(time.monotonic() - started, 3))
        valid_accuracy.append(accuracy(logits, valid_labels))
        valid_logits.append(logits)
        if best is None or valid_accuracy[-1] > valid_accuracy[best]:
            best, best_test = len(valid_accuracy) - 1, test_logits
        if progress is not None:
            progress(record, valid_accuracy[-1])
        if number < epochs and time.monotonic() + seconds[-1] > deadline:
            stopped = "time budget"
            break
    summary = training.finish()
    summary = summary.summary() if isinstance(summary, TrainingRun) else summary
    return DrivenRun(summary, valid_accuracy, valid_logits, best, best_test, stopped, seconds)


def epochs_granted(hyperparameters: dict) -> int:
    """The epochs the grader runs for validated hyper-parameters: n_epochs, at most MAX_EPOCHS."""
    return min(hyperparameters["n_epochs"], MAX_EPOCHS)


def run_training(student, hyperparameters: dict, features: Features, train_labels, valid_features: Features,
                 test_features: Features, valid_labels, time_budget_s: float, device="cpu",
                 progress: Callable[[dict, float], None] | None = None, *, seed: int = 0,
                 probe_size: int = 500) -> DrivenRun:
    """`Training` driven for the hyper-parameters' epochs where the validation labels are at hand
    (tests, benchmarks)."""
    training = Training(student, hyperparameters, features, train_labels, valid_features, test_features,
                        time_budget_s, device, seed=seed, probe_size=probe_size)
    return drive_training(training, valid_labels, epochs_granted(training.run.hyperparameters),
                          time_budget_s=time_budget_s, progress=progress)


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

