"""Static checks in the test suite (so CI runs them with the README's one test command): ruff
on the grader, its tests and benchmarks (pyflakes and bugbear), with pycodestyle, pyupgrade and
sorted imports for the check framework a course author extends; mypy on the check contract
(pyproject.toml, [tool.mypy]). Each is also checked to fail on a planted mistake."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graders.build import REPO_ROOT

FRAMEWORK_STRICT = ["graders/assignment.py", "graders/mutants.py", "graders/checks/framework.py", "graders/checks/contract.py",
                    "tests/test_student_contract.py"]
TOOLS = Path(sys.executable).parent


def run(tool, *args, cwd=REPO_ROOT):
    executable = TOOLS / tool
    if not executable.exists():
        executable = shutil.which(tool)
    assert executable, f"{tool} is not installed: run setup.sh (it installs the [dev] extra)"
    return subprocess.run([str(executable), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    everywhere = run("ruff", "check", "--no-cache", "graders", "tests", "benchmarks")
    assert everywhere.returncode == 0, everywhere.stdout + everywhere.stderr
    strict = run("ruff", "check", "--no-cache", "--extend-select", "E,W,UP,I", *FRAMEWORK_STRICT)
    assert strict.returncode == 0, strict.stdout + strict.stderr


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    """A cache of mypy's of this session alone (never a stale one): the planted mistake's run
    reads what the contract's run analysed (torch, the framework) instead of doing it again."""
    return str(tmp_path_factory.mktemp("mypy-cache"))


@pytest.mark.slow
def test_mypy_finds_nothing_in_the_check_contract(mypy_cache):
    checked = run("mypy", "--cache-dir", mypy_cache)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("tool, planted, found_words", [
    ("ruff", "import os\n\n\ndef f(x=[]):\n    return undefined_name\n", ["F401", "B006", "F821"]),
    ("mypy", "from graders.checks.contract import StudentCode\n\n\nclass Half:\n"
             "    def seed(self, seed: int) -> None: ...\n\n\nstudent: StudentCode = Half()\n",
     ['variable has type "StudentCode"']),
])
def test_each_tool_catches_a_planted_mistake(tmp_path, tool, planted, found_words, mypy_cache):
    source = tmp_path / "planted.py"
    source.write_text(planted)
    args = (["check", "--no-cache", str(source)] if tool == "ruff"
            else ["--cache-dir", mypy_cache, "--config-file", str(REPO_ROOT / "pyproject.toml"), str(source)])
    found = run(tool, *args)
    assert found.returncode != 0 and all(words in found.stdout for words in found_words), found.stdout
