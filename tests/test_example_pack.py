"""The example pack of docs/authoring.md (tests/example_pack/: one function, two checks, one
mutant, one alternative), taken through the guide's steps as a course author would: the
template built, the reference and the template graded through the sandbox, the mutant caught
and the alternative passed, the golden answers recorded, the bundle built, and the bundle's own
grader self-checking the reference, with nothing of the repository's course in reach."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from graders.assignment import load
from graders.grading import grade
from graders.mutants import apply_edits, collect

# Grades or trains for long: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parent / "example_pack"
REPO = Path(__file__).resolve().parent.parent


def run_grade(*args, cwd=REPO, env=None):
    return subprocess.run([sys.executable, "-m", "graders.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of the example course (pack, reference), with its template built by `grade build`."""
    root = tmp_path_factory.mktemp("course") / "softmax"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    built = run_grade("build", "--assignment", str(root / "softmax_pack"), "--template")
    assert built.returncode == 0, built.stderr
    return root


@pytest.fixture(scope="module")
def pack(course):
    return load(course / "softmax_pack")


def scores(results):
    return {part["id"]: part["score"] for part in results["parts"]}


def test_the_template_is_made_from_the_reference(course):
    template = (course / "student_template" / "softmax.py").read_text()
    assert "raise NotImplementedError" in template and "amax" not in template
    assert "subtract the largest logit" in template  # the TODO is kept


def test_the_reference_gets_full_marks_and_the_template_none(course, tmp_path):
    out = tmp_path / "reference"
    graded = run_grade(str(course / "reference"), "--assignment", str(course / "softmax_pack"), "--out", str(out))
    assert graded.returncode == 0, graded.stderr
    results = json.loads((out / "results.json").read_text())
    assert (results["score"], results["max_score"]) == (10, 10)
    assert results["assignment"] == {"name": "softmax", "title": "A stable softmax"}
    assert "A stable softmax" in (out / "report.html").read_text()
    assert [c["id"] for c in results["parts"][0]["checks"]] == ["softmax.matches_reference", "softmax.large_logits"]
    graded = run_grade(str(course / "student_template"), "--assignment", str(course / "softmax_pack"),
                       "--out", str(tmp_path / "template"))
    assert json.loads((tmp_path / "template" / "results.json").read_text())["score"] == 0


def test_the_mutant_is_caught_and_named_and_the_alternative_passes(course, pack, tmp_path):
    mutants, alternatives = collect(pack)
    assert len(mutants) == 2 and len(alternatives) == 1
    for variant in [*mutants, *alternatives]:
        folder = tmp_path / variant.id
        shutil.copytree(course / "reference", folder)
        apply_edits(folder, variant.edits)
        results = grade(folder, assignment=pack)
        if variant in mutants:
            assert scores(results)[variant.part] < 10, variant.id
            named = {c["diagnosis"]["id"]: c["diagnosis"]["text"] for c in results["parts"][0]["checks"] if c["diagnosis"]}
            # in the pack's own words, though the course pack loaded in this process has the same id
            assert named.get(variant.diagnosis) == pack.diagnoses[variant.diagnosis]
        else:
            assert all(scores(results)[part] == 10 for part in variant.parts), variant.id


def test_the_bundle_self_checks_the_reference_with_its_own_grader(course, tmp_path):
    pack_folder = str(course / "softmax_pack")
    assert run_grade("build", "--assignment", pack_folder, "--golden").returncode == 0
    bundle = tmp_path / "softmax-homework.zip"
    built = run_grade("build", "--assignment", pack_folder, "--bundle", "--bundle-out", str(bundle))
    assert built.returncode == 0, built.stderr
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "unpacked")
    top = tmp_path / "unpacked" / "softmax-homework"
    assert "softmax-homework/graders/packs/softmax/golden/golden.json" in names
    assert [name for name in names if "/graders/packs/" in name and "/packs/softmax/" not in name
            and not name.endswith("packs/__init__.py")] == []  # the course of this repository stays out
    assert not any(name.startswith(("softmax-homework/graders/packs/softmax/mutants", "softmax-homework/reference"))
                   for name in names)

    homework = top / "homework"
    shutil.copy(course / "reference" / "softmax.py", homework / "softmax.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(top)  # the bundle's grader, ahead of the installed one
    which = subprocess.run([sys.executable, "-c", "import graders; print(graders.__file__)"],
                           capture_output=True, text=True, cwd=homework, env=env)
    assert Path(which.stdout.strip()).is_relative_to(top)
    checked = run_grade("check", cwd=homework, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    results = json.loads((homework / ".grade" / "results.json").read_text())
    assert [c["status"] for c in results["parts"][0]["checks"]] == ["passed", "passed"]

    (homework / "softmax.py").write_text((course / "student_template" / "softmax.py").read_text())
    assert run_grade("check", cwd=homework, env=env).returncode == 1


def test_two_packs_in_one_process_keep_their_own_words_for_one_diagnosis(pack):
    from graders.checks.framework import diagnosis_text
    from tests.course import HOMEWORK

    ours, course = pack.registry()["softmax"][0], HOMEWORK.registry()["attention"][0]
    assert diagnosis_text(ours, "softmax_wrong_dim") == pack.diagnoses["softmax_wrong_dim"]
    assert diagnosis_text(course, "softmax_wrong_dim") == HOMEWORK.diagnoses["softmax_wrong_dim"] != pack.diagnoses["softmax_wrong_dim"]
    assert diagnosis_text(ours, "wrong_shape") == diagnosis_text(course, "wrong_shape")  # the engine's own
