"""The worked example of docs/authoring.md §4, a pack written outside the grader's repository
(tests/external_pack/: RMSNorm and SwiGLU, a numeric and a written question), taken through a
course author's steps from a folder of its own: the template built, the reference graded to
full marks and the template to none through the sandbox, its mutants graded with `grade
mutants`, the golden answers recorded and the bundle built, which installs no transformers since
the pack declares no such dependency. The code the guide shows is the pack's own."""

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

EXTERNAL = Path(__file__).resolve().parent / "external_pack"
REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "authoring.md"

pytestmark = pytest.mark.slow


def run_grade(*args):
    return subprocess.run([sys.executable, "-m", "graders.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=900)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of the course (pack, reference) in a folder of its own, its template built by `grade build`."""
    root = tmp_path_factory.mktemp("elsewhere") / "norm_ffn"
    shutil.copytree(EXTERNAL, root, ignore=shutil.ignore_patterns("__pycache__"))
    built = run_grade("build", "--assignment", str(root / "norm_ffn_pack"), "--template")
    assert built.returncode == 0, built.stderr
    return root


def test_the_code_the_guide_shows_is_the_packs_own():
    section = GUIDE.read_text().split("## 4. The checks")[1].split("## 5.")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    sources = "\n".join(path.read_text() for path in [*EXTERNAL.rglob("*.py"), *(REPO / "tests" / "example_pack").rglob("*.py")])
    assert len(blocks) >= 4
    for block in blocks:
        assert block in sources, f"docs/authoring.md §4 shows code no pack holds:\n{block}"


def test_the_reference_gets_full_marks_and_the_template_none(course, tmp_path):
    pack = str(course / "norm_ffn_pack")
    graded = run_grade(str(course / "reference"), "--assignment", pack, "--out", str(tmp_path / "reference"))
    assert graded.returncode == 0, graded.stderr
    results = json.loads((tmp_path / "reference" / "results.json").read_text())
    statuses = {check["id"]: check["status"] for part in results["parts"] for check in part["checks"]}
    assert statuses == {"rmsnorm.matches_reference": "passed", "rmsnorm.tiny_inputs": "passed",
                        "swiglu.matches_reference": "passed", "swiglu.parameters": "passed",
                        "answers.swiglu_parameters": "passed", "answers.why_no_mean": "pending_manual"}
    assert {part["id"]: part["score"] for part in results["parts"]}["swiglu"] == 4
    graded = run_grade(str(course / "student_template"), "--assignment", pack, "--out", str(tmp_path / "template"))
    assert json.loads((tmp_path / "template" / "results.json").read_text())["score"] == 0


def test_grade_mutants_catches_and_names_every_mutant_and_keeps_the_alternatives(course):
    graded = run_grade("mutants", "--assignment", str(course / "norm_ffn_pack"))
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert "mutants: 4, caught 4, named 4 of 4 with a diagnosis; alternatives: 2, at full marks 2" in graded.stdout


def test_the_bundle_installs_no_transformers(course, tmp_path):
    pack = str(course / "norm_ffn_pack")
    recorded = run_grade("build", "--assignment", pack, "--golden")
    assert recorded.returncode == 0, recorded.stderr
    bundle = tmp_path / "norm_ffn-homework.zip"
    built = run_grade("build", "--assignment", pack, "--bundle", "--bundle-out", str(bundle))
    assert built.returncode == 0, built.stderr
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        pyproject = tomllib.loads(archive.read("norm_ffn-homework/pyproject.toml").decode())
    installed = {Requirement(line).name for line in pyproject["project"]["dependencies"]}
    assert {"torch", "hypothesis", "safetensors"} <= installed
    assert not {"transformers", "tokenizers", "huggingface-hub"} & installed, installed
    assert "norm_ffn-homework/graders/packs/norm_ffn/golden/golden.json" in names
    assert not any("/packs/norm_ffn/mutants" in name or name.startswith("norm_ffn-homework/reference") for name in names)
