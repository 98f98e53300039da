"""Issue 32, the sentiment part: a diagnosis only where the behaviour that defines it was observed.

Each pair fails the same check: the first mutant shows the behaviour and earns the diagnosis, the
second fails for another reason that used to earn the same name (a counted step, the sigmoid
present, both directions fed) and must get a message saying what differs, with no name. Also:
an evaluate() whose accuracy is wrong only when the predictions have both signs is caught and
named only when its figure is that mistake's, and
what only the worker can see (grad mode in evaluate()) is said but never scored.

Mutants are edits of the reference, so they run in-process (tests/checks_inprocess.py).
"""

import shutil

import pytest

from graders.mutants import apply_edits, collect
from tests.checks_inprocess import run_part
from tests.course import BERT

MUTANTS = {m.id: m for m in collect(BERT)[0]}
EVALUATE_WITH_GRAD = "sent_evaluate_with_grad"  # not a mutant: the mistake is said, not scored


def _graded(tmp_path, mutant_id, check_id, *, edits=None):
    folder = tmp_path / "submission"
    shutil.copytree(BERT.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, MUTANTS[mutant_id].edits if edits is None else edits)
    return run_part(folder, "sentiment", only={check_id}, max_examples=5, pack=BERT)[check_id]


@pytest.mark.parametrize("named, unnamed, check_id, diagnosis, says", [
    ("sent_train_no_step", "sent_train_step_before_backward", "sentiment.train_steps", "train_no_step",
     "optimizer.step() was called 3 times"),
    ("sent_accuracy_no_sigmoid", "sent_accuracy_floor_division", "sentiment.binary_accuracy", "accuracy_no_sigmoid",
     "expected"),
    ("sent_hidden_minus_one_small_linear", "sent_output_layer_one_direction_wide", "sentiment.gru_summary",
     "gru_wrong_hidden", "the output layer"),
])
def test_a_diagnosis_needs_its_behaviour(tmp_path, named, unnamed, check_id, diagnosis, says):
    assert MUTANTS[named].diagnosis == diagnosis and MUTANTS[unnamed].diagnosis is None
    earned = _graded(tmp_path / "named", named, check_id)
    assert earned.status == "failed" and earned.diagnosis == diagnosis, earned.message
    other = _graded(tmp_path / "unnamed", unnamed, check_id)
    assert other.status == "failed" and other.diagnosis is None, (other.diagnosis, other.message)
    assert says in other.message


def test_evaluate_accuracy_computed_wrongly_is_caught(tmp_path):
    """evaluate() comparing (B, 1) outputs with (B,) labels averages over every pair of the batch,
    which equals the right accuracy when all predictions have one sign: the check makes them
    have both, and labels each batch to a different accuracy."""
    result = _graded(tmp_path, "sent_evaluate_accuracy_broadcast", "sentiment.evaluate_values")
    assert result.status == "failed" and result.diagnosis == "accuracy_broadcast"
    assert "expected the means over its 3 batches" in result.message and "0.6944" in result.message
    other = _graded(tmp_path / "sums", "sent_evaluate_returns_sums", "sentiment.evaluate_values")
    assert other.status == "failed" and other.diagnosis == "epoch_sum_not_mean"


def test_the_reference_evaluate_passes_on_the_relabelled_batches(tmp_path):
    result = _graded(tmp_path, "sent_evaluate_accuracy_broadcast", "sentiment.evaluate_values", edits=())
    assert result.status == "passed", result.message


def test_a_missing_model_eval_is_charged_once(tmp_path):
    """evaluate_mode charges it; evaluate_values judges the figures of evaluate()'s own mode."""
    assert _graded(tmp_path / "mode", "sent_evaluate_no_eval_mode", "sentiment.evaluate_mode").diagnosis == \
        "evaluate_no_eval_mode"
    result = _graded(tmp_path / "values", "sent_evaluate_no_eval_mode", "sentiment.evaluate_values")
    assert result.status == "passed", result.message


def test_grad_mode_in_evaluate_is_said_not_scored(tmp_path):
    from graders.packs.bert.mutants.sentiment import EVAL_NO_GRAD, SENT
    from graders.mutants import Edit

    result = _graded(tmp_path, EVALUATE_WITH_GRAD, "sentiment.evaluate_mode",
                     edits=[Edit(SENT, EVAL_NO_GRAD, EVAL_NO_GRAD.replace("    with torch.no_grad():\n", "    if True:\n"))])
    assert result.status == "passed" and result.fraction == 1.0
    assert "not scored" in result.message and "gradients enabled" in result.message
