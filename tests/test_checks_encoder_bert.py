"""The checks of parts positional_encoding, block, bert and pretraining, run in-process (fast):
the reference gets full marks and the statistical checks
pass the reference for many grading seeds (GRADER_STAT_SEEDS, default 12; 200 for the full
stability run). The mutants are run by tests/test_mutation.py.
"""

import os

import pytest

from graders.build import REFERENCE_DIR
from tests.checks_inprocess import run_part
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
N_SEEDS = int(os.environ.get("GRADER_STAT_SEEDS", "12"))


def _not_passed(results):
    return {cid: (r.status, r.message, r.diagnosis, r.counterexample) for cid, r in results.items() if r.status != "passed"}


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


@pytest.mark.parametrize("seed", range(1, N_SEEDS + 1))
def test_statistical_checks_pass_the_reference_for_every_seed(seed):
    for part, ids in STATISTICAL.items():
        results = run_part(REFERENCE_DIR, part, seed=seed, only=set(ids))
        assert set(results) == set(ids)
        assert not _not_passed(results), f"grading seed {seed}"
