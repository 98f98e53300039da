"""What a new TA or student meets at the edges (issue 42): every bad hand-in gets a written result
and its real cause, no false flag on a hand-in made as the bundle's README says, one line with
the fix (exit 2) for every bad use of a command, and reports that cannot disagree.

Each test fails on the grader before issue 42. docs/submissions.md ("Bad input") lists what was
tried, each line with the test that holds it. Nothing here runs student code but the tests
marked slow: a rejection, a refusal and a report need no worker."""

import csv
import json
import re
import shutil
import types
import zipfile
from pathlib import Path

import jsonschema
import pytest

import report_samples
from graders.assignment import for_submission, load
from graders.batch import store
from graders.bundle import bundle_files
from graders.cli import main
from graders.ingest import ingest
from graders.integrity import scan_folder
from graders.notebook import extract_notebook
from graders.handin import SubmissionLayout
from tests.course import REFERENCE_DIR

BERT = load("bert")
REPO = REFERENCE_DIR.parent.parent
NOTEBOOK = REPO / "fixtures" / "bert" / "notebooks" / "seed004_student.ipynb"
RESULTS_SCHEMA = json.loads((REPO / "graders" / "schemas" / "results.schema.json").read_text())


def _zip(path, files):
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def _reference_files():
    return {p.name: p.read_bytes() for p in REFERENCE_DIR.iterdir() if p.suffix in (".py", ".toml") and p.name != "__init__.py"}


def _grade(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# ------------------------------------------------ unreadable hand-ins, with or without --assignment

def _write(path, data):
    path.write_bytes(data)
    return path


UNREADABLE = {
    "damaged_zip": (lambda p: _write(p.with_suffix(".zip"), b"PK\x03\x04 and nothing a zip holds"), "damaged or truncated"),
    "empty_zip": (lambda p: _zip(p.with_suffix(".zip"), {}), "the zip file is empty"),
    "notebook_not_json": (lambda p: _write(p.with_suffix(".ipynb"), b"not json"), "is not JSON"),
    "tarball": (lambda p: _write(p.with_suffix(".tar.gz"), b"\x1f\x8b\x08\x00rest"), "a gzip archive"),
    "lone_module": (lambda p: _write(p.with_name("attention.py"), b"x = 1\n"), "a single file"),
    "zip_of_a_zip": (lambda p: _zip(p.with_suffix(".zip"), {"hw.zip": _zip(p.parent / "inner.zip", _reference_files())
                                                            .read_bytes()}), "another zip"),
    "empty_folder": (lambda p: p.mkdir() or p, "holds no files"),
}


@pytest.mark.parametrize("given", [None, "bert"], ids=["detected", "given"])
@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_hand_in_gets_a_written_result_with_its_true_reason(case, given, tmp_path, capsys):
    make, reason = UNREADABLE[case]
    source = make(tmp_path / "alice")
    out = tmp_path / "out"
    status, stdout, err = _grade(capsys, source, "--out", out, *(["--assignment", given] if given else []))
    assert status == 0, err
    results = json.loads((out / "results.json").read_text())
    jsonschema.validate(results, RESULTS_SCHEMA)
    assert results["status"] == "rejected" and reason in results["reason"], results["reason"]
    assert ("assignment" in results) == (given is not None)
    assert reason in " ".join(stdout.split()) and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["feedback.html", "gradescope.json", "report.html", "results.json"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging folder left


def test_a_zip_nested_two_folders_deep_is_told_by_its_files(tmp_path):
    nested = _zip(tmp_path / "alice.zip", {f"alice/hw3/{name}": data for name, data in _reference_files().items()})
    assert for_submission(nested).name == "bert"
    notebook_in_a_zip = _zip(tmp_path / "bob.zip", {"bob/homework.ipynb": NOTEBOOK.read_bytes()})
    assert for_submission(notebook_in_a_zip).name == "bert"


def test_an_unreadable_hand_in_reads_score_0_without_a_maximum_it_never_had(tmp_path, capsys):
    source = UNREADABLE["damaged_zip"][0](tmp_path / "alice")
    _, out, _ = _grade(capsys, source, "--out", tmp_path / "out")
    assert "Score: 0\n" in out and "Score: 0 / 0" not in out


# ------------------------------------------------ a notebook cell that is not Python

def _broken_notebook(path):
    notebook = json.loads(NOTEBOOK.read_text())
    cell = next(i for i, c in enumerate(notebook["cells"], 1) if "class MultiHeadAttention" in "".join(c["source"]))
    source = "".join(notebook["cells"][cell - 1]["source"]).split("\n")
    source[5] += " )"
    notebook["cells"][cell - 1]["source"] = "\n".join(source)
    path.write_text(json.dumps(notebook))
    return path, cell


def test_a_name_defined_in_a_cell_that_is_not_python_says_which_cell_to_fix(tmp_path):
    notebook, cell = _broken_notebook(tmp_path / "hw.ipynb")
    extraction = extract_notebook(notebook, tmp_path / "modules", layout=SubmissionLayout.of(BERT))
    assert f"cell {cell} of the notebook" in extraction.not_read["MultiHeadAttention"]
    module = types.ModuleType("attention")  # the generated module, run here as the worker would import it
    exec((tmp_path / "modules" / "attention.py").read_text(), module.__dict__)
    assert callable(module.scaled_dot_product)
    with pytest.raises(AttributeError, match=rf"MultiHeadAttention is not defined: cell {cell} of the notebook, "
                                             r"which defines it, is not valid Python \(line 6: unmatched '\)'\)"):
        getattr(module, "MultiHeadAttention")  # noqa: B009 - the attribute a check asks the module for
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        getattr(module, "Nope")  # noqa: B009


@pytest.mark.slow
def test_the_cause_of_a_broken_notebook_cell_comes_first_in_the_terminal_and_gradescope(tmp_path, capsys):
    notebook, cell = _broken_notebook(tmp_path / "hw.ipynb")
    status, stdout, _ = _grade(capsys, notebook, "--out", tmp_path / "out", "--parts", "mha")
    assert status == 0
    first = stdout[stdout.index("What to fix"):].splitlines()[1]
    assert "MultiHeadAttention is not defined: cell" in first, stdout
    export = json.loads((tmp_path / "out" / "gradescope.json").read_text())
    assert all(f"cell {cell} of the notebook" in test["output"].split("```text\n")[1][:200] for test in export["tests"])


# ------------------------------------------------ the student bundle's own files

def _homework_zip(path, conftest=None):
    files = {name.split("/homework/", 1)[1]: data for name, data in bundle_files(BERT).items() if "/homework/" in name}
    files = {**files, **{name: data for name, data in _reference_files().items()}}
    if conftest is not None:
        files["conftest.py"] = conftest
    files[".grade/results.json"] = b"{}"  # what `grade check` leaves there
    files[".pytest_cache/README.md"] = b"pytest"
    return _zip(path, {f"homework/{name}": data for name, data in files.items()})


def test_a_hand_in_zipped_from_the_bundles_homework_folder_is_not_flagged(tmp_path):
    ingested = ingest(_homework_zip(tmp_path / "alice.zip"), tmp_path / "alice", assignment=BERT)
    assert (ingested.root / "conftest.py").is_file()
    assert scan_folder(ingested.root) == ([], 0)
    assert not any(name.startswith((".grade", ".pytest_cache")) for name in ingested.files)
    # Positive control: a conftest.py of the student's own making is scanned as any code.
    changed = _homework_zip(tmp_path / "bob.zip", conftest=b"from graders.sandbox import worker\n")
    flags, _ = scan_folder(ingest(changed, tmp_path / "bob", assignment=BERT).root)
    assert [(flag.kind, flag.file) for flag in flags] == [("grader-import", "conftest.py")]


# ------------------------------------------------ grade report on an edited or damaged results.json

def _results_file(tmp_path, edit=None):
    results = report_samples.buggy()
    if edit:
        edit(results)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    return path


def _set_check(results, score):
    results["parts"][0]["checks"][0]["score"] = score


EDITS = {
    "total_999": (lambda r: r.update(score=999), "its score is 999 where its counted parts add up to"),
    "check_over_its_points": (lambda r: _set_check(r, 50), "has 50 of its"),
    "part_over_its_checks": (lambda r: r["parts"][1].update(score=7.5), "'s score is 7.5 where its checks add up to"),
    "score_a_string": (lambda r: _set_check(r, "abc"), "at $.parts[0].checks[0].score: 'abc' is not of type 'number'"),
    "parts_a_string": (lambda r: r.update(parts="x"), "at $.parts: 'x' is not of type 'array'"),
    "not_results": (lambda r: r.pop("schema_version"), "is not a grade's results.json"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_grade_report_refuses_an_edited_or_damaged_results_json_in_one_line(case, tmp_path, capsys):
    edit, said = EDITS[case]
    status, _, err = _grade(capsys, "report", _results_file(tmp_path, edit), "--out", tmp_path / "reports")
    assert status == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "reports").exists()


def test_grade_report_renders_an_untouched_results_json_and_takes_its_folder(tmp_path, capsys):
    path = _results_file(tmp_path)
    assert _grade(capsys, "report", path.parent)[0] == 0
    assert (tmp_path / "report.html").is_file()
    assert _grade(capsys, "report", tmp_path / "nope.json")[2].strip() == f"grade report: no such file: {tmp_path / 'nope.json'}"


# ------------------------------------------------ --out

def test_an_out_that_is_a_file_or_inside_one_is_one_line_with_the_fix(tmp_path, capsys):
    source = UNREADABLE["empty_zip"][0](tmp_path / "alice")
    made = tmp_path / "notes.txt"
    made.write_text("mine")
    for out, said in ((made, f"{made} is a file, not a folder"), (made / "sub", f"{made} is a file, so")):
        status, _, err = _grade(capsys, source, "--out", out)
        assert status == 2 and err.startswith(f"grade: {said}") and "Traceback" not in err, err
        status, _, err = _grade(capsys, "report", _results_file(tmp_path), "--out", out)
        assert status == 2 and err.startswith(f"grade report: {said}"), err
    assert made.read_text() == "mine"


def test_an_out_inside_the_submission_or_holding_it_or_a_batch_is_refused(tmp_path, capsys):
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "attention.py").write_text("x = 1\n")
    (tmp_path / "batch" / "submissions").mkdir(parents=True)
    for out, said in ((folder / "results", "lies inside the submission"), (tmp_path, "holds the submission"),
                      (tmp_path / "batch", "is a batch's output folder")):
        status, _, err = _grade(capsys, folder, "--out", out, "--assignment", "bert", "--parts", "attention")
        assert status == 2 and said in err, err
    assert not (folder / "results").exists()


def test_a_second_submission_into_an_out_holding_anothers_grade_is_refused_without_force(tmp_path, capsys):
    out = tmp_path / "out"
    alice = UNREADABLE["empty_zip"][0](tmp_path / "alice")
    bob = UNREADABLE["empty_zip"][0](tmp_path / "bob")
    assert _grade(capsys, alice, "--out", out)[0] == 0
    first = (out / "results.json").read_text()
    status, _, err = _grade(capsys, bob, "--out", out)
    assert status == 2 and "holds the grade of alice.zip" in err and "not of bob.zip: give --force" in err
    assert (out / "results.json").read_text() == first
    (out / "notes.txt").write_text("a stray file")
    status, _, err = _grade(capsys, alice, "--out", out)
    assert status == 2 and "holds files that are no grade's (notes.txt)" in err
    status, _, err = _grade(capsys, bob, "--out", out, "--force")
    assert status == 0 and "replaced the grade of alice.zip" in err
    assert json.loads((out / "results.json").read_text())["submission"]["name"] == "bob.zip"
    assert not (out / "notes.txt").exists()  # the folder is this grade's alone
    assert _grade(capsys, bob, "--out", out)[2].count("replaced") == 0  # a regrade of the same input: no word
    _write(tmp_path / "bob.zip", b"PK\x03\x04 bob's second try")  # bob's new version, under the same name
    status, _, err = _grade(capsys, bob, "--out", out)
    assert status == 0 and "replaced the earlier grade of bob.zip" in err and "another version" in err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# ------------------------------------------------ a batch's written answers and its export

def _batch_results(parts, answers=("pending_manual", "failed")):
    """A bert batch's result of `parts`, the written answers (when "answers" is among them) in the
    given states: pending (written) or failed (blank)."""
    checks = {part.id: [] for part in BERT.rubric.parts if part.id in parts}
    for part_id in checks:
        checks[part_id] = [{"id": f"{part_id}.one", "title": "one", "status": "passed", "score": 2.0, "max_score": 2.0,
                            "visibility": "public"}]
    if "answers" in checks:
        checks["answers"] = [{"id": f"answers.q{i}", "title": f"q{i}", "status": status, "score": 0.0, "max_score": 5.0,
                              "visibility": "public", "graded_by_hand": True,
                              "details": {"answer": "an answer"} if status == "pending_manual" else {}}
                             for i, status in enumerate(answers)]
    results_parts = [{"id": pid, "title": pid, "score": sum(c["score"] for c in cs),
                      "max_score": sum(c["max_score"] for c in cs), "provisional": False, "note": None, "checks": cs}
                     for pid, cs in checks.items()]
    results = report_samples.result(results_parts)
    results["assignment"] = {"name": "bert", "title": BERT.title}
    return results


def test_grade_answers_of_a_batch_that_graded_other_parts_says_so(tmp_path, capsys):
    for student in ("1", "2"):
        store.publish(tmp_path, student, _batch_results(["attention", "mha"]), {"key": "k"})
    status, _, err = _grade(capsys, "answers", tmp_path)
    assert status == 2 and "graded only attention, mha, not the written answers' part answers" in err, err
    assert not (tmp_path / "answers.csv").exists()


def test_the_counts_of_written_answers_agree_in_answers_merge_and_the_gradebook(tmp_path, capsys):
    from graders.batch.gradebook import rebuild

    for student in ("1", "2"):
        store.publish(tmp_path, student, _batch_results(["attention", "answers"]), {"key": "k"})
    rebuild(tmp_path, BERT)

    def pending_in_the_gradebook():
        return sum(int(row["pending_manual"]) for row in csv.DictReader((tmp_path / "gradebook.csv").open()))

    status, out, _ = _grade(capsys, "answers", tmp_path)
    assert status == 0 and "4 written answers from 2 students: 2 to grade, 2 left blank" in out, out
    assert pending_in_the_gradebook() == 2
    rows = list(csv.DictReader((tmp_path / "answers.csv").open()))
    for row in rows:
        row["score"] = "4" if row["status"] == "pending" else ""
    with (tmp_path / "answers.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    status, out, _ = _grade(capsys, "merge", tmp_path / "answers.csv", "--out", tmp_path)
    assert "2 row(s) without a score passed over: 2 left blank, which keep 0 points" in out, out
    assert pending_in_the_gradebook() == 0
    status, out, _ = _grade(capsys, "answers", tmp_path)
    assert "2 written answers from 2 students: 0 to grade, 2 left blank" in out, out


def test_an_export_of_a_batch_that_graded_some_parts_warns_that_its_totals_are_short(tmp_path, capsys):
    store.publish(tmp_path, "12", _batch_results(["attention", "mha"]), {"key": "k"})
    status, _, err = _grade(capsys, "export", tmp_path, "--lms", "canvas", "--canvas-id", "7")
    assert status == 0
    assert "these totals are out of 16, not the assignment's 67: the batch graded only some parts" in err, err
    whole = _batch_results([part.id for part in BERT.rubric.parts])
    store.publish(tmp_path, "12", whole, {"key": "k2"})
    assert "not the assignment's" not in _grade(capsys, "export", tmp_path, "--lms", "canvas", "--canvas-id", "7")[2]


@pytest.mark.parametrize("flag", ["--csv", "--html"])
def test_grade_answers_into_a_folder_is_one_line_with_the_fix(flag, tmp_path, capsys):
    store.publish(tmp_path, "1", _batch_results(["answers"]), {"key": "k"})
    status, _, err = _grade(capsys, "answers", tmp_path, flag, tmp_path)
    assert status == 2 and err.strip() == f"grade answers: {tmp_path} is a folder: give a file's name"


# ------------------------------------------------ grade batch without --assignment

def test_a_batch_is_of_the_homework_its_submissions_are(tmp_path, capsys):
    from graders.batch.discover import DiscoveryError, detect_assignment

    submissions = tmp_path / "submissions"
    submissions.mkdir()
    _zip(submissions / "alice.zip", {f"alice/hw/{name}": data for name, data in _reference_files().items()})
    (submissions / "bob.zip").write_bytes(b"PK\x03\x04 damaged")
    name, said = detect_assignment(submissions)
    assert name == "bert" and said.startswith("grading the submissions as bert (1 of 2 submissions; the other shows")
    carol = submissions / "carol"
    carol.mkdir()
    (carol / "causal_lm.py").write_text("")
    with pytest.raises(DiscoveryError, match=r"hand-ins of 2 assignments \(bert: 1 \(alice\); causal_lm: 1 \(carol\)\)"):
        detect_assignment(submissions)
    status, _, err = _grade(capsys, "batch", submissions, "--out", tmp_path / "out")
    assert status == 2 and "choose one with --assignment NAME" in err and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_grade_batch_without_assignment_grades_the_homework_the_submissions_are(tmp_path, capsys):
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    _zip(submissions / "alice.zip", {f"alice/hw/{name}": data for name, data in _reference_files().items()})
    status, _, err = _grade(capsys, "batch", submissions, "--out", tmp_path / "out", "--parts", "attention",
                            "--no-progress")
    assert status == 0 and "grading the submissions as bert (all 1 submissions)" in err, err
    [row] = csv.DictReader((tmp_path / "out" / "gradebook.csv").open())
    assert (row["status"], row["total"], row["max"]) == ("graded", "8", "8")


# ------------------------------------------------ a module saved in another encoding

@pytest.mark.parametrize("encoding, said", [("utf-16", "is saved as UTF-16 (it starts with a UTF-16 byte-order mark)"),
                                            ("utf-16-le", "holds null bytes: it is saved as UTF-16"),
                                            ("cp1252", "is not valid UTF-8 (byte 0xe9 on line 1)")])
def test_a_module_in_another_encoding_is_named_with_the_fix(encoding, said, tmp_path):
    from graders.grading import _ModuleGate

    folder = tmp_path / "alice"
    shutil.copytree(REFERENCE_DIR, folder)
    text = (folder / "attention.py").read_text()
    (folder / "attention.py").write_text("# é\n" + text, encoding=encoding)
    ingested = ingest(folder, tmp_path / "copy", assignment=BERT)
    assert said in ingested.unreadable["attention.py"] and "save it as UTF-8" in ingested.unreadable["attention.py"]

    class NoWorker:
        def import_module(self, module):
            raise AssertionError("the reason is known before any import")

    message, _ = _ModuleGate(NoWorker(), ingested).problem("attention")
    assert said in message
    # Positive control: a coding line naming the file's encoding is Python's own way, and reads.
    (folder / "attention.py").write_text("# -*- coding: cp1252 -*-\n# é\n" + text, encoding="cp1252")
    assert ingest(folder, tmp_path / "again", assignment=BERT).unreadable == {}


# ------------------------------------------------ the words of the reports

def _with_hidden(count):
    results = report_samples.full_marks()
    for check in results["parts"][0]["checks"][:count]:
        check["visibility"] = "hidden"
    return results


def test_gradescope_says_provisional_once_with_spaces_and_counts_in_the_singular():
    from graders.reports import to_gradescope

    results = report_samples.buggy()
    for part in results["parts"]:
        if part.get("provisional"):
            part["note"] = "Provisional: trained in smoke mode on the small set (docs/finetune.md)."
    provisional = [test["output"] for test in to_gradescope(results)["tests"] if "_Provisional:_" in test["output"]]
    assert provisional and all("Provisional\\:" not in text and "md\\)\\. Earned " in text for text in provisional)
    assert "1 more check is graded now and shown after the due date." in to_gradescope(_with_hidden(1))["output"]
    assert "2 more checks are graded now" in to_gradescope(_with_hidden(2))["output"]


def test_no_word_of_forging_where_no_point_rests_on_the_worker():
    from graders.reports.html import render_feedback_html, render_html

    results = report_samples.full_marks()
    measured = results["parts"][0]["checks"][0]
    measured["worker_measured"] = True
    for page in (render_html, render_feedback_html):
        assert "forge" in page(results)  # positive control: points rest on it
    measured.update(score=0, max_score=0)
    results["parts"][0]["max_score"] = results["parts"][0]["score"] = sum(c["score"] for c in results["parts"][0]["checks"])
    results.update(report_samples.totals(results["parts"]))
    for page in (render_html, render_feedback_html):
        assert "forge" not in page(results) and "Worker-measured" not in page(results)


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_answers_saved_with_a_byte_order_mark_or_as_utf16_are_read(encoding, tmp_path):
    from graders.answers_file import read_answers_file

    path = tmp_path / "answers.toml"
    path.write_text('[written]\nlayer_norm = "It keeps activations in range."\n', encoding=encoding)
    assert read_answers_file(path) == {"written": {"layer_norm": "It keeps activations in range."}}


# ------------------------------------------------ where values differ

def test_values_that_differ_everywhere_say_where_they_differ_most():
    import torch

    from graders.checks.localise import describe_difference

    expected = torch.tensor([[[[1.0, 0.0], [0.6913, 0.3087]]]])
    got = torch.tensor([[[[0.0, 1.0], [0.5, 0.5]]]])
    how = describe_difference(got, expected, axes=("batch", "head", "query", "key"))
    assert how == ("4 of 4 values differ, spread over every index; the largest difference is at "
                   "(batch 0, head 0, query 0, key 0): yours 0, expected 1")


# ------------------------------------------------ the rest of the class: options and files that do not fit

def test_a_hand_in_of_another_homework_than_the_one_given_says_which(tmp_path, capsys):
    source = _zip(tmp_path / "alice.zip", {f"alice/{name}": data for name, data in _reference_files().items()})
    status, _, _ = _grade(capsys, source, "--out", tmp_path / "out", "--assignment", "gpt")
    reason = json.loads((tmp_path / "out" / "results.json").read_text())["reason"]
    assert status == 0 and reason.startswith("found none of the module files (gpt.py)")
    assert reason.endswith("it holds the files of bert (BERT from scratch and frozen-BERT sentiment): --assignment bert "
                           "grades it as that homework")


def test_slurm_options_in_a_local_batch_are_refused_not_passed_over(tmp_path, capsys):
    status, _, err = _grade(capsys, "batch", tmp_path, "--out", tmp_path / "out", "--assignment", "bert",
                            "--slurm-partition", "gpu", "--no-wait")
    assert status == 2 and err.strip() == ("grade batch: --slurm-partition, --no-wait are options of --backend slurm: "
                                           "add --backend slurm, or leave it out")


def test_canvas_options_of_a_moodle_export_are_refused_not_passed_over(tmp_path, capsys):
    store.publish(tmp_path, "12", _batch_results(["attention"]), {"key": "k"})
    status, _, err = _grade(capsys, "export", tmp_path, "--lms", "moodle", "--canvas-id", "7")
    assert status == 2 and err.strip() == ("grade export: --canvas-id is for --lms canvas; moodle's worksheet has no "
                                           "such column: leave it out")
    assert not (tmp_path / "moodle-worksheet.csv").exists()


def test_the_kit_into_a_folder_or_through_a_file_is_one_line_with_the_fix(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    for out, said in ((tmp_path, f"{tmp_path} is a folder: give a file's name"),
                      (tmp_path / "notes.txt" / "kit.zip", f"{tmp_path / 'notes.txt'} is a file, so")):
        status, _, err = _grade(capsys, "gradescope-kit", "--assignment", "bert", "--out", out)
        assert status == 2 and err.startswith(f"grade gradescope-kit: {said}"), err


@pytest.mark.parametrize("saved", ["utf-16", "semicolons", "folder", "latin-1"])
def test_grade_merge_reads_what_a_spreadsheet_saves_or_says_how_to_save_it(saved, tmp_path, capsys):
    store.publish(tmp_path, "1", _batch_results(["answers"]), {"key": "k"})
    manual = tmp_path / "scores.csv"
    if saved == "utf-16":  # Excel's "Unicode Text": UTF-16, tab-separated
        manual.write_text("student_id\tcheck_id\tscore\n1\tanswers.q0\t3\n", encoding="utf-16")
    elif saved == "semicolons":  # a spreadsheet whose decimal mark is a comma
        manual.write_text("student_id;check_id;score\n1;answers.q0;3,5\n")
    elif saved == "latin-1":
        manual.write_bytes("student_id,check_id,score,comment\n1,answers.q0,3,très bien\n".encode("latin-1"))
    else:
        manual.mkdir()
    status, out, err = _grade(capsys, "merge", manual, "--out", tmp_path)
    if saved in ("utf-16", "semicolons"):
        assert status == 0 and "merged 1 score(s)" in out, err
        results = json.loads((tmp_path / "submissions" / "1" / "results.json").read_text())
        assert results["parts"][0]["checks"][0]["score"] == (3 if saved == "utf-16" else 3.5)
    else:
        said = "is not UTF-8 (byte 0xe8" if saved == "latin-1" else "is a folder: give the CSV file of scores"
        assert status == 2 and said in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_grade_check_of_a_path_that_is_no_folder_says_so(kind, tmp_path, capsys):
    path = tmp_path / "homework"
    if kind == "file":
        path.write_text("")
    status, _, err = _grade(capsys, "check", "--path", path)
    assert status == 2 and f"{path} is {'a file' if kind == 'file' else 'no folder'}: give --path the homework" in err


# ------------------------------------------------ the docs

def test_every_line_of_the_bad_input_table_is_held_by_a_test_here_and_every_test_here_has_its_line():
    docs = (REPO / "docs" / "submissions.md").read_text()
    table = docs[docs.index("## Bad input"):]
    named = set(re.findall(r"`(test_\w+)`", table))
    here = {name for name in globals() if name.startswith("test_")}
    assert named - here == set() and here - named == {
        "test_every_line_of_the_bad_input_table_is_held_by_a_test_here_and_every_test_here_has_its_line"}
    assert (Path(__file__).parent / "test_same_figures.py").is_file() and "tests/test_same_figures.py" in table
