"""The student bundle as a new student meets it: unzipped into a fresh folder, installed in a
fresh virtual environment by the commands of its README, then `grade check` and `pytest` in
its homework folder. Nothing of this environment is visible there (no --system-site-packages,
no .pth): what the README installs is all the grader has.

One deviation from the README, because CI reaches package registries only: its PyTorch line
names PyTorch's own CPU index, which is replaced by this environment's exact torch version
(the same CPU build, from the machine's pip configuration). Every other line runs as written.
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

import pytest
import torch

from tests.course import BERT, TOP
from graders.bundle import HOMEWORK, build_bundle

from test_bundle import perfect_homework

pytestmark = pytest.mark.slow

README_TORCH_LINE = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
INSTALL_TIMEOUT_S = 1500
CHECK_TIMEOUT_S = 900


def readme_install_commands(readme: str) -> list[str]:
    """The lines of the first ```bash block of the README's install section."""
    section = readme.split("## 1. Install", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's install section has no bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def clean_environment(**extra: str) -> dict[str, str]:
    leaking = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH", "PYTHONNOUSERSITE")
    return {**{k: v for k, v in os.environ.items() if k not in leaking}, **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bundle root, venv bin folder): the bundle unzipped and installed as its README says."""
    base = Path(tempfile.mkdtemp(prefix="bundle-install-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None))
    try:
        bundle = build_bundle(BERT, tmp_path_factory.mktemp("dist") / "student_bundle.zip")
        with zipfile.ZipFile(bundle) as archive:
            archive.extractall(base)
        root = base / TOP
        commands = readme_install_commands((root / "README.md").read_text())
        assert README_TORCH_LINE in commands, commands
        commands[commands.index(README_TORCH_LINE)] = f"pip install 'torch=={torch.__version__}'"
        # `python3` is this test's own interpreter (its base, not a virtual environment).
        shims = base / "shims"
        shims.mkdir()
        (shims / "python3").symlink_to(Path(sys._base_executable).resolve())
        environment = clean_environment(PATH=f"{shims}{os.pathsep}{os.environ.get('PATH', '')}")
        script = "set -ex\n" + "\n".join(commands) + "\n"
        run = subprocess.run(["bash", "-c", script], cwd=root, env=environment, capture_output=True, text=True,
                             timeout=INSTALL_TIMEOUT_S)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        yield root, root / ".venv" / "bin"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def in_venv(bin_dir: Path, command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    environment = clean_environment(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                                    VIRTUAL_ENV=str(bin_dir.parent))
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)


def checks_of(results: dict) -> list[dict]:
    return [c for part in results["parts"] for c in part["checks"]]


def test_the_environment_holds_the_bundle_alone(installed):
    root, bin_dir = installed
    run = in_venv(bin_dir, ["python", "-c", "import graders, transformers, importlib.util, sys; print(graders.__file__); "
                                            "print(importlib.util.find_spec('reference')); print(sys.prefix)"], cwd=root.parent)
    assert run.returncode == 0, run.stderr
    graders_file, reference, prefix = run.stdout.split()
    assert Path(graders_file).is_relative_to(root / ".venv") and reference == "None" and Path(prefix) == root / ".venv"


def test_a_correct_homework_passes_every_public_check(installed):
    """The reference's modules in the bundle's homework folder: every public check passes (none
    skipped for want of a golden answer, none needing the reference or the fixtures, which the
    installed environment cannot see), and the self-check writes its report."""
    root, bin_dir = installed
    homework = perfect_homework(root / HOMEWORK, root / "correct")

    check = in_venv(bin_dir, ["grade", "check"], cwd=homework)
    results = json.loads((homework / ".grade" / "results.json").read_text())
    not_passed = [(c["id"], c["status"], c["message"]) for c in checks_of(results)
                  if c["status"] not in ("passed", "pending_manual")]
    assert check.returncode == 0 and not not_passed, f"{not_passed}\n{check.stdout[-3000:]}\n{check.stderr[-3000:]}"
    assert results["mode"] == "self-check" and results["parts"]
    assert (homework / ".grade" / "report.html").is_file()
    assert any(c["id"].startswith("sentiment.") and c["status"] == "passed" for c in checks_of(results))

    tests = in_venv(bin_dir, ["pytest", "-q", "-p", "no:cacheprovider"], cwd=homework)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert re.search(r"\b\d+ passed", tests.stdout) and "failed" not in tests.stdout.splitlines()[-1]


def test_the_untouched_template_fails_every_check_with_its_todo(installed):
    root, bin_dir = installed
    homework = root / HOMEWORK
    check = in_venv(bin_dir, ["grade", "check"], cwd=homework)
    assert check.returncode == 1, check.stdout[-3000:] + check.stderr[-3000:]
    results = json.loads((homework / ".grade" / "results.json").read_text())
    code_checks = [c for c in checks_of(results) if c["status"] != "pending_manual"]
    assert code_checks
    # A function's TODO is its NotImplementedError's text; answers.toml's TODOs are comments
    # above empty answers, which the checks report as not written.
    without_todo = [(c["id"], c["status"], c["message"]) for c in code_checks
                    if c["status"] == "passed" or not re.search(
                        r"^no answer written for: " if c["id"].startswith("answers.") else r"^not implemented: .*TODO",
                        c["message"] or "")]
    assert not without_todo, without_todo

    tests = in_venv(bin_dir, ["pytest", "-q", "-p", "no:cacheprovider"], cwd=homework)
    assert tests.returncode == 1, tests.stdout[-3000:] + tests.stderr[-3000:]
    # Each untouched function fails the first test that needs it; the tests it would fail again
    # are skipped (docs/selfcheck.md): every check fails or is skipped, none passes.
    summary = tests.stdout.splitlines()[-1]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (failed|skipped|passed)", summary)}
    assert "passed" not in counts and counts.get("failed", 0) > 0, tests.stdout[-2000:]
    assert counts["failed"] + counts.get("skipped", 0) == len(code_checks), tests.stdout[-2000:]
    assert "ModuleNotFoundError" not in tests.stdout
