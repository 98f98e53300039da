"""The Gradescope kit, run as Gradescope runs it: the zip unpacked into <root>/source, its
run_autograder copied to <root>/run_autograder, the student's files in <root>/submission, and
<root>/results/results.json read back.

setup.sh needs apt and an index, so the test stands in for it: a virtualenv whose .pth puts the
kit's grader/ first (exactly as setup.sh does) and this environment's packages after it, for
the dependencies. The grader that runs is the kit's copy (checked).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import jsonschema
import pytest

from graders.build import REPO_ROOT
from graders.gradescope_kit import write_kit
from graders.lock import read_lock
from graders.mutants import Edit, apply_edits
from graders.packs.causal_lm.mutants.causal_lm import LM, MASK
from graders.sandbox import isolation
from tests.course import CAUSAL_LM as PACK
from tests import report_samples
from tests.report_samples import visible_bytes
from tests.test_wheel_install import clean_environment, linked_venv

# Grades or trains for long: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

SCHEMA = json.loads((REPO_ROOT / "graders" / "schemas" / "gradescope.schema.json").read_text())
# The causal-LM homework's: visible checks, hidden numeric answers, written answers
PARTS = ["causal_lm", "answers"]
# A student whose square mask has its polarity inverted
BUG = Edit(LM, MASK, 'return torch.tril(torch.full((sz, sz), float("-inf")), diagonal=-1)')
FULL = os.geteuid() == 0 and isolation.find_bwrap() is not None and isolation.bwrap_works(isolation.find_bwrap(), True)


def test_the_kit_holds_what_gradescope_needs(tmp_path):
    kit = write_kit(tmp_path / "autograder.zip", PACK, parts=PARTS)
    with zipfile.ZipFile(kit) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        requirements = archive.read("requirements.txt").decode().splitlines()
        setup = archive.read("setup.sh").decode()
        config = json.loads(archive.read("kit.json"))
    assert {"setup.sh", "run_autograder", "requirements.txt", "kit.json", "grader/graders/cli.py",
            "grader/graders/packs/causal_lm/assignment.toml", "grader/graders/packs/causal_lm/diagnoses.toml",
            "grader/reference/causal_lm/causal_lm.py", "grader/reference/causal_lm/answers.toml"} <= names
    assert not any(name.startswith(("grader/graders/packs/bert/", "grader/reference/bert/")) for name in names)
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert not any("__pycache__" in name for name in names)
    lock = read_lock()
    pinned = dict(line.split(";")[0].split("==") for line in requirements)
    assert pinned == {name: lock[name] for name in pinned} and {"hypothesis", "sympy"} <= set(pinned)
    assert "transformers" not in pinned  # the causal_lm pack declares no dependency beyond the engine's
    assert "torch" not in pinned and f'"torch=={lock["torch"]}"' in setup and "--index-url" in setup and "bubblewrap" in setup
    assert config == {"assignment": "causal_lm", "parts": PARTS, "seed": None, "isolation": "container",
                      "unsafe_no_sandbox": False}
    assert subprocess.run(["bash", "-n", "-c", setup]).returncode == 0
    assert write_kit(tmp_path / "again.zip", PACK, parts=PARTS).read_bytes() == kit.read_bytes()


def test_the_kit_command_rejects_an_unknown_part(tmp_path):
    done = subprocess.run([sys.executable, "-m", "graders.cli", "gradescope-kit", "--out", str(tmp_path / "k.zip"),
                           "--assignment", "bert", "--parts", "atention"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 2 and "no such part: atention" in done.stderr
    assert not (tmp_path / "k.zip").exists()
    unchosen = subprocess.run([sys.executable, "-m", "graders.cli", "gradescope-kit", "--out", str(tmp_path / "k.zip")],
                              capture_output=True, text=True, cwd=REPO_ROOT, env=clean_environment())
    assert unchosen.returncode == 2 and "choose one with --assignment NAME" in unchosen.stderr, unchosen.stderr
    assert not (tmp_path / "k.zip").exists()


@pytest.fixture(scope="module")
def gradescope_root():
    """/autograder as Gradescope lays it out, under a folder others may enter (the sandbox user
    must reach the kit's grader, as on Gradescope)."""
    root = Path(tempfile.mkdtemp(prefix="autograder-"))
    try:
        root.chmod(0o755)
        kit = write_kit(root / "autograder.zip", PACK, parts=PARTS)
        with zipfile.ZipFile(kit) as archive:
            archive.extractall(root / "source")
        for path in (root / "source").rglob("*"):
            path.chmod(0o755 if path.is_dir() or path.name in ("setup.sh", "run_autograder") else 0o644)
        shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
        shutil.copytree(PACK.reference_dir, root / "submission", ignore=shutil.ignore_patterns("__pycache__"))
        apply_edits(root / "submission", [BUG])
        (root / "results").mkdir()
        linked_venv(root / "venv", first=[root / "source" / "grader"])
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_autograder(root: Path, **environment) -> tuple[subprocess.CompletedProcess, dict]:
    results = root / "results" / "results.json"
    results.unlink(missing_ok=True)
    done = subprocess.run(["bash", str(root / "run_autograder")], cwd=root, capture_output=True, text=True,
                          timeout=600, env=clean_environment(**{"GRADER_PYTHON": str(root / "venv" / "bin" / "python"),
                                                                "AUTOGRADER_ROOT": str(root), **environment}))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(results.read_text())
    jsonschema.validate(document, SCHEMA)
    return done, document


def test_the_kit_runs_its_own_grader(gradescope_root):
    python = gradescope_root / "venv" / "bin" / "python"
    located = subprocess.run([str(python), "-c", "import graders, reference; print(graders.__file__, *reference.__path__)"],
                             capture_output=True, text=True, cwd="/", env=clean_environment())
    grader = gradescope_root / "source" / "grader"
    assert located.stdout.split() == [str(grader / "graders" / "__init__.py"), str(grader / "reference")], \
        located.stdout + located.stderr


WHAT_A_WORKER_SEES = """
import json, sys
from graders.assignment import load
from graders.sandbox import exposure, isolation
seen = exposure.exposure((), load(sys.argv[1]).task_modules)
before = isolation.interpreter_paths()  # the rule before the allow-list: every folder the Python reads, whole
paths = json.loads(sys.argv[2])
print(json.dumps({"now": [p for p in paths if seen.visible(p)],
                  "before": [p for p in paths if any(exposure.inside(p, folder) for folder in before)]}))
"""


def test_the_kits_workers_see_its_engine_and_pack_and_nothing_else_of_the_kit(gradescope_root):
    """The kit's layout as setup.sh makes it: a .pth names the kit's grader/ folder, which holds
    the reference beside the engine. What a worker sees (bubblewrap's binds, the own root's
    tree) is the engine and the pack's tasks: not the reference even were it no secret, not
    kit.json or setup.sh."""
    grader = gradescope_root / "source" / "grader"
    paths = [str(path) for path in (grader / "graders" / "sandbox" / "worker.py",
                                    grader / "graders" / "packs" / PACK.name / "tasks.py",
                                    grader / "reference" / PACK.name / "causal_lm.py",
                                    gradescope_root / "source" / "kit.json", gradescope_root / "source" / "setup.sh")]
    done = subprocess.run([str(gradescope_root / "venv" / "bin" / "python"), "-c", WHAT_A_WORKER_SEES, PACK.name,
                           json.dumps(paths)], capture_output=True, text=True, cwd="/", env=clean_environment())
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["now"] == paths[:2]
    assert paths[2] in seen["before"]  # positive control: the kit's grader/ folder, whole, held the reference


@pytest.fixture(scope="module")
def graded_by_the_kit(gradescope_root):
    """The kit's results.json for the student of the fixture (graded once for the tests below)."""
    if not FULL:
        pytest.skip("needs bubblewrap and root (bash setup.sh as root installs it)")
    return run_autograder(gradescope_root)[1]


def test_run_autograder_grades_and_hides_the_hidden_checks(graded_by_the_kit):
    document = graded_by_the_kit
    tests = document["tests"]
    assert tests and {t["tags"][0] for t in tests} == set(PARTS)
    assert "square_mask_polarity" in {tag for t in tests for tag in t["tags"]}  # the student's inverted mask
    hidden = [t for t in tests if t["visibility"] == "after_due_date"]
    assert hidden, "the numeric answers are hidden checks"
    assert "score" not in document
    for test in hidden:
        assert test["name"].split(": ", 1)[1] not in document["output"]
    written = [t for t in tests if "graded by hand" in t["output"]]
    assert written and all(t["max_score"] == 0 for t in written)


def test_two_submissions_that_differ_only_in_a_hidden_answer_show_the_same_bytes(gradescope_root, graded_by_the_kit):
    """Resubmitting with another guess for a hidden numeric answer must not show whether the
    guess was right: the top-level output and every visible test are the same bytes."""
    answers = gradescope_root / "submission" / "answers.toml"
    right = answers.read_text()
    wrong = re.sub(r"causal_lm_lm_head_parameters = \d+", "causal_lm_lm_head_parameters = 12345", right)
    assert wrong != right
    first = graded_by_the_kit
    try:
        answers.write_text(wrong)
        _, second = run_autograder(gradescope_root)
    finally:
        answers.write_text(right)
    hidden = {t["name"]: t.get("status") for t in first["tests"] if t["visibility"] == "after_due_date"}
    assert hidden != {t["name"]: t.get("status") for t in second["tests"] if t["visibility"] == "after_due_date"}
    assert visible_bytes(first) == visible_bytes(second)


@pytest.mark.slow
def test_in_gradescope_s_container_the_kit_grades_as_under_full_isolation(gradescope_root, graded_by_the_kit):
    """As on Gradescope: no namespaces, root, a Python every user may read (the system's). The
    kit grades at container isolation, its workers in a root of their own, and gives the same
    tests the same outcomes as under bubblewrap (the positive control of the mode)."""
    system_python = Path("/usr/bin/python3.11")
    if not system_python.is_file() or sys.version_info[:2] != (3, 11):
        pytest.skip("needs the system's Python 3.11, for which this environment's packages are")
    python = linked_venv(gradescope_root / "system-venv", base_python=system_python,
                         first=[gradescope_root / "source" / "grader"])
    _, document = run_autograder(gradescope_root, GRADER_PYTHON=str(python), **{isolation.BWRAP_ENVIRONMENT: ""})
    outcomes = {t["name"]: (t.get("status"), t.get("score"), t["max_score"]) for t in document["tests"]}
    assert outcomes == {t["name"]: (t.get("status"), t.get("score"), t["max_score"]) for t in graded_by_the_kit["tests"]}
    assert any("square_mask_polarity" in t["tags"] and t["status"] == "failed" for t in document["tests"])


def test_run_autograder_fails_closed_where_nothing_isolates(gradescope_root):
    """No namespaces, and a Python the worker's uid cannot reach (under /root here): not even
    container isolation. The student is told honestly; the instructor sees why and the fix."""
    done, document = run_autograder(gradescope_root, **{isolation.BWRAP_ENVIRONMENT: ""})
    assert document["score"] == 0 and document["tests"] == []
    assert document["output"].startswith("Not graded: the course's autograder could not run your code safely")
    assert "has been told" not in document["output"]  # nobody is told: the student is asked to tell
    assert "refusing to grade" in done.stderr and "cannot reach" in done.stderr  # the instructor's: why, and the fix
    assert "AUTOGRADER NOT GRADING" in done.stderr and "(container)" in done.stderr


# ---------------------------------------------------------------- what the export counts


def _written(key, written):
    """A written answer as the grade records it: pending once written, failed while blank."""
    written_check = report_samples.check(f"answers.{key}", f"Question {key}?", "pending_manual" if written else "failed", 5)
    written_check["graded_by_hand"] = True
    return written_check


@pytest.mark.parametrize("blank", [0, 1, 3])
def test_written_answers_are_never_autograder_points_and_the_maxima_do_not_move(blank):
    """However many written answers are blank, every one is a 0-point test and the visible
    maxima sum to the same; the autograder's stdout, which carries hidden outcomes, is hidden.
    Positive control: the automatic checks beside them keep their points."""
    from graders.reports.gradescope import to_gradescope

    answers = [_written(key, written=i >= blank) for i, key in enumerate(("why", "how", "what"))]
    numeric = report_samples.check("answers.count", "A parameter count", "failed", 2, visibility="hidden",
                                   message="count = 10,050,200, expected a different count")
    code = report_samples.check("causal_lm.square_mask", "The square mask", "passed", 8)
    results = report_samples.result([report_samples.part("causal_lm", "Model", [code]),
                                     report_samples.part("answers", "Answers", [numeric, *answers])])
    export = to_gradescope(results)
    jsonschema.validate(export, SCHEMA)
    tests = {test["name"].split(": ", 1)[1]: test for test in export["tests"]}
    assert [tests[f"Question {key}?"]["max_score"] for key in ("why", "how", "what")] == [0, 0, 0]
    assert all("status" not in tests[f"Question {key}?"] for key in ("why", "how", "what"))
    assert tests["The square mask"]["max_score"] == 8 and tests["A parameter count"]["max_score"] == 2
    assert sum(test["max_score"] for test in export["tests"] if test["visibility"] == "visible") == 8
    assert export["stdout_visibility"] == "hidden"
