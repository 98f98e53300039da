"""Container isolation (`--isolation container`): for a one-shot container holding one submission,
such as Gradescope's, where Docker forbids bubblewrap's namespaces. The container is the
boundary; inside it the worker still drops to a uid of its own that the OS denies every secret,
under rlimits and the audit hook, and grading still fails closed without those.

The real run makes a container-like machine here: bubblewrap switched off, root, and a Python
every user may read (the system's, as a container image has it) whose environment sees this
one's packages through a .pth file."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from graders.build import REPO_ROOT
from graders.sandbox import isolation
from graders.sandbox.isolation import CONTAINER, FULL, IsolationUnavailable
from tests.test_wheel_install import clean_environment, linked_venv

# Grades or trains for long: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

SYSTEM_PYTHON = Path("/usr/bin/python3.11")
EXAMPLE = REPO_ROOT / "reference" / "bert"  # a correct homework


@pytest.fixture
def no_bubblewrap(monkeypatch):
    monkeypatch.setenv(isolation.BWRAP_ENVIRONMENT, "")


def test_container_isolation_needs_no_bubblewrap_but_full_does(no_bubblewrap, monkeypatch):
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    monkeypatch.setattr(isolation, "interpreter_paths", lambda: ["/usr/lib/python3.11"])
    monkeypatch.setattr(isolation, "own_root_works", lambda: True)
    isolation.require_isolation(CONTAINER)
    with pytest.raises(IsolationUnavailable) as refused:
        isolation.require_isolation(FULL)
    assert "bubblewrap is not installed" in str(refused.value)
    assert "`--isolation container` grades without namespaces" in str(refused.value)  # the way out, where it fits


def test_container_isolation_refuses_where_the_worker_cannot_have_a_root_of_its_own(no_bubblewrap, monkeypatch):
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    monkeypatch.setattr(isolation, "interpreter_paths", lambda: ["/usr/lib/python3.11"])
    monkeypatch.setattr(isolation, "own_root_works", lambda: False)  # a container without CAP_SYS_CHROOT
    with pytest.raises(IsolationUnavailable) as refused:
        isolation.require_isolation(CONTAINER)
    assert "the worker would see the machine's file system" in str(refused.value)
    assert "--cap-add SYS_CHROOT" in str(refused.value)


def test_a_gpu_worker_keeps_the_machines_file_system_and_others_get_their_own_root(no_bubblewrap, monkeypatch):
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    monkeypatch.setattr(isolation, "interpreter_paths", lambda: ["/usr/lib/python3.11"])
    monkeypatch.setattr(isolation, "own_root_works", lambda: True)
    monkeypatch.setattr(isolation, "namespaces_work", lambda: False)
    cpu = isolation.choose_layers(use_bwrap=False, sandbox_uid=1_970_000_000)
    gpu = isolation.choose_layers(use_bwrap=False, sandbox_uid=1_970_000_000, gpu=True)
    assert (cpu.level, cpu.own_root) == (CONTAINER, True)
    assert (gpu.level, gpu.own_root) == (CONTAINER, False)  # CUDA in a root of links is untried


def test_container_isolation_still_refuses_without_root(no_bubblewrap, monkeypatch):
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 1000)
    with pytest.raises(IsolationUnavailable, match="not root"):
        isolation.require_isolation(CONTAINER)


def test_container_isolation_refuses_a_python_the_worker_uid_cannot_reach(no_bubblewrap, monkeypatch, tmp_path):
    locked = tmp_path / "locked"
    (locked / "python").mkdir(parents=True)
    locked.chmod(0o700)
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    monkeypatch.setattr(isolation, "interpreter_paths", lambda: [str(locked / "python")])
    with pytest.raises(IsolationUnavailable) as refused:
        isolation.require_isolation(CONTAINER)
    assert f"cannot reach {locked / 'python'}" in str(refused.value)
    assert "(container isolation)" in str(refused.value) and "grade doctor --isolation container" in str(refused.value)


def test_an_unknown_level_is_a_programming_error():
    with pytest.raises(ValueError, match="no isolation level 'partial'"):
        isolation.require_isolation("partial")


# ---------------------------------------------------------------------------- a real container-like run


@pytest.fixture(scope="module")
def container_python():
    """A Python under /usr that sees this environment's packages and this checkout's grader."""
    if os.geteuid() != 0 or not SYSTEM_PYTHON.is_file():
        pytest.skip("needs root and the system's Python 3.11 (a container image has both)")
    if f"{sys.version_info.major}.{sys.version_info.minor}" != "3.11":
        pytest.skip("this environment's packages are for another Python")
    home = Path(tempfile.mkdtemp(prefix="container-", dir="/var/tmp"))
    try:
        home.chmod(0o755)
        yield linked_venv(home / "venv", base_python=SYSTEM_PYTHON, first=[REPO_ROOT]), home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_doctor_reports_container_isolation_layer_by_layer(container_python):
    python, _ = container_python
    done = subprocess.run([str(python), "-m", "graders.cli", "doctor", "--isolation", "container"], capture_output=True,
                          text=True, cwd="/", timeout=300, env=clean_environment(**{isolation.BWRAP_ENVIRONMENT: ""}))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ok  ] worker runs unprivileged" in done.stdout
    assert "[ok  ] secrets unreadable by the sandbox uid (OS permissions)" in done.stdout
    assert "(container isolation: the container is the boundary)" in done.stdout  # what only namespaces give
    assert done.stdout.strip().splitlines()[-1].startswith("container isolation: instructor grading with")
    full = subprocess.run([str(python), "-m", "graders.cli", "doctor"], capture_output=True, text=True, cwd="/",
                          timeout=300, env=clean_environment(**{isolation.BWRAP_ENVIRONMENT: ""}))
    assert full.returncode == 1 and "NOT isolated (full isolation)" in full.stdout


def test_a_grade_under_container_isolation_runs_as_a_uid_of_its_own_and_says_so(container_python):
    python, home = container_python
    out = home / "out"
    done = subprocess.run([str(python), "-m", "graders.cli", str(EXAMPLE), "--assignment", "bert", "--parts", "attention",
                           "--isolation", "container", "--out", str(out)], capture_output=True, text=True, cwd="/",
                          timeout=600, env=clean_environment(**{isolation.BWRAP_ENVIRONMENT: ""}))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "graded" and results["score"] == results["max_score"] > 0
    sandbox = results["sandbox"]
    assert (sandbox["level"], sandbox["bwrap"], sandbox["full_isolation"]) == ("container", False, False)
    assert sandbox["sandbox_uid"] is not None and sandbox["audit_hook"] and sandbox["rlimits"]
    assert "container isolation" in sandbox["note"] and not sandbox["unsafe"]
    refused = subprocess.run([str(python), "-m", "graders.cli", str(EXAMPLE), "--assignment", "bert", "--parts",
                              "attention", "--out", str(home / "refused")], capture_output=True, text=True, cwd="/",
                             timeout=300, env=clean_environment(**{isolation.BWRAP_ENVIRONMENT: ""}))
    assert refused.returncode == 3 and "--isolation container" in refused.stderr  # full, by default, refuses
    assert not (home / "refused").exists()
