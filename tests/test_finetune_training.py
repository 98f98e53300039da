"""The training harness: the stand-in encoder, label-free evaluation batches, the driver that keeps
the best epoch without telling the worker, scoring, a model that learns the small set, and broken
loops caught by what the harness observes."""

import importlib.util
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from graders.packs.bert.finetune.cache import build_features
from graders.build import REPO_ROOT
from graders.packs.bert.finetune.data import load_small_sentiment
from graders.packs.bert.finetune.encoder import load_encoder, smoke_encoder_path
from graders.packs.bert.finetune.standin import CachedEncoder, StandInMismatch
from graders.packs.bert.finetune.training import (
    MAX_EPOCHS, PLACEHOLDER_LABEL, Training, accuracy, diagnose, drive_training, epochs_granted, make_iterators,
    run_training, score_accuracy, validate_hyperparameters,
)


def load_sample_students():
    spec = importlib.util.spec_from_file_location("sample_students", REPO_ROOT / "fixtures" / "bert" / "sentiment" / "sample_students.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


students = load_sample_students()


def student(**replaced):
    return SimpleNamespace(**{**students.GOOD, **replaced})


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return load_encoder(smoke_encoder_path(tmp_path_factory.mktemp("encoders")))


@pytest.fixture(scope="module")
def small(encoder, tmp_path_factory):
    """Features and labels of the small set, split as it ships: train 400, valid 200, test 200."""
    splits = load_small_sentiment()
    texts = [r.text for name in ("train", "valid", "test") for r in splits[name]]
    features = build_features(encoder, texts, cache_root=tmp_path_factory.mktemp("cache"))
    labels = {name: np.array([r.label for r in splits[name]]) for name in splits}
    return SimpleNamespace(train=features.subset(range(400)), valid=features.subset(range(400, 600)),
                           test=features.subset(range(600, 800)), labels=labels)


def quick_run(small, student_code, **hyperparameters):
    """Two short epochs on a quarter of the training set: enough to see what a loop does."""
    hp = {**students.HYPERPARAMETERS, "n_epochs": 2, **hyperparameters}
    return run_training(student_code, hp, small.train.subset(range(100)), small.labels["train"][:100],
                        small.valid.subset(range(50)), small.test.subset(range(50)), small.labels["valid"][:50],
                        time_budget_s=60, probe_size=64)


# -----------------------------------------------------------------------------
# stand-in encoder and batches

def test_standin_serves_the_announced_rows_and_exposes_config(small, encoder):
    standin = CachedEncoder(small.train.config)
    assert standin.config.to_dict()["hidden_size"] == encoder.hidden_size
    assert list(standin.parameters()) == []
    rows = np.array([7, 3, 11])
    ids, mask = small.train.batch_ids(rows)
    standin.serve(small.train, rows, ids)
    out = standin(ids, attention_mask=mask)
    assert out[0] is out.last_hidden_state and out[0].shape == (3, ids.shape[1], encoder.hidden_size)
    with torch.no_grad():
        real = encoder.model(input_ids=ids, attention_mask=mask)[0]
    torch.testing.assert_close(out[0], real * mask[..., None], atol=1e-5, rtol=1e-4)
    standin(ids)
    assert standin.calls == 2 and standin.calls_without_attention_mask == 1


def test_standin_refuses_ids_other_than_the_batch(small):
    standin = CachedEncoder(small.train.config)
    with pytest.raises(StandInMismatch, match="outside a batch"):
        standin(torch.zeros(1, 4, dtype=torch.long))
    ids, _ = small.train.batch_ids(np.array([0, 1]))
    standin.serve(small.train, np.array([0, 1]), ids)
    with pytest.raises(StandInMismatch, match="shape"):
        standin(ids[:, :-1])
    with pytest.raises(StandInMismatch, match="differ"):
        standin(ids.flip(0))


def test_evaluation_batches_carry_no_labels(small):
    standin = CachedEncoder(small.train.config)
    iterators = make_iterators(small.train, small.labels["train"], small.valid, small.test, encoder=standin,
                               batch_size=32, device="cpu")
    for iterator, n in ((iterators.valid, 200), (iterators.test, 200)):
        batches = list(iterator)
        assert len(batches) == len(iterator) == math.ceil(n / 32)
        assert all((b.label == PLACEHOLDER_LABEL).all() for b in batches)
        assert sorted(np.concatenate([b.rows for b in batches])) == list(range(n))
    train_batches = list(iterators.train)
    rows = np.concatenate([b.rows for b in train_batches])
    assert sorted(rows) == list(range(400))
    assert np.array_equal(np.concatenate([b.label.numpy() for b in train_batches]), small.labels["train"][rows])
    assert not np.array_equal(np.concatenate([b.rows for b in iterators.train]), rows)  # reshuffled each epoch


def test_training_labels_must_be_binary(small):
    with pytest.raises(ValueError, match="train_labels"):
        make_iterators(small.train, np.full(400, 2), small.valid, small.test,
                       encoder=CachedEncoder(small.train.config), batch_size=8, device="cpu")


# -----------------------------------------------------------------------------
# training

@pytest.mark.slow
def test_reference_like_model_beats_chance_on_the_small_set(small):
    run = run_training(student(), students.HYPERPARAMETERS, small.train, small.labels["train"], small.valid,
                       small.test, small.labels["valid"], time_budget_s=300)
    assert run.stopped == "completed" and run.error is None
    assert len(run.summary["epochs"]) == len(run.valid_logits) == students.HYPERPARAMETERS["n_epochs"]
    assert run.valid_accuracy == [accuracy(logits, small.labels["valid"]) for logits in run.valid_logits]
    assert max(run.valid_accuracy) >= 0.75, run.valid_accuracy
    assert run.test_logits.shape == (200,) and not torch.isnan(run.test_logits).any()
    assert accuracy(run.test_logits, small.labels["test"]) >= 0.7
    assert diagnose(run.summary) == []


class Recorder:
    """A `Training` whose every request is written down, as the worker would see them."""

    def __init__(self, training):
        self.training, self.requests, self.answers = training, [], []

    def next_epoch(self):
        self.requests.append("next_epoch")
        answer = self.training.next_epoch()
        self.answers.append(answer)
        return answer

    def finish(self):
        self.requests.append("finish")
        return self.training.finish()


def test_the_worker_is_told_nothing_of_the_labels_and_the_best_epochs_test_logits_are_kept(small):
    """Whichever epoch the labels make the best, the worker gets the same requests; the test
    logits kept are those predicted right after that epoch."""
    hp = {**students.HYPERPARAMETERS, "n_epochs": 3}
    args = (student(), hp, small.train.subset(range(100)), small.labels["train"][:100], small.valid.subset(range(50)),
            small.test.subset(range(50)))
    recorded = Recorder(Training(*args, time_budget_s=60, probe_size=64))
    drive_training(recorded, small.labels["valid"][:50], 3)
    epochs = recorded.answers
    assert recorded.requests == ["next_epoch"] * 3 + ["finish"]
    for chosen in range(3):  # labels that make epoch `chosen` the best
        labels = (epochs[chosen][1] > 0).long().numpy()
        again = Recorder(Training(*args, time_budget_s=60, probe_size=64))
        run = drive_training(again, labels, 3)
        assert again.requests == recorded.requests
        assert run.best_epoch == max(range(3), key=lambda e: accuracy(epochs[e][1], labels))
        assert torch.equal(run.test_logits, epochs[run.best_epoch][2])


def test_the_driver_runs_the_epochs_it_is_given_not_the_workers():
    class Endless:  # a worker that would answer epochs for ever
        def next_epoch(self):
            return {}, torch.ones(4), torch.ones(2)

        def finish(self):
            return {"epochs": []}

    run = drive_training(Endless(), [1, 0, 1, 1], 5)
    assert len(run.valid_accuracy) == 5 and run.stopped == "completed"
    assert epochs_granted({"n_epochs": 100}) == MAX_EPOCHS and epochs_granted({"n_epochs": 3}) == 3


@pytest.mark.parametrize("replaced, diagnosis", [
    ({"train": students.train_without_step}, "no-optimizer-step"),
    ({"train": students.train_without_train_mode}, "train-mode-missing"),
    ({"train": students.train_with_sigmoid_before_loss}, "sigmoid-before-loss"),
    ({"train": students.train_without_zero_grad}, "zero-grad-missing"),
    ({"evaluate": students.evaluate_without_eval_mode}, "eval-mode-missing"),
    ({"train": students.train_with_accuracy_without_sigmoid}, "accuracy-mismatch"),
    ({"BERTGRUSentiment": students.SentimentWithoutAttentionMask}, "attention-mask-missing"),
])
def test_broken_loops_leave_traces(small, replaced, diagnosis):
    run = quick_run(small, student(**replaced))
    assert run.stopped == "completed", run.error
    assert [d["id"] for d in diagnose(run.summary)] == [diagnosis]


def test_unusual_but_correct_loop_is_not_blamed(small):
    run = quick_run(small, student(train=students.train_clearing_late_and_clipping))
    assert diagnose(run.summary) == []
    epoch = run.summary["epochs"][0]
    assert epoch["train"]["optimizer_steps"] == epoch["train"]["steps_with_fresh_gradients"] == 4
    assert epoch["weights_moved"] > 0


def test_time_budget_stops_between_and_within_epochs(small):
    run = quick_run(small, student(), n_epochs=5)
    assert run.stopped == "completed"
    run = run_training(student(), {**students.HYPERPARAMETERS, "n_epochs": 5}, small.train, small.labels["train"],
                       small.valid, small.test, small.labels["valid"], time_budget_s=0)
    (epoch,) = run.summary["epochs"]
    assert run.stopped == "time budget" and epoch["cut_short"] and epoch["train"]["batches_served"] == 0


def test_a_crashing_student_keeps_finished_epochs(small):
    calls = []

    def train_that_crashes_later(model, iterator, optimizer, criterion):
        calls.append(1)
        if len(calls) == 2:
            raise ZeroDivisionError("in epoch two")
        return students.train(model, iterator, optimizer, criterion)

    run = quick_run(small, student(train=train_that_crashes_later), n_epochs=3)
    assert run.stopped == "error" and "ZeroDivisionError: in epoch two" in run.error
    assert len(run.summary["epochs"]) == len(run.valid_logits) == 1


def test_hyperparameters_are_validated():
    assert validate_hyperparameters({**students.HYPERPARAMETERS, "n_epochs": 3.0})["n_epochs"] == 3
    with pytest.raises(ValueError) as error:
        validate_hyperparameters({**students.HYPERPARAMETERS, "hidden_dim": "256", "dropout": 1.5,
                                  "bidirectional": 1, "batch_size": 0})
    message = str(error.value)
    assert all(name in message for name in ("hidden_dim", "dropout", "bidirectional", "batch_size"))


# -----------------------------------------------------------------------------
# scoring

def test_score_is_linear_from_half_to_ninety_percent():
    assert [score_accuracy(a) for a in (0.3, 0.5, 0.7, 0.9, 0.97)] == pytest.approx([0, 0, 0.5, 1, 1])
    assert score_accuracy(float("nan")) == 0


def test_accuracy_counts_unpredicted_reviews_as_wrong():
    assert accuracy(torch.tensor([2.0, -1.0, float("nan"), 0.5]), [1, 0, 0, 0]) == 0.5
    with pytest.raises(ValueError):
        accuracy(torch.zeros(3), [0, 1])
