"""`grade mutants`: every mutant and alternative of a pack graded, one row each, exit 1 on a miss.

The rows come from graders.mutants.grade_all, which takes the grading as a function: the
command grades through the sandbox (`grade`'s own path); the suite can pass the in-process
stand-in of the worker (tests/checks_inprocess.py) to grade the course's hundreds of mutants
fast. Each kind of miss is shown to fail: a mutant whose edit changes nothing, a mutant named
by another diagnosis than it expects, an alternative that loses points."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graders.assignment import load
from graders.mutants import Alternative, CheckOutcome, Edit, Mutant, grade_all, grade_variant, table
from tests.checks_inprocess import run_part
from tests.course import BERT

EXAMPLE = Path(__file__).resolve().parent / "example_pack"
REPO = Path(__file__).resolve().parent.parent


def inprocess_grader(pack, max_examples=None):
    """A PartGrader of the in-process stand-in: trusted code only (the reference and its edits)."""
    def grade_parts(folder, parts, seed):
        return {cid: CheckOutcome(result.status, result.diagnosis, result.message or "")
                for part in parts
                for cid, result in run_part(folder, part, seed=seed, max_examples=max_examples, pack=pack).items()}

    return grade_parts


@pytest.fixture(scope="module")
def example():
    return load(EXAMPLE / "softmax_pack")


def test_the_example_packs_mutant_is_caught_and_named_and_its_alternative_kept(example, tmp_path):
    rows = grade_all(example, inprocess_grader(example), seeds=range(2), scratch=tmp_path)
    assert [(row.id, row.kind, row.caught, row.named, row.missed) for row in rows] == [
        ("softmax_without_shift", "mutant", True, True, False), ("softmax_ignores_dim", "mutant", True, True, False),
        ("softmax_by_logsumexp", "alternative", False, True, False)]
    assert rows[0].diagnoses == ("softmax_overflows",)
    assert rows[1].diagnoses == ("softmax_wrong_dim",)
    printed = table(rows)
    assert "mutants: 2, caught 2, named 2 of 2 with a diagnosis; alternatives: 1, at full marks 1" in printed


def test_every_kind_of_miss_is_a_miss(example, tmp_path):
    grader = inprocess_grader(example)
    changes_nothing = Mutant("softmax_plus_zero", "softmax", (Edit("softmax.py", "weights = shifted.exp()",
                                                                   "weights = shifted.exp() + 0"),), "softmax_overflows")
    named_otherwise = Mutant("softmax_without_shift", "softmax", (Edit("softmax.py", "shifted = x - x.amax(dim=dim, keepdim=True)",
                                                                       "shifted = x"),), "softmax_wrong_dim")
    loses_points = Alternative("softmax_by_doubling", ("softmax",), (Edit("softmax.py", "return weights / weights.sum",
                                                                          "return 2 * weights / weights.sum"),))
    rows = [grade_variant(variant, example.reference_dir, grader, [0], tmp_path)
            for variant in (changes_nothing, named_otherwise, loses_points)]
    assert [(row.caught, row.named, row.missed) for row in rows] == [(False, False, True), (True, False, True), (True, True, True)]
    printed = table(rows)
    assert "softmax_overflows (expected softmax_wrong_dim)" in printed and "alternative: LOST softmax." in printed


@pytest.mark.slow
def test_the_course_pack_rows_match_what_the_mutation_suite_asserts(tmp_path):
    """A few of the bert pack's, through the same in-process grading tests/test_mutation.py uses."""
    chosen = ["sdp_not_scaled", "sdp_einsum"]
    rows = grade_all(BERT, inprocess_grader(BERT, max_examples=5), only=chosen, scratch=tmp_path)
    assert {row.id: (row.kind, row.missed) for row in rows} == {"sdp_not_scaled": ("mutant", False),
                                                                 "sdp_einsum": ("alternative", False)}
    with pytest.raises(ValueError, match="no mutant or alternative nope"):
        grade_all(BERT, inprocess_grader(BERT), only=["nope"], scratch=tmp_path)


@pytest.mark.slow
def test_grade_mutants_exits_1_on_a_miss_through_the_sandbox(tmp_path):
    course = tmp_path / "softmax"
    shutil.copytree(EXAMPLE, course, ignore=shutil.ignore_patterns("__pycache__"))
    mutants = course / "softmax_pack" / "mutants.py"
    mutants.write_text(mutants.read_text() + (
        "\nMUTANTS.append(Mutant('softmax_plus_zero', 'softmax', (Edit('softmax.py', 'weights = shifted.exp()', "
        "'weights = shifted.exp() + 0'),), diagnosis='softmax_overflows'))\n"))
    graded = subprocess.run([sys.executable, "-m", "graders.cli", "mutants", "--assignment", str(course / "softmax_pack"),
                             "--only", "softmax_plus_zero", "softmax_without_shift"],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    assert graded.returncode == 1, graded.stdout + graded.stderr
    lines = {line[3:].split()[0]: line for line in graded.stdout.splitlines()[1:-1]}
    assert lines["softmax_plus_zero"].startswith("!!") and " NO " in lines["softmax_plus_zero"]
    assert not lines["softmax_without_shift"].startswith("!!")
