"""The `grade` command itself: `--version`, every command's help naming --assignment, and Ctrl-C
ending a grade with one line and the shell's status instead of a traceback."""

import signal
import subprocess
import sys
import time

import pytest

from graders import __version__
from graders.build import REPO_ROOT
from graders.cli import EXIT_INTERRUPTED, SUBCOMMANDS, main, version_line
from graders.lock import read_lock
from tests.test_wheel_install import clean_environment

EXAMPLE = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"


def test_version_names_the_grader_the_deciding_libraries_and_the_lock(capsys):
    assert main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == version_line()
    lock = read_lock()
    assert line.startswith(f"transformer-grader {__version__} (Python {sys.version.split()[0]}; ")
    assert f"torch {lock['torch']}, hypothesis {lock['hypothesis']}, transformers {lock['transformers']}" in line
    assert line.endswith("; the locked environment)")


@pytest.mark.parametrize("command", [[], *([name] for name in SUBCOMMANDS)], ids=lambda c: " ".join(c) or "grade")
def test_every_command_help_lists_the_assignment_option(command, capsys):
    try:
        status = main([*command, "--help"])
    except SystemExit as done:  # a subcommand's parser prints its help and exits
        status = done.code
    assert status == 0
    assert "--assignment" in capsys.readouterr().out


def test_ctrl_c_ends_a_grade_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    grading = subprocess.Popen([sys.executable, "-m", "graders.cli", str(EXAMPLE), "--out", str(out), "--unsafe-no-sandbox"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               env=clean_environment())
    started = time.monotonic()
    try:
        progress = ""
        while "grading attention" not in progress and time.monotonic() - started < 120:
            progress += grading.stderr.readline()
        assert "grading attention" in progress, progress
        grading.send_signal(signal.SIGINT)
        _, err = grading.communicate(timeout=120)
    finally:
        grading.kill()
    assert grading.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "grade: interrupted (Ctrl-C); what had not finished was not written"
    assert not out.exists()
