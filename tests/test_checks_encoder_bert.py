"""The checks of parts positional_encoding, block, bert and pretraining, run in-process (fast):
the reference gets full marks, a few mutants fail with the right diagnosis, and the statistical
checks pass the reference for many grading seeds.

GRADER_STAT_SEEDS (default 30) sets how many seeds the statistical checks are regraded with;
GRADER_ALL_MUTANTS=1 runs every mutant of tests/mutation/mutants_encoder_bert.py here, not only
the fast selection (the full mutation run through the sandbox is tests/test_mutation.py).
"""

import os
import shutil

import pytest

from graders.build import REFERENCE_DIR
from tests.checks_inprocess import run_part
from tests.mutation.model import apply_edits
from tests.mutation.mutants_encoder_bert import ALTERNATIVES, MUTANTS

PARTS = ("positional_encoding", "block", "bert", "pretraining")
STATISTICAL = {
    "positional_encoding": ["positional_encoding.dropout"],
    "pretraining": [
        "pretraining.selection_rate",
        "pretraining.split",
        "pretraining.random_tokens",
        "pretraining.category_independent",
        "pretraining.loss_on_selected_tokens",
        "pretraining.first_loss",
    ],
}
N_SEEDS = int(os.environ.get("GRADER_STAT_SEEDS", "30"))
FAST = {
    "pe_halves_concatenated", "pe_along_batch_axis", "block_no_ffn_residual", "block_returns_embedding_only",
    "bert_mask_not_passed", "mlm_random_bernoulli_of_remainder", "mlm_category_by_order", "mlm_labels_hold_mask",
    "pretrain_no_backward", "pretrain_loss_on_all_tokens",
}
SELECTED = MUTANTS if os.environ.get("GRADER_ALL_MUTANTS") else [m for m in MUTANTS if m.id in FAST]


def _not_passed(results):
    return {cid: (r.status, r.message, r.diagnosis, r.counterexample) for cid, r in results.items() if r.status != "passed"}


def _copy(tmp_path, edits):
    folder = tmp_path / "submission"
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, edits)
    return folder


@pytest.mark.parametrize("part", PARTS)
def test_reference_passes_every_check(part):
    results = run_part(REFERENCE_DIR, part)
    assert len(results) >= 4, f"too few checks registered for {part}: {sorted(results)}"
    assert not _not_passed(results)


def test_mutants_name_existing_diagnoses_and_unique_ids():
    from graders.diagnoses import DIAGNOSES

    assert len(MUTANTS) >= 16 and len(ALTERNATIVES) >= 3
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)
    assert {m.part for m in MUTANTS} == set(PARTS)
    for mutant in MUTANTS:
        assert mutant.diagnosis in DIAGNOSES, mutant.id


@pytest.mark.parametrize("mutant", SELECTED, ids=lambda m: m.id)
def test_mutant_fails_with_its_diagnosis(mutant, tmp_path):
    results = run_part(_copy(tmp_path, mutant.edits), mutant.part)
    failed = _not_passed(results)
    assert failed, f"{mutant.id} passed every check of {mutant.part}"
    diagnoses = {cid: d for cid, (status, _, d, _) in failed.items() if status == "failed"}
    assert mutant.diagnosis in diagnoses.values(), f"{mutant.id}: expected {mutant.diagnosis}, got {failed}"


@pytest.mark.skipif(not os.environ.get("GRADER_ALL_MUTANTS"), reason="set GRADER_ALL_MUTANTS=1")
@pytest.mark.parametrize("alternative", ALTERNATIVES, ids=lambda a: a.id)
def test_alternative_passes(alternative, tmp_path):
    folder = _copy(tmp_path, alternative.edits)
    for part in alternative.parts:
        assert not _not_passed(run_part(folder, part)), (alternative.id, part)


@pytest.mark.parametrize("alternative", [a for a in ALTERNATIVES if a.id == "mlm_exact_count_randperm"], ids=lambda a: a.id)
def test_exact_count_masking_is_accepted(alternative, tmp_path):
    assert not _not_passed(run_part(_copy(tmp_path, alternative.edits), "pretraining"))


@pytest.mark.parametrize("seed", range(1, N_SEEDS + 1))
def test_statistical_checks_pass_the_reference_for_every_seed(seed):
    for part, ids in STATISTICAL.items():
        results = run_part(REFERENCE_DIR, part, seed=seed, only=set(ids))
        assert set(results) == set(ids)
        assert not _not_passed(results), f"grading seed {seed}"
