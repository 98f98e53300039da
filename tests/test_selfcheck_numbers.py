"""Every number a student sees in a self-check is right and shown: outdated golden answers are
refused, not used; written answers never count among the automatic checks, blank or not;
pytest reports a broken file once."""

import dataclasses
import json
import re
import shutil

import pytest

import graders.recording
from graders.bundle import STUDENT_CONFTEST
from graders.recording import out_of_date
from graders.reports.summary import count_checks, headline
from graders.cli import main as grade
from graders.selfcheck import SelfCheckError, cmd_check, not_passing, self_check
from tests.course import CAUSAL_LM

CHECKS_FILE = "pack/checks/causal_lm.py"


def _copy(source, target):
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", ".grade"))
    return target


def perfect_causal_lm(folder):
    """The causal_lm template with the reference's module and answers in it."""
    _copy(CAUSAL_LM.template_dir, folder)
    for name in ("causal_lm.py", "answers.toml"):
        shutil.copy(CAUSAL_LM.reference_dir / name, folder / name)
    return folder


@pytest.fixture
def checks_edited(monkeypatch):
    """The pack's checks as an author leaves them after changing one without recording again."""
    real = graders.recording.fingerprint_files

    def edited(assignment=None):
        files = real(assignment)
        files[CHECKS_FILE] = "0" * 64
        return files

    monkeypatch.setattr(graders.recording, "fingerprint_files", edited)


# ---------------------------------------------------------------------------- stale answers


def test_outdated_answers_are_refused_with_the_fix(checks_edited, tmp_path):
    line = out_of_date(CAUSAL_LM)
    assert f"{CHECKS_FILE} changed" in line and "grade build --golden --assignment causal_lm" in line
    assert "\n" not in line
    with pytest.raises(SelfCheckError, match=f"{CHECKS_FILE} changed"):
        self_check(perfect_causal_lm(tmp_path / "hw"))


def test_a_self_check_that_cannot_start_leaves_no_worker_started_ahead(checks_edited, tmp_path, capsys):
    """`grade check` starts its workers while it reads the golden answers; when they are out of
    date it refuses, and the workers end with it (they were left for whatever ran next in the
    process: the next self-check of a test adopted a stale one)."""
    from graders.sandbox import spawn

    assert cmd_check(["--path", str(perfect_causal_lm(tmp_path / "hw"))]) == 2
    assert f"{CHECKS_FILE} changed" in capsys.readouterr().err
    assert spawn._prestarted == {}


def test_grade_build_refuses_to_bundle_outdated_answers(checks_edited, tmp_path, capsys):
    out = tmp_path / "bundle.zip"
    assert grade(["build", "--assignment", "causal_lm", "--bundle", "--bundle-out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "grade build --golden --assignment causal_lm" in err
    assert not out.exists()


def test_without_the_reference_only_the_shipped_files_are_compared(checks_edited, tmp_path):
    """A student bundle holds no reference: its files are not missing, and the fix is a new
    bundle, not a recording the student cannot make."""
    line = out_of_date(dataclasses.replace(CAUSAL_LM, reference_dir=tmp_path / "nowhere"))
    assert "reference/" not in line and f"{CHECKS_FILE} changed" in line
    assert "ask the course staff for a bundle" in line and "grade build" not in line


# ---------------------------------------------------------------------------- what counts


@pytest.mark.slow
def test_blank_written_answers_neither_count_nor_fail_the_self_check(tmp_path, capsys):
    """All code right, written answers blank: exit 0, and the same count of public checks as
    the template and a perfect copy (written answers are never automatic checks)."""
    folder = perfect_causal_lm(tmp_path / "blank")
    shutil.copy(CAUSAL_LM.template_dir / "answers.toml", folder / "answers.toml")
    assert cmd_check(["--path", str(folder)]) == 0, capsys.readouterr().out
    blank = json.loads((folder / ".grade" / "results.json").read_text())
    assert not not_passing(blank)
    template = _copy(CAUSAL_LM.template_dir, tmp_path / "template")
    assert cmd_check(["--path", str(template)]) == 1
    untouched = json.loads((template / ".grade" / "results.json").read_text())
    assert count_checks(blank).automatic == count_checks(untouched).automatic
    assert f"{count_checks(blank).automatic}/{count_checks(blank).automatic} public checks passed" in headline(blank)


@pytest.mark.slow
def test_pytest_reports_a_file_that_does_not_import_once(tmp_path):
    folder = perfect_causal_lm(tmp_path / "broken")
    (folder / "conftest.py").write_text(STUDENT_CONFTEST)
    with (folder / "causal_lm.py").open("a") as module:
        module.write("\ndef broken(:\n")
    failures = []

    class Collect:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" and report.failed:
                failures.append(report.longreprtext)

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        status = pytest.main(["-q", "-p", "no:cacheprovider"], plugins=[Collect()])
    assert status == pytest.ExitCode.TESTS_FAILED
    assert len(failures) == 1 and "SyntaxError" in failures[0]


# ---------------------------------------------------------------------------- graded after the deadline


@pytest.mark.slow
def test_numeric_answers_are_read_and_said_pending_without_their_outcome(tmp_path, capsys, monkeypatch):
    """Each numeric answer is said: not a number, or a number graded after the due date, right
    (lm_head_parameters, the reference's) or wrong (999) alike."""
    monkeypatch.setenv("COLUMNS", "250")
    folder = perfect_causal_lm(tmp_path / "numbers")
    answers = (folder / "answers.toml").read_text()
    answers = re.sub(r"causal_lm_base_parameters = .*", 'causal_lm_base_parameters = "about ten million"', answers)
    answers = re.sub(r"causal_lm_classification_head_parameters = .*", "causal_lm_classification_head_parameters = 999",
                     answers)
    (folder / "answers.toml").write_text(answers)
    assert cmd_check(["--path", str(folder)]) == 0  # numeric answers are not public checks
    out = " ".join(capsys.readouterr().out.split())
    later = {entry["id"]: entry for entry in json.loads((folder / ".grade" / "results.json").read_text())["after_deadline"]}
    assert {entry["state"] for entry in later.values()} == {"not a number", "graded after the due date"}
    assert later["answers.base_parameters"]["state"] == "not a number"
    assert later["answers.classification_head_parameters"]["state"] == "graded after the due date"  # wrong, not said
    assert later["answers.lm_head_parameters"]["state"] == "graded after the due date"  # right, not said either
    assert "'about ten million': not a number" in out and "999: a number, graded after the due date" in out
    assert "3 numeric answers (6 points) graded after the due date, 1 not yet a number" in out


def test_a_part_without_public_checks_is_said_with_its_points(tmp_path):
    from graders.selfcheck import _note_parts_graded_later, after_the_deadline
    from tests.course import BERT

    entries = after_the_deadline(BERT, ["attention", "finetune"], None)
    assert [(e["kind"], e["id"], e["points"]) for e in entries] == [("part", "finetune", 8.0)]
    results = {"mode": "self-check", "status": "graded", "after_deadline": entries,
               "parts": [{"id": "attention", "checks": []}, {"id": "finetune", "checks": [], "score": 0, "max_score": 0}]}
    _note_parts_graded_later(results)
    assert "note" not in results["parts"][0]
    assert results["parts"][1]["note"].startswith("Not in this score: 8 points graded after the due date, on the course's")
    assert "`grade check finetune` rehearses it here, in smoke mode" in results["parts"][1]["note"]
    assert "Fine-tuning on IMDB (linear from 50% to 90% validation accuracy) (8 points) graded after the due date" \
        in headline(results)


@pytest.mark.slow
def test_naming_the_fine_tuning_rehearses_the_students_loop_with_its_figures_and_never_scores(tmp_path, capsys):
    """`grade check finetune` trains the student's own loop in smoke mode and shows each epoch;
    a loop that never steps is said so, by name. Neither moves the score or the exit status.
    Positive control: `grade check` without the part names runs no rehearsal."""
    from graders.mutants import apply_edits, collect
    from tests.course import BERT

    right = _copy(BERT.reference_dir, tmp_path / "right")
    assert cmd_check(["finetune", "--path", str(right)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    results = json.loads((right / ".grade" / "results.json").read_text())
    (rehearsal,) = results["rehearsals"]["finetune"]
    curve = rehearsal["details"]["training_curve"]
    assert rehearsal["status"] == "passed" and curve["epoch"] == [1, 2, 3, 4], rehearsal
    assert (results["score"], results["max_score"]) == (0, 0) and results["parts"][0]["checks"] == []
    assert "rehearsed here in smoke mode, not a score: passed: best validation accuracy" in out
    assert f"epoch 4: loss {curve['train_loss'][3]:.3f}, validation {curve['valid_acc'][3]:.0%}" in out

    never_steps = next(m for m in collect(BERT)[0] if m.id == "sent_train_no_step")
    broken = _copy(BERT.reference_dir, tmp_path / "broken")
    apply_edits(broken, never_steps.edits)
    assert cmd_check(["finetune", "--path", str(broken)]) == 0  # a rehearsal never fails the self-check
    (rehearsal,) = json.loads((broken / ".grade" / "results.json").read_text())["rehearsals"]["finetune"]
    assert rehearsal["status"] == "failed" and rehearsal["diagnosis"]["id"] == "train_no_step", rehearsal
    assert "rehearsed here in smoke mode, not a score: failed" in " ".join(capsys.readouterr().out.split())

    assert cmd_check(["attention", "--path", str(right)]) == 0
    assert "rehearsals" not in json.loads((right / ".grade" / "results.json").read_text())


# ---------------------------------------------------------------------------- what a finding shows


@pytest.mark.slow
def test_a_check_failing_on_a_wrong_value_shows_what_the_code_printed(tmp_path, capsys, monkeypatch):
    """Not only a check whose code raised: one that returned a wrong value shows the end of what
    the code printed, by default. Positive control: the check itself fails as before."""
    monkeypatch.setenv("COLUMNS", "200")
    folder = perfect_causal_lm(tmp_path / "printing")
    module = (folder / "causal_lm.py").read_text()
    start = module.index("def generate_square_subsequent_mask")
    body = module.index("    return ", start)
    (folder / "causal_lm.py").write_text(module[:body] + "    print('mask of size', sz)\n    return torch.zeros(sz, sz)\n"
                                         + module[body:])
    assert cmd_check(["causal_lm", "--path", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "your code printed:" in out and "mask of size 2" in out
    check = next(c for p in json.loads((folder / ".grade" / "results.json").read_text())["parts"] for c in p["checks"]
                 if c["id"] == "causal_lm.square_mask")
    assert check["status"] == "failed" and "mask of size" in check["details"]["output"]


def test_expected_and_got_that_read_the_same_are_said_once():
    from graders.reports.findings import check_detail_lines

    same = {"details": {"expected": "tensor of shape (4, 2, 4, 4)", "got": "tensor of shape (4, 2, 4, 4)"}}
    assert check_detail_lines(same) == [("expected and got", "tensor of shape (4, 2, 4, 4) both, with other values")]
    other = {"details": {"expected": "tensor of shape (4, 2, 4, 4)", "got": "tensor of shape (4, 4, 2, 4)"}}
    assert [label for label, _ in check_detail_lines(other)] == ["expected", "got"]
