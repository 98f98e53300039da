"""The checks graded like code: every mutant loses points in its own part and is named; every
correct alternative keeps full marks. Prints the mutation score (recorded in docs/checks.md).

Mutants are edits of the reference, so they are trusted code: they run through the real checks
with the in-process stand-in of the worker (tests/checks_inprocess.py), which keeps the whole
suite to a few minutes. The sandboxed path is graded end to end elsewhere (test_engine,
test_hostile, test_seed004_student, test_batch_e2e)."""

import importlib
import pkgutil
import shutil

import pytest

import tests.mutation as mutation_package
from graders.build import REFERENCE_DIR
from graders.diagnoses import DIAGNOSES
from tests.checks_inprocess import run_part
from tests.mutation.model import apply_edits


def _collect(kind):
    found = []
    for info in pkgutil.iter_modules(mutation_package.__path__):
        if info.name.startswith("mutants_"):
            found.extend(getattr(importlib.import_module(f"tests.mutation.{info.name}"), kind, []))
    return found


MUTANTS = _collect("MUTANTS")
ALTERNATIVES = _collect("ALTERNATIVES")
OUTCOMES = {}  # mutant id -> (lost points, got the expected diagnosis)


def _graded_copy(tmp_path, edits, part):
    folder = tmp_path / "submission"
    if not folder.exists():
        shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
        apply_edits(folder, edits)
    return run_part(folder, part, max_examples=10)


def test_the_suite_is_big_enough_and_names_real_diagnoses():
    assert len(MUTANTS) >= 40, f"only {len(MUTANTS)} mutants"
    assert len(ALTERNATIVES) >= 8, f"only {len(ALTERNATIVES)} alternatives"
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)
    unknown = [m.id for m in MUTANTS if m.diagnosis is not None and m.diagnosis not in DIAGNOSES]
    assert not unknown


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_mutant_loses_points_in_its_part(mutant, tmp_path):
    results = _graded_copy(tmp_path, mutant.edits, mutant.part)
    failed = {cid: r for cid, r in results.items() if r.status in ("failed", "error")}
    diagnoses = {r.diagnosis for r in failed.values() if r.status == "failed"}
    OUTCOMES[mutant.id] = (bool(failed), mutant.diagnosis in diagnoses)
    assert failed, f"{mutant.id} passed every check of {mutant.part}"
    # a realistic mistake computes something from its input: no gate may call it degenerate
    assert "degenerate_output" not in diagnoses, f"{mutant.id}: a gate called a realistic mistake degenerate"


@pytest.mark.parametrize("alternative", ALTERNATIVES, ids=lambda a: a.id)
def test_alternative_keeps_full_marks(alternative, tmp_path):
    for part in alternative.parts:
        results = _graded_copy(tmp_path, alternative.edits, part)
        lost = {cid: (r.status, r.message) for cid, r in results.items() if r.status != "passed"}
        assert not lost, f"{alternative.id} lost points in {part}: {lost}"


def test_mutation_score():
    """Runs after the mutants (file order): every mutant caught, at least 80% named right."""
    if len(OUTCOMES) < len(MUTANTS):
        pytest.skip("run the whole file to get the mutation score")
    caught = sum(lost for lost, _ in OUTCOMES.values())
    named = sum(right for _, right in OUTCOMES.values())
    print(f"\nmutation score: {caught}/{len(MUTANTS)} mutants lose points, "
          f"{named}/{len(MUTANTS)} ({named / len(MUTANTS):.0%}) get the expected diagnosis")
    assert caught == len(MUTANTS)
    assert named >= 0.8 * len(MUTANTS)
