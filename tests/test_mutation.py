"""The checks graded like code: every mutant loses points in its own part and is named;
every correct alternative keeps full marks. Prints the mutation score (recorded in docs/checks.md)."""

import importlib
import pkgutil
import shutil

import pytest

import tests.mutation as mutation_package
from graders.build import REFERENCE_DIR
from graders.grading import grade
from tests.mutation.model import apply_edits


def _collect(kind):
    found = []
    for info in pkgutil.iter_modules(mutation_package.__path__):
        if info.name.startswith("mutants_"):
            found.extend(getattr(importlib.import_module(f"tests.mutation.{info.name}"), kind, []))
    return found


MUTANTS = _collect("MUTANTS")
ALTERNATIVES = _collect("ALTERNATIVES")
OUTCOMES = {}


def _lost_points(part):
    """A mutant is caught when its part loses points; in a part worth no points (positional
    encoding, seed 004), when one of its checks fails."""
    if part["max_score"] == 0:
        return any(c["status"] in ("failed", "error") for c in part["checks"])
    return part["score"] < part["max_score"]


def _graded_copy(tmp_path, edits, parts):
    folder = tmp_path / "submission"
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, edits)
    results = grade(folder, only_parts=list(parts))
    return {part["id"]: part for part in results["parts"]}


def test_the_suite_is_big_enough():
    assert len(MUTANTS) >= 40, f"only {len(MUTANTS)} mutants"
    assert len(ALTERNATIVES) >= 8, f"only {len(ALTERNATIVES)} alternatives"
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_mutant_loses_points_in_its_part(mutant, tmp_path):
    part = _graded_copy(tmp_path, mutant.edits, [mutant.part])[mutant.part]
    diagnoses = [c["diagnosis"]["id"] for c in part["checks"] if c["diagnosis"] and c["status"] != "passed"]
    OUTCOMES[mutant.id] = (_lost_points(part), mutant.diagnosis in diagnoses)
    assert _lost_points(part), f"{mutant.id} kept full marks in {mutant.part}"


@pytest.mark.parametrize("alternative", ALTERNATIVES, ids=lambda a: a.id)
def test_alternative_keeps_full_marks(alternative, tmp_path):
    parts = _graded_copy(tmp_path, alternative.edits, alternative.parts)
    for part in parts.values():
        lost = [c["id"] + ": " + str(c["message"]) for c in part["checks"] if c["status"] != "passed"]
        assert not lost and part["score"] == part["max_score"], f"{alternative.id} lost points in {part['id']}: {lost}"


def test_mutation_score():
    """Runs after the mutants (file order): at least 80% of the mutants get the right diagnosis."""
    if len(OUTCOMES) < len(MUTANTS):
        pytest.skip("run the whole file to get the mutation score")
    killed = sum(lost for lost, _ in OUTCOMES.values())
    named = sum(right for _, right in OUTCOMES.values())
    print(f"\nmutation score: {killed}/{len(MUTANTS)} mutants lose points, {named}/{len(MUTANTS)} get the right diagnosis")
    assert killed == len(MUTANTS)
    assert named >= 0.8 * len(MUTANTS)
