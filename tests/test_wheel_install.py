"""`pip install .` (not editable) gives a grader that works without the repository.

The wheel is built from a copy of the sources, installed with --no-deps into a fresh virtual
environment, and the built-in example (fixtures/bert/submissions/seed004_student) is graded from a
folder outside the repository. The heavy dependencies (torch, transformers, ...) are not
installed again: a `.pth` file adds this environment's site-packages to the new one, after the
new one's own folder, so `graders` and `reference` come from the wheel (checked), and the
sandbox binds those folders for the worker (graders/sandbox/isolation.py, `audit.pth_folders`).

The installed grade must give the score the checkout gives, and leave the installed reference/
(solution, answers, the small sentiment set) unreadable by other users.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "fixtures" / "bert" / "submissions" / "seed004_student"
GRADE_TIMEOUT_S = 900
# The smoke fine-tuning trains for as many epochs as fit in its time budget, so its score depends
# on the machine's load: it is compared by status (it ran from the wheel's data), every other part
# by score. A short budget keeps the test short.
FINETUNE_BUDGET_S = "10"
NOBODY = 65534

pytestmark = pytest.mark.slow


def run(command, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def clean_environment(**extra) -> dict[str, str]:
    """This process's environment without what would point Python at the checkout."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH")}
    return {**environment, **extra}


def build_wheel(tmp: Path) -> Path:
    """The wheel, built offline from a copy of what pyproject.toml packages (the build writes
    build/ and *.egg-info beside the sources: not into the checkout)."""
    setuptools_major = int(importlib.metadata.version("setuptools").split(".")[0])
    if setuptools_major < 68 or (setuptools_major < 70 and importlib.util.find_spec("wheel") is None):
        pytest.skip("this environment's setuptools cannot build the wheel offline (pyproject needs setuptools>=68)")
    source = tmp / "source"
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("graders", "reference"):
        shutil.copytree(REPO / name, source / name, ignore=junk)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    built = run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                 "--no-index", "-w", str(tmp / "dist")], env=clean_environment())
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp / "dist").glob("transformer_grader-*.whl")
    return wheel


def install(wheel: Path, venv: Path) -> Path:
    """A fresh environment holding the wheel, and this environment's packages through a .pth;
    returns its site-packages."""
    made = run([sys.executable, "-m", "venv", str(venv)], env=clean_environment())
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    # Installed before the .pth exists: pip then sees no other transformer-grader (this
    # environment's editable install) to replace or to be satisfied by.
    installed = run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
                    env=clean_environment())
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return see_this_environment(python)


def see_this_environment(python: Path, first=()) -> Path:
    """Make the environment of `python` see the folders `first`, then this environment's
    site-packages, through a .pth file (after its own folder); returns its site-packages."""
    purelib = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       env=clean_environment()).stdout.strip())
    ours = [folder for folder in site.getsitepackages() if os.path.isdir(folder)]
    (purelib / "_this_environment.pth").write_text("".join(f"{folder}\n" for folder in [*first, *ours]))
    return purelib


def linked_venv(venv: Path, *, base_python=sys.executable, first=()) -> Path:
    """A fresh virtual environment of `base_python`, without pip, that sees `first` and this
    environment's packages (`see_this_environment`); returns its python."""
    made = run([str(base_python), "-m", "venv", "--without-pip", str(venv)], env=clean_environment())
    assert made.returncode == 0, made.stderr
    see_this_environment(venv / "bin" / "python", first)
    return venv / "bin" / "python"


def grade_command(grade: list[str], out: Path) -> list[str]:
    return [*grade, str(EXAMPLE), "--out", str(out), "--finetune-budget", FINETUNE_BUDGET_S]


def refusal_or_failure(name: str, done: subprocess.CompletedProcess) -> None:
    output = done.stdout[-3000:] + done.stderr[-3000:]
    if done.returncode != 0 and ("bubblewrap" in output or "isolat" in output):
        if shutil.which("bwrap") is None or os.geteuid() != 0:
            pytest.skip(f"grading needs full isolation here (bubblewrap and root): {done.stderr.strip()[:500]}")
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{output}"


def readable_by_nobody(path: Path) -> bool:
    """Asked of the kernel, as an unprivileged user: every folder on the way counts."""
    probe = ["test", "-r", str(path), "-o", "-x", str(path)]
    return subprocess.run(probe, user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def test_the_installed_wheel_grades_the_example_as_the_checkout_does(tmp_path):
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("instructor grading needs bubblewrap and root (the grade refuses without them)")
    wheel = build_wheel(tmp_path)
    names = set(__import__("zipfile").ZipFile(wheel).namelist())
    assert {"reference/bert/answers.toml", "reference/bert/small_sentiment.jsonl", "reference/causal_lm/answers.toml",
            "reference/gpt/gpt.py", "graders/packs/bert/assignment.toml", "graders/packs/gpt/golden/golden.json",
            "graders/reports/templates/report.html.j2", "graders/packs/bert/golden/golden.safetensors",
            "graders/packs/bert/diagnoses.toml"} <= names

    # A folder other users may enter, as a system-wide install would be, so that the check of
    # reference/'s permissions below means something (pytest's own folders are private). Under
    # /tmp on purpose: the worker's own /tmp must keep what is bound below it.
    base = Path(tempfile.mkdtemp(prefix="wheel-install-"))
    try:
        base.chmod(0o755)
        purelib = install(wheel, base / "venv")
        reference = purelib / "reference"
        work = base / "work"  # outside the repository: nothing of the checkout is on the path
        work.mkdir()
        located = run([str(base / "venv" / "bin" / "python"), "-c",
                       "import graders, reference; print(graders.__file__); print(reference.__file__)"],
                      cwd=work, env=clean_environment())
        assert located.returncode == 0, located.stderr
        assert [Path(line).parent.parent for line in located.stdout.split()] == [purelib, purelib], located.stdout

        # The checkout's grade of the same example runs alongside, for the score to compare with.
        installed = subprocess.Popen(
            grade_command([str(base / "venv" / "bin" / "grade")], base / "out"), cwd=work, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=clean_environment(TRANSFORMER_GRADER_CACHE=str(base / "cache")))
        checkout = subprocess.Popen(
            grade_command([sys.executable, "-c", "from graders.cli import run; run()"], tmp_path / "checkout-out"),
            cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_environment())
        try:
            installed_out, installed_err = installed.communicate(timeout=GRADE_TIMEOUT_S)
            checkout_out, checkout_err = checkout.communicate(timeout=GRADE_TIMEOUT_S)
        finally:
            for process in (installed, checkout):
                if process.poll() is None:
                    process.kill()
                    process.wait()
        refusal_or_failure("installed grade", subprocess.CompletedProcess([], installed.returncode,
                                                                         installed_out, installed_err))
        refusal_or_failure("checkout grade", subprocess.CompletedProcess([], checkout.returncode,
                                                                        checkout_out, checkout_err))

        results = json.loads((base / "out" / "results.json").read_text())
        expected = json.loads((tmp_path / "checkout-out" / "results.json").read_text())
        assert results["status"] == "graded"
        assert results["max_score"] == expected["max_score"]
        assert ({p["id"]: p["score"] for p in results["parts"] if p["id"] != "finetune"}
                == {p["id"]: p["score"] for p in expected["parts"] if p["id"] != "finetune"})
        # The smoke fine-tuning read the small sentiment set from the wheel: it built its encoder
        # and features from it into this grade's own cache, and trained.
        assert (base / "cache" / "finetune" / "encoders" / "smoke-v2" / "config.json").is_file()
        finetune = next(p for p in results["parts"] if p["id"] == "finetune")
        assert finetune["provisional"] and [c["status"] for c in finetune["checks"]] != ["error"], finetune

        assert not stat.S_IMODE(reference.stat().st_mode) & 0o007, oct(reference.stat().st_mode)
        assert not readable_by_nobody(reference / "bert" / "answers.toml")
        assert not readable_by_nobody(reference / "bert" / "small_sentiment.jsonl")
    finally:
        shutil.rmtree(base, ignore_errors=True)
