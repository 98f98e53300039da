"""Assignment packs (graders/assignment.py): a manifest that cannot be used is an error naming
the file and the entry; which pack a command grades is the one asked for, else the only
installed one, else the one the homework folder belongs to; `--assignment` reaches every command."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from graders import assignment
from graders.assignment import PackError, for_submission, load

EXAMPLE = Path(__file__).resolve().parent / "example_pack" / "softmax_pack"
REPO = Path(__file__).resolve().parent.parent


def pack_with(tmp_path, old, new):
    folder = tmp_path / "pack"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = folder / "assignment.toml"
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new))
    return folder


@pytest.mark.parametrize("old, new, message", [
    ('name = "softmax"', 'name = "Soft Max"', "[assignment] name 'Soft Max' must be lower-case"),
    ('module = "softmax"', 'module = "softmaxx"', "[parts.softmax] module 'softmaxx' is not in [modules]"),
    ("points = 10", 'points = "ten"', "[parts.softmax] points must be a number"),
    ('[modules]\n"softmax.py" = ["softmax"]', "", "[modules] is missing or empty"),
    ('title = "Softmax"\n', "", "[parts.softmax] title must be a non-empty string"),
    ("[assignment]", "[assignment", "not readable TOML"),
])
def test_an_unusable_manifest_names_its_file_and_entry(tmp_path, old, new, message):
    with pytest.raises(PackError) as raised:
        load(pack_with(tmp_path, old, new))
    assert message in str(raised.value) and "assignment.toml" in str(raised.value)


def test_an_unknown_assignment_lists_the_installed_ones(tmp_path):
    with pytest.raises(PackError, match=r"no assignment 'nope'.*\(bert, causal_lm, gpt\)"):
        load("nope")
    with pytest.raises(PackError, match="no assignment"):
        load(tmp_path)  # a folder without a manifest


def test_a_pack_is_found_by_its_name_or_its_folder():
    by_name = load("bert")
    assert load(by_name.folder) is by_name and by_name.package == "graders.packs.bert"
    example = load(EXAMPLE)
    assert example.package.startswith("_assignment_softmax_") and not example.installed
    assert example.reference_dir == (EXAMPLE.parent / "reference").resolve()


def test_two_copies_of_one_pack_are_imported_apart(tmp_path):
    copy = tmp_path / "softmax_pack"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(EXAMPLE.parent / "reference", tmp_path / "reference", ignore=shutil.ignore_patterns("__pycache__"))
    first, second = load(EXAMPLE), load(copy)
    assert first.package != second.package
    for pack in (first, second):
        checks = pack.registry()["softmax"]
        assert len(checks) == 2 and all(c.func.__module__.startswith(pack.package + ".") for c in checks)
        assert Path(pack.reference_module("softmax").__file__).parent == pack.reference_dir


def test_a_homework_folder_belongs_to_the_pack_whose_files_it_holds(tmp_path, monkeypatch):
    two = {"bert": load("bert").folder, "softmax": EXAMPLE}
    monkeypatch.setattr(assignment, "installed", lambda: two)
    monkeypatch.setattr(assignment, "load", lambda name: load(two.get(str(name), name)))
    homework = tmp_path / "homework"
    homework.mkdir()
    (homework / "softmax.py").write_text("")
    assert for_submission(homework).name == "softmax"
    assert "GRADE_ASSIGNMENT" not in os.environ  # nothing is handed down but the value
    assert for_submission(homework, given="bert").name == "bert"  # --assignment wins
    (homework / "softmax.py").unlink()
    with pytest.raises(PackError, match="holds no file or graded name.*choose one with --assignment"):
        for_submission(homework)  # an empty folder: no pack's files


@pytest.mark.parametrize("argv", [["--assignment", "nope", "build"], ["build", "--assignment=nope"]])
def test_every_command_takes_the_assignment_and_refuses_an_unknown_one(argv):
    run = subprocess.run([sys.executable, "-m", "graders.cli", *argv], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 2 and "no assignment 'nope'" in run.stderr


def test_the_assignment_reaches_the_processes_a_command_starts_as_a_value(tmp_path):
    """No process-wide choice: a batch job's spec names the pack's folder, which its process loads."""
    from graders.batch.discover import Submission
    from graders.batch.run import BatchConfig, job_specs

    assert not {"current", "select", "chosen"} & set(vars(assignment))
    pack = load(EXAMPLE)
    submission = Submission("alice", tmp_path / "alice.zip", sha256="0" * 64)
    [spec] = job_specs(pack, [submission], tmp_path / "out", BatchConfig())
    probe = "import json, sys; from graders.assignment import load; print(load(json.loads(sys.argv[1])['assignment']).name)"
    run = subprocess.run([sys.executable, "-c", probe, json.dumps(spec)], capture_output=True, text=True, cwd=tmp_path)
    assert run.stdout.strip() == "softmax", run.stderr


# ------------------------------------------------------------------ the course's three homeworks


def test_the_course_is_three_packs_that_share_no_part_but_answers():
    packs = [load(name) for name in assignment.installed()]
    assert [pack.name for pack in packs] == ["bert", "causal_lm", "gpt"]
    assert sum(part.points for pack in packs for part in pack.rubric.parts) == 104
    parts = [part.id for pack in packs for part in pack.rubric.parts if part.id != "answers"]
    assert len(parts) == len(set(parts))
    files = [file for pack in packs for file in pack.expected_files if file != "answers.toml"]
    assert len(files) == len(set(files))
    assert len({pack.bundle_name for pack in packs}) == 3


def test_a_submission_belongs_to_the_homework_whose_files_or_names_it_holds(tmp_path):
    causal_lm = tmp_path / "lm"
    causal_lm.mkdir()
    (causal_lm / "causal_lm.py").write_text("")
    (causal_lm / "answers.toml").write_text("")
    assert for_submission(causal_lm).name == "causal_lm"
    zipped = tmp_path / "gpt.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("alice_hw3/gpt.py", "")
    assert for_submission(zipped).name == "gpt"
    notebook = REPO / "fixtures" / "bert" / "notebooks" / "seed004_student.ipynb"
    assert for_submission(notebook).name == "bert"
    only_answers = tmp_path / "answers"
    only_answers.mkdir()
    (only_answers / "answers.toml").write_text("")
    with pytest.raises(PackError, match=r"could belong to bert or causal_lm: choose with --assignment"):
        for_submission(only_answers)
    not_a_zip = tmp_path / "hw.zip"
    not_a_zip.write_bytes(b"PK\x03\x04 and then nothing a zip holds")
    with pytest.raises(PackError, match=r"holds no file or graded name of the installed assignments \(bert, causal_lm, gpt\)"):
        for_submission(not_a_zip)


@pytest.mark.slow
def test_grade_grades_the_homework_a_submission_is_of(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "graders.cli", str(load("gpt").template_dir), "--out", str(out),
                          "--parts", "gpt"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["assignment"]["name"] == "gpt" and [p["id"] for p in results["parts"]] == ["gpt"]
    assert results["status"] == "graded" and results["score"] == 0


def test_commands_that_need_one_homework_ask_for_it(tmp_path):
    batch = subprocess.run([sys.executable, "-m", "graders.cli", "batch", str(tmp_path), "--out", str(tmp_path / "o")],
                           capture_output=True, text=True, cwd=tmp_path)
    assert batch.returncode == 2 and "choose one with --assignment NAME" in batch.stderr, batch.stderr
    build = subprocess.run([sys.executable, "-m", "graders.cli", "build", "--bundle", "--bundle-out", "x.zip"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert build.returncode == 2 and "--bundle-out names one zip" in build.stderr, build.stderr
    assert not (tmp_path / "x.zip").exists()


def test_a_missing_submission_is_named_before_any_homework_is_asked_for(tmp_path):
    run = subprocess.run([sys.executable, "-m", "graders.cli", str(tmp_path / "typo.zip")], capture_output=True,
                         text=True, cwd=tmp_path)
    assert run.returncode == 2 and "no such file or folder" in run.stderr, run.stderr
