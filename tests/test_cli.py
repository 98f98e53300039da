"""The `grade` command itself: `--version`, every command's help naming --assignment, and Ctrl-C
ending a grade with one line and the shell's status instead of a traceback."""

import signal
import subprocess
import sys
import threading
import weakref

import pytest

from graders import __version__, interrupt
from graders.build import REPO_ROOT
from graders.cli import EXIT_INTERRUPTED, SUBCOMMANDS, main, version_line
from graders.interrupt import MESSAGE
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


# Moments to interrupt a grade at, each an event its progress lines show: the first part begins
# (workers still importing and starting), every worker serves requests (the main worker has
# answered the first part, the fine-tuning's has trained an epoch), and the last part begins
# (the main worker is nearly done: the grade soon waits on the fine-tuning's thread).
MOMENTS = {
    "first_part": ("grading attention",),
    "every_worker_serving": ("grading mha", "fine-tuning epoch 1:"),
    "last_part": ("grading answers",),
}
# Only if the grade never prints them or never ends: a watchdog ends it, and the test fails saying what it printed.
WATCHDOG_S = 900


@pytest.fixture(scope="module")
def busy_cores():
    """Load: two spinning processes, at a lower priority, for the whole Ctrl-C test (a
    loaded machine moves the moments at which the signal lands)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "import os; os.nice(5)\nwhile True: pass"])
                for _ in range(2)]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


@pytest.mark.slow
@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_ends_a_grade_with_one_line_and_writes_nothing(moment, tmp_path, busy_cores):
    """SIGINT to the grading process alone (not its process group, as a terminal's Ctrl-C would:
    the workers get nothing), at each moment, under load: exit 130, the one line, nothing written."""
    out = tmp_path / "out"
    # A fine-tuning budget no loaded machine uses up: the grade is still running when it is interrupted.
    grading = subprocess.Popen([sys.executable, "-m", "graders.cli", str(EXAMPLE), "--out", str(out), "--unsafe-no-sandbox",
                                "--finetune-budget", str(WATCHDOG_S)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               env=clean_environment())
    watchdog = threading.Timer(WATCHDOG_S, grading.kill)
    watchdog.start()
    try:
        # Interrupted on an event, not after a time, which a machine's load decides.
        progress = ""
        while not all(line in progress for line in MOMENTS[moment]) and (line := grading.stderr.readline()):
            progress += line
        assert all(line in progress for line in MOMENTS[moment]), progress
        grading.send_signal(signal.SIGINT)
        _, err = grading.communicate()
    finally:
        watchdog.cancel()
        grading.kill()
    assert grading.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == MESSAGE and err.count(MESSAGE) == 1
    assert not out.exists() or not any(out.iterdir())


def _finishes_despite_a_lost_interrupt():
    """A command during which Ctrl-C lands in a finalizer, as one can during any garbage
    collection: Python prints the KeyboardInterrupt as ignored and the command goes on."""
    held = type("Held", (), {})()
    weakref.finalize(held, signal.raise_signal, signal.SIGINT)
    del held
    return 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the lost KeyboardInterrupt
def test_ctrl_c_lost_in_a_finalizer_still_ends_the_command(capsys):
    # Positive control: under Python's own handler the command finishes as if never interrupted.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert _finishes_despite_a_lost_interrupt() == 0
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupt.run_command(_finishes_despite_a_lost_interrupt) == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip().splitlines()[-1] == MESSAGE


def test_ctrl_c_once_the_command_has_ended_changes_nothing():
    assert interrupt.run_command(lambda: 0) == 0
    assert interrupt.run_command(lambda: 3) == 3
