"""What a student reads: `grade check` and `pytest` in the homework folder say what to fix in
full at 80 columns, an untouched function in one line, a syntax error with its line, the score
over the automatic checks with the written answers apart, and nothing meant for instructors."""

import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

from tests.course import HOMEWORK, REFERENCE_DIR, TEMPLATE_DIR
from graders.checks.framework import _describe
from graders.packs.bert.checks.sentiment import GRUArch, SentimentInput
from graders.bundle import STUDENT_CONFTEST
from graders.selfcheck import cmd_check

MASK_ON_KEYS = "mask = mask[:, None, None, :]"
MASK_ON_QUERIES = "mask = mask[:, None, :, None]"


def _homework(source, target):
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", ".grade"))
    return target


def _flat(text):
    return " ".join(text.split())


def test_the_fix_for_a_mask_on_the_query_axis_is_readable_in_full_at_80_columns(tmp_path, capsys, monkeypatch):
    folder = _homework(REFERENCE_DIR, tmp_path / "hw")
    attention = folder / "attention.py"
    assert MASK_ON_KEYS in attention.read_text()
    attention.write_text(attention.read_text().replace(MASK_ON_KEYS, MASK_ON_QUERIES))
    monkeypatch.setenv("COLUMNS", "80")
    assert cmd_check(["attention", "--path", str(folder)]) == 1
    out = capsys.readouterr().out
    # Every line fits, but for the report's path: cut in two, it could not be copied.
    assert all(len(line.rstrip()) <= 80 for line in out.splitlines() if not line.startswith("report: "))
    assert "…" not in out
    assert HOMEWORK.diagnoses["mask_on_query_axis"] in _flat(out)
    assert _flat(out).count(HOMEWORK.diagnoses["mask_on_query_axis"]) == 1  # four checks, one fix
    assert "smallest input: q, k, v of shape (B=1, H=1, T=2, d=1), padding mask [[0, 1]]" in _flat(out)
    assert re.search(r"expected: \[\[\[\[1\.0, 0\.0\], \[1\.0, 0\.0\]\]\]\] got: \[.*nan", _flat(out))


def test_a_note_under_the_summary_is_wrapped_at_80_columns(tmp_path, capsys, monkeypatch):
    """A student's torch is not the lock's: the note says so within the terminal's width (the
    notes once came out unwrapped, and a version note ran past 80 columns)."""
    from graders import selfcheck

    real = selfcheck.library_versions()
    monkeypatch.setattr(selfcheck, "library_versions", lambda: {**real, "torch": "2.99.0"})
    monkeypatch.setenv("COLUMNS", "80")
    folder = _homework(REFERENCE_DIR, tmp_path / "hw")
    assert cmd_check(["attention", "--path", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"the golden answers were recorded with torch {real['torch']}, you have 2.99.0" in _flat(out)
    assert all(len(line.rstrip()) <= 80 for line in out.splitlines() if not line.startswith("report: "))


def test_an_untouched_function_is_one_line(tmp_path, capsys):
    folder = _homework(TEMPLATE_DIR, tmp_path / "hw")
    assert cmd_check(["attention", "mha", "--path", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "TODO" not in out and "Traceback" not in out
    assert _flat(out).count("not implemented yet: scaled_dot_product") == 1
    assert _flat(out).count("not implemented yet: MultiHeadAttention.__init__") == 1
    assert len(out.strip().splitlines()) <= 8


def test_a_syntax_error_shows_its_file_and_line(tmp_path, capsys):
    folder = _homework(REFERENCE_DIR, tmp_path / "hw")
    attention = folder / "attention.py"
    lines = attention.read_text().splitlines()
    attention.write_text("\n".join([*lines, "def broken(:"]) + "\n")
    assert cmd_check(["attention", "--path", str(folder)]) == 1
    out = _flat(capsys.readouterr().out)
    assert f"attention.py, line {len(lines) + 1}" in out
    assert "def broken(:" in out


@pytest.mark.slow
def test_written_answers_are_apart_with_the_rubric_points(tmp_path, capsys, monkeypatch):
    """A perfect homework scores full marks on the automatic checks; each written answer shows
    the rubric's 5 points (not the causal-LM homework's 21 points of answers shared among its 3
    public ones: the numeric answers are hidden)."""
    from tests.course import CAUSAL_LM

    folder = _homework(CAUSAL_LM.reference_dir, tmp_path / "hw")
    monkeypatch.setenv("COLUMNS", "80")
    assert cmd_check(["causal_lm", "answers", "--path", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "Score on public automatic checks: 8 / 8" in out
    assert "Written answers, graded by hand after the deadline" in out
    assert len(re.findall(r"5 points written", out)) == 3
    results = json.loads((folder / ".grade" / "results.json").read_text())
    answers = next(p for p in results["parts"] if p["id"] == "answers")
    assert {c["max_score"] for c in answers["checks"]} == {5.0}
    assert all(c["graded_by_hand"] for c in answers["checks"])


@pytest.mark.slow
def test_a_student_sees_no_sandbox_warning(tmp_path):
    """The worker may run as root on a student's machine (a container, Colab): nothing about the
    sandbox, and no line of the grader's source, reaches the student."""
    folder = _homework(REFERENCE_DIR, tmp_path / "hw")
    run = subprocess.run([sys.executable, "-m", "graders.cli", "check", "attention"], cwd=folder,
                         capture_output=True, text=True, timeout=300, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stderr == ""
    assert not re.search(r"root|sandbox|isolat|Warning", run.stdout, re.IGNORECASE), run.stdout


@pytest.mark.slow
def test_pytest_on_the_untouched_template_is_short(tmp_path):
    """Each untouched function fails one test in one line; the other tests it stops are skipped."""
    folder = _homework(TEMPLATE_DIR, tmp_path / "hw")
    (folder / "conftest.py").write_text(STUDENT_CONFTEST)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], cwd=folder,
                         capture_output=True, text=True, timeout=600, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) <= 120, run.stdout
    assert "TODO" not in run.stdout
    said = "\n".join(line for line in lines if str(folder) not in line)  # the folder's path may hold "root"
    assert not re.search(r"warning|sandbox|root", said, re.IGNORECASE), said
    failures = [line for line in lines if line.startswith("not implemented yet: ")]
    assert failures and len(failures) == len(set(failures)), failures
    assert "not implemented yet: scaled_dot_product" in failures


def test_a_counterexample_names_its_fields_and_rounds_its_numbers():
    example = SentimentInput(GRUArch(1, 1, 1, False), torch.tensor([[30, 0]]), torch.tensor([[1, 0]]), 7)
    assert _describe([example], ["ex"]) == (
        "arch=(hidden_dim=1, output_dim=1, n_layers=1, bidirectional=False), text=[[30, 0]] (int64, shape (1, 2)), "
        "attention_mask=[[1, 0]] (int64, shape (1, 2)), weights_seed=7")
    described = _describe([3, torch.tensor([[0.123456789, -2.0]]), torch.zeros(7, 8)], ["sz", "x", "big"])
    assert described == "sz=3; x=[[0.1235, -2.0]] (float32, shape (1, 2)); big=float32 tensor of shape (7, 8)"
