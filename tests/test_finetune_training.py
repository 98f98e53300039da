"""The training harness: the stand-in encoder, label-free evaluation batches, the frozen-encoder check,
scoring, a model that learns the small set, and broken loops caught by what the harness observes."""

import importlib.util
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from graders.packs.bert.finetune.cache import build_features
from graders.build import REPO_ROOT
from graders.packs.bert.finetune.data import load_small_sentiment
from graders.packs.bert.finetune.encoder import load_encoder, smoke_encoder_path, tokenize
from graders.packs.bert.finetune.standin import CachedEncoder, StandInMismatch
from graders.packs.bert.finetune.training import (
    PLACEHOLDER_LABEL, Batch, Training, accuracy, check_frozen, diagnose, make_iterators, predict, run_training,
    score_accuracy, validate_hyperparameters,
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
# frozen encoder

def frozen_batch(encoder):
    texts = ["The plot was dull.", "I would recommend it. The cast was superb and the pacing was never slow."]
    ids, mask = tokenize(encoder.tokenizer, texts)
    return Batch(ids, mask, torch.tensor([0.0, 1.0]), np.arange(2))


def fresh_encoder(encoder):
    return load_encoder(encoder.source).model  # each check gets its own copy to (try to) modify


@pytest.mark.parametrize("model_class", [students.BERTGRUSentiment, students.SentimentWithoutAttentionMask])
def test_frozen_model_passes(encoder, model_class):
    bert = fresh_encoder(encoder)
    result = check_frozen(model_class(bert, 16, 1, 2, True, 0.25), bert, frozen_batch(encoder))
    assert result.violations == []
    assert result.output_shape == [2, 1] and not result.encoder_ran_with_grad_enabled
    assert result.encoder_given_attention_mask == (model_class is students.BERTGRUSentiment)
    gru = 2 * 3 * (16 * encoder.hidden_size + 16 * 16 + 2 * 16) + 2 * 3 * (16 * 32 + 16 * 16 + 2 * 16)
    assert result.trainable_parameters == gru + 32 + 1


def test_encoder_kept_under_another_name_is_left_trainable(encoder):
    bert = fresh_encoder(encoder)
    result = check_frozen(students.SentimentWithEncoderElsewhere(bert, 16, 1, 1, True, 0.0), bert, frozen_batch(encoder))
    assert result.encoder_parameters_left_trainable > 0 and result.encoder_got_gradients and result.encoder_changed_by_step
    assert any("self.bert" in v for v in result.violations)


def test_forward_that_trains_the_encoder_is_caught(encoder):
    bert = fresh_encoder(encoder)
    result = check_frozen(students.SentimentTrainingEncoder(bert, 16, 1, 1, True, 0.0), bert, frozen_batch(encoder))
    assert result.encoder_parameters_left_trainable == 0  # frozen at build time ...
    assert result.encoder_got_gradients and result.encoder_changed_by_step  # ... and unfrozen by its forward
    assert result.encoder_ran_with_grad_enabled and len(result.violations) == 2


# -----------------------------------------------------------------------------
# training

def test_reference_like_model_beats_chance_on_the_small_set(small):
    run = run_training(student(), students.HYPERPARAMETERS, small.train, small.labels["train"], small.valid,
                       small.test, small.labels["valid"], time_budget_s=300)
    assert run.stopped == "completed" and run.error is None
    assert len(run.epochs) == len(run.valid_logits) == students.HYPERPARAMETERS["n_epochs"]
    valid = [accuracy(logits, small.labels["valid"]) for logits in run.valid_logits]
    assert max(valid) >= 0.75, valid
    assert run.test_logits.shape == (200,) and not torch.isnan(run.test_logits).any()
    assert accuracy(run.test_logits, small.labels["test"]) >= 0.7
    assert diagnose(run.summary()) == []


def test_the_test_set_is_predicted_once_with_the_best_epochs_weights(small):
    """The test logits are those of the epoch with the best validation accuracy (the first of
    equals), as if the test set had been predicted right after it."""
    hp = {**students.HYPERPARAMETERS, "n_epochs": 3}
    args = (student(), hp, small.train.subset(range(100)), small.labels["train"][:100], small.valid.subset(range(50)),
            small.test.subset(range(50)))
    predicted_after_each_epoch = []
    training = Training(*args, time_budget_s=60, probe_size=64)
    while training.next_epoch() is not None:
        predicted_after_each_epoch.append(predict(training.model, training.iterators.test))
    assert len(predicted_after_each_epoch) == 3
    for chosen in range(3):  # labels that make epoch `chosen` the best
        labels = (training.run.valid_logits[chosen] > 0).long().numpy()
        run = run_training(*args, labels, time_budget_s=60, probe_size=64)
        best = max(range(3), key=lambda e: accuracy(run.valid_logits[e], labels))
        assert torch.equal(run.test_logits, predicted_after_each_epoch[best])


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
    assert [d["id"] for d in diagnose(run.summary())] == [diagnosis]


def test_unusual_but_correct_loop_is_not_blamed(small):
    run = quick_run(small, student(train=students.train_clearing_late_and_clipping))
    assert diagnose(run.summary()) == []
    epoch = run.summary()["epochs"][0]
    assert epoch["train"]["optimizer_steps"] == epoch["train"]["steps_with_fresh_gradients"] == 4
    assert epoch["weights_moved"] > 0


def test_time_budget_stops_between_and_within_epochs(small):
    run = quick_run(small, student(), n_epochs=5)
    assert run.stopped == "completed"
    run = run_training(student(), {**students.HYPERPARAMETERS, "n_epochs": 5}, small.train, small.labels["train"],
                       small.valid, small.test, small.labels["valid"], time_budget_s=0)
    assert run.stopped == "time budget" and len(run.epochs) == 1 and run.epochs[0].cut_short
    assert run.epochs[0].train["batches_served"] == 0


def test_a_crashing_student_keeps_finished_epochs(small):
    calls = []

    def train_that_crashes_later(model, iterator, optimizer, criterion):
        calls.append(1)
        if len(calls) == 2:
            raise ZeroDivisionError("in epoch two")
        return students.train(model, iterator, optimizer, criterion)

    run = quick_run(small, student(train=train_that_crashes_later), n_epochs=3)
    assert run.stopped == "error" and "ZeroDivisionError: in epoch two" in run.error
    assert len(run.epochs) == len(run.valid_logits) == 1


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
