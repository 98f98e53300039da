"""benchmarks/gpu-runner.sh: valid bash, and its preparation fetches what a bare GPU runner lacks."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu-runner.sh"


def test_the_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_without_a_mode_it_says_its_usage():
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 2 and "prepare | run" in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TEST_GPU_RUNNER_PREPARE") != "1",
                    reason="reaches the package index and Debian's archive: the suite makes no network call unless "
                           "TEST_GPU_RUNNER_PREPARE=1 (run it before carrying gpu-wheels/ to a GPU machine)")
def test_preparation_downloads_the_wheels_and_bubblewrap(tmp_path):
    if shutil.which("apt-get") is None:
        pytest.skip("no apt-get here: the preparation needs a Debian/Ubuntu machine for bubblewrap's .deb")
    wheels = tmp_path / "wheels"
    done = subprocess.run(["bash", str(SCRIPT), "prepare"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHON": sys.executable, "RUNNER_WHEELS": str(wheels)})
    if done.returncode != 0 and any(word in done.stderr for word in ("connection", "Connection", "resolve", "index")):
        pytest.skip(f"the package index or Debian's archive is not reachable here: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    names = [path.name.lower() for path in wheels.iterdir()]
    for package in ("jsonschema", "nbformat", "submitit", "hypothesis", "rich", "rpds_py"):
        assert any(name.startswith(package) and name.endswith(".whl") for name in names), (package, names)
    assert any(name.startswith("rpds_py") and "cp312" in name for name in names)  # built for the runner's Python
    assert any(name.startswith("bubblewrap_") and name.endswith(".deb") for name in names)
