"""The checks of parts causal_lm, gpt and sentiment, run in-process (fast): the reference gets
full marks, a selection of mutants fails with the right diagnosis, some correct alternatives pass,
and the sampling checks pass the reference for many grading seeds.

GRADER_STAT_SEEDS (default 30) sets how many seeds the statistical checks are regraded with;
GRADER_ALL_MUTANTS=1 runs every mutant and alternative of tests/mutation/mutants_lm_gpt_sentiment.py
here, not only the fast selection (the full run through the sandbox is tests/test_mutation.py).
"""

import os
import shutil

import pytest
import torch

from graders.build import REFERENCE_DIR
from tests.checks_inprocess import run_part
from tests.mutation.model import apply_edits
from tests.mutation.mutants_lm_gpt_sentiment import ALTERNATIVES, MUTANTS

# Tiny tensors: one thread is many times faster than several fighting over a busy machine.
torch.set_num_threads(1)

PARTS = ("causal_lm", "gpt", "sentiment")
STATISTICAL = {"gpt": ["gpt.top_k", "gpt.temperature_small_is_greedy", "gpt.temperature_large_spreads"]}
N_SEEDS = int(os.environ.get("GRADER_STAT_SEEDS", "30"))
ALL = bool(os.environ.get("GRADER_ALL_MUTANTS"))
FAST = {
    "lm_mask_diagonal_masked", "lm_no_batch_first", "lm_head_first_position", "lm_count_with_buffers",
    "lm_template_layer_kept", "gpt_dataset_not_shifted", "gpt_collate_pads_y_with_pad", "gpt_top_k_zero_fill",
    "gpt_temperature_ignored", "gpt_no_crop", "sent_bert_not_frozen", "sent_no_attention_mask",
    "sent_hidden_first_layer", "sent_accuracy_no_sigmoid", "sent_train_no_train_mode",
}
FAST_ALTERNATIVES = {"lm_mask_masked_fill_bool", "gpt_topk_scatter", "sent_frozen_by_requires_grad"}
SELECTED = MUTANTS if ALL else [m for m in MUTANTS if m.id in FAST]
SELECTED_ALTERNATIVES = ALTERNATIVES if ALL else [a for a in ALTERNATIVES if a.id in FAST_ALTERNATIVES]


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
    assert len(results) >= 8, f"too few checks registered for {part}: {sorted(results)}"
    assert not _not_passed(results)


def test_mutants_name_existing_diagnoses_and_unique_ids():
    from graders.diagnoses import DIAGNOSES

    assert len(MUTANTS) >= 16 and len(ALTERNATIVES) >= 3
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)
    assert {m.part for m in MUTANTS} == set(PARTS)
    assert FAST <= {m.id for m in MUTANTS} and FAST_ALTERNATIVES <= {a.id for a in ALTERNATIVES}
    for mutant in MUTANTS:
        assert mutant.diagnosis in DIAGNOSES, mutant.id


@pytest.mark.parametrize("mutant", SELECTED, ids=lambda m: m.id)
def test_mutant_fails_with_its_diagnosis(mutant, tmp_path):
    results = run_part(_copy(tmp_path, mutant.edits), mutant.part, max_examples=10)
    failed = _not_passed(results)
    assert failed, f"{mutant.id} passed every check of {mutant.part}"
    diagnoses = {cid: d for cid, (status, _, d, _) in failed.items() if status == "failed"}
    assert mutant.diagnosis in diagnoses.values(), f"{mutant.id}: expected {mutant.diagnosis}, got {failed}"


@pytest.mark.parametrize("alternative", SELECTED_ALTERNATIVES, ids=lambda a: a.id)
def test_alternative_passes(alternative, tmp_path):
    folder = _copy(tmp_path, alternative.edits)
    for part in alternative.parts:
        assert not _not_passed(run_part(folder, part)), (alternative.id, part)


@pytest.mark.parametrize("seed", range(1, N_SEEDS + 1))
def test_statistical_checks_pass_the_reference_for_every_seed(seed):
    for part, ids in STATISTICAL.items():
        results = run_part(REFERENCE_DIR, part, seed=seed, only=set(ids))
        assert set(results) == set(ids)
        assert not _not_passed(results), f"grading seed {seed}"
