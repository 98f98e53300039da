"""Issue 30: the fine-tuning check is no label oracle.

The attack is a model that never steps (its honest twin scores at chance) whose worker side reads
what the grader asks for during fine-tuning: it answers each epoch with its own guesses at the
validation labels, flipping one a time, and keeps a flip only when the grader's next request says
that epoch beat the best so far. Had the grader still asked the worker to keep the best epoch's
weights (one bit about the held-out labels an epoch) and let it decide how many epochs run, the
guesses would climb to every validation label: the positive control below grades the same attack
with that old driver and sees it climb. With the real driver every epoch is asked for alike and
their number is the contract's, so the attack stays at chance, like its twin.

Graded through the real sandbox, in smoke mode (the small set: 200 validation reviews).
"""

import shutil

import pytest

import graders.packs.bert.checks.finetune as finetune_check
from graders.grading import grade
from graders.packs.bert.finetune.training import DrivenRun, accuracy
from tests.course import HOMEWORK, REFERENCE_DIR

NEVER_STEPS = ("        loss.backward()\n        optimizer.step()\n", "        loss.backward()\n")
ATTACK_EPOCHS = 201  # one more than the validation reviews: enough to learn every label

LABEL_ORACLE = '''

# ---- the attack: runs in the worker when the submission is first imported
import sys as _sys

import torch as _torch

_harness = _sys.modules["graders.sandbox.harness"]
_guess = {"logits": None, "flipped": None, "epochs": 0}


def _next_epoch(ctx, training):
    """Answer an epoch with guesses: undo the last flip unless the grader kept it, flip the next."""
    n_valid, n_test = len(training.iterators.valid.features), len(training.iterators.test.features)
    if _guess["logits"] is None:
        _guess["logits"] = _torch.ones(n_valid)
    elif _guess["flipped"] is not None:  # no request to keep that epoch came: it did not beat the best
        _guess["logits"][_guess["flipped"]] *= -1
    _guess["epochs"] += 1
    if _guess["epochs"] > ''' + str(ATTACK_EPOCHS) + ''':  # the worker, not the contract, ends the run
        return None
    _guess["flipped"] = (_guess["epochs"] - 1) % n_valid
    _guess["logits"][_guess["flipped"]] *= -1
    return {"epoch": _guess["epochs"]}, _guess["logits"].clone(), _torch.ones(n_test)


def _keep_latest(ctx, training):  # the grader's signal: the last epoch beat the best
    _guess["flipped"] = None


_harness.TASKS["finetune.next_epoch"] = _next_epoch
_harness.TASKS["finetune.keep_latest"] = _keep_latest
'''


def _submission(tmp_path, name, forgery=""):
    folder = tmp_path / name
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    source = (folder / "sentiment.py").read_text()
    assert source.count(NEVER_STEPS[0]) == 1
    (folder / "sentiment.py").write_text(source.replace(*NEVER_STEPS))
    (folder / "__init__.py").write_text((folder / "__init__.py").read_text() + forgery)
    return folder


def _finetune_check(folder):
    results = grade(folder, only_parts=["finetune"], assignment=HOMEWORK)
    (part,) = results["parts"]
    (check,) = part["checks"]
    return check


def signalling_driver(training, valid_labels, epochs, *, time_budget_s, progress=None):
    """The layer removed: the driver tells the worker which epoch beat the best (it asks it to keep
    that epoch's weights) and runs epochs until the worker stops."""
    valid_accuracy, valid_logits, best, best_test = [], [], None, None
    while (epoch := training.next_epoch()) is not None:
        record, logits, test_logits = epoch
        valid_accuracy.append(accuracy(logits, valid_labels))
        valid_logits.append(logits)
        if best is None or valid_accuracy[-1] > valid_accuracy[best]:
            best, best_test = len(valid_accuracy) - 1, test_logits
            training.student.task("finetune.keep_latest", training.handle)
        if progress is not None:
            progress(record, valid_accuracy[-1])
    return DrivenRun(training.finish(), valid_accuracy, valid_logits, best, best_test, "completed",
                     [0.0] * len(valid_accuracy))


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    return _finetune_check(_submission(tmp_path_factory.mktemp("twin"), "twin"))


@pytest.mark.slow
def test_the_attack_scores_like_its_honest_twin(tmp_path, twin):
    attack = _finetune_check(_submission(tmp_path, "attack", LABEL_ORACLE))
    for check in (twin, attack):
        assert check["status"] == "failed", check["message"]
        # chance on 200 reviews is 50% +- 3.5%; the smoke pass mark (60%) is three deviations above
        assert max(check["details"]["training_curve"]["valid_acc"]) < finetune_check.SMOKE_PASS_ACCURACY
    assert len(attack["details"]["training_curve"]["valid_acc"]) == finetune_check.SMOKE_OVERRIDES["n_epochs"]
    assert attack["score"] <= twin["score"] + 0.5, (attack["message"], twin["message"])


@pytest.mark.slow
def test_positive_control_with_the_grader_signalling_the_best_epoch_the_attack_climbs(tmp_path, monkeypatch):
    monkeypatch.setattr(finetune_check, "drive_training", signalling_driver, raising=False)
    attack = _finetune_check(_submission(tmp_path, "attack", LABEL_ORACLE))
    curve = attack["details"]["training_curve"]["valid_acc"]
    assert len(curve) == ATTACK_EPOCHS and max(curve) >= 0.99, attack["message"]
    assert attack["status"] == "passed" and attack["score"] == attack["max_score"]
