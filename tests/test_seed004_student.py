"""The seed-004 student's real code (ported to the template's signatures, logic unchanged) passed
the notebook's own shape checks. Graded here through the sandbox, it gets the diagnoses a careful
TA would write."""

import pytest

from graders.build import REPO_ROOT
from graders.grading import grade

# Grades or trains for long: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

SEED004 = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"

EXPECTED = {
    # part: diagnoses that must be among its failed checks
    "attention": {"mask_as_square"},
    "mha": {"mask_on_query_axis", "dropout_in_eval", "output_projection_missing"},
    "pretraining": {"mlm_order_dependent", "mlm_selects_padding", "pretrain_no_backward"},
    "sentiment": {"no_attention_mask"},
}


@pytest.fixture(scope="module")
def parts():
    results = grade(SEED004, only_parts=["attention", "mha", "block", "bert", "pretraining", "sentiment"])
    return {part["id"]: part for part in results["parts"]}


@pytest.mark.parametrize("part_id", sorted(EXPECTED))
def test_the_bugs_are_named(parts, part_id):
    part = parts[part_id]
    named = {c["diagnosis"]["id"] for c in part["checks"] if c["diagnosis"] and c["status"] == "failed"}
    assert EXPECTED[part_id] <= named, f"{part_id}: named {named}"
    assert part["score"] < part["max_score"]


def test_the_nan_rows_are_shown(parts):
    padding = next(c for c in parts["mha"]["checks"] if c["id"] == "mha.padding")
    assert "NaN" in padding["message"] and padding["counterexample"]


def test_its_correct_block_keeps_full_marks(parts):
    """Its block is wired right; the attention bugs inside it are graded in mha, not twice."""
    assert parts["block"]["score"] == parts["block"]["max_score"]
