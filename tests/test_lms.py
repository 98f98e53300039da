"""The LMS round trip: Canvas's and Moodle's downloads in (per-file uploads grouped per student,
Moodle's folders, Canvas's LATE kept), and the totals out in Canvas's gradebook import and
Moodle's grading worksheet, with the columns their documentation names."""

import csv
import re
import shutil
import zipfile

import pytest

from graders.batch import store
from graders.batch.discover import DiscoveryError, discover
from graders.batch.gradebook import gradebook_rows, load_rows
from graders.batch.lms import CANVAS_IDENTITY, MOODLE_COLUMNS, canvas_import, moodle_worksheet
from graders.cli import main
from tests.test_batch_units import fake_results, written_results


def _zip(path, files):
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


# ---------------------------------------------------------------------------- downloads in


def test_canvas_per_file_uploads_are_one_submission_with_the_latest_of_each_file(tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "doejane_12345_700_attention.py").write_text("first")
    (downloads / "doejane_12345_700_encoder.py").write_text("encoder")
    (downloads / "doejane_LATE_12345_901_attention-1.py").write_text("re-uploaded")  # Canvas renamed the second upload
    _zip(downloads / "roejohn_678_702_hw.zip", {"attention.py": "john"})
    submissions = discover(downloads, names="canvas", staging=tmp_path / "staging")
    jane, john = submissions
    assert (jane.student_id, jane.name, jane.late) == ("12345", "doejane", True)
    assert sorted(path.name for path in jane.path.iterdir()) == ["attention.py", "encoder.py"]
    assert (jane.path / "attention.py").read_text() == "re-uploaded"  # the highest Canvas submission id wins
    assert (john.student_id, john.late, john.path.name) == ("678", False, "roejohn_678_702_hw.zip")
    again = discover(downloads, names="canvas", staging=tmp_path / "staging")
    assert [s.sha256 for s in again] == [s.sha256 for s in submissions]  # gathered again, the same input


def test_without_a_staging_folder_per_file_uploads_are_still_duplicate_ids(tmp_path):
    (tmp_path / "doejane_12345_700_attention.py").write_text("a")
    (tmp_path / "doejane_12345_700_encoder.py").write_text("e")
    with pytest.raises(DiscoveryError, match="same student id"):
        discover(tmp_path, names="canvas")


def test_moodle_download_in_folders_grades_the_zip_inside(tmp_path):
    folder = tmp_path / "Jane Doe_4567_assignsubmission_file_"
    folder.mkdir()
    _zip(folder / "hw4.zip", {"attention.py": "x"})
    modules = tmp_path / "John Roe_89_assignsubmission_file_"
    modules.mkdir()
    (modules / "attention.py").write_text("y")
    (modules / "encoder.py").write_text("z")
    found = {submission.student_id: submission for submission in discover(tmp_path, names="moodle")}
    jane, john = found["4567"], found["89"]
    assert (jane.student_id, jane.name, jane.path) == ("4567", "Jane Doe", folder / "hw4.zip")
    assert (john.student_id, john.path) == ("89", modules)  # module files: the folder is the submission


# A name (the student's profile) and an uploaded file's name (the student's too) may hold what looks
# like the LMS's own `_<id>_...`: Mallory (4568) against Victor (4567).
FORGED_MOODLE = {
    "name": "Mallory_4567_assignsubmission_file_x_4568_assignsubmission_file_",  # a folder: the end is Moodle's
    "file_name": "Mallory_4568_assignsubmission_file_x_4567_assignsubmission_file_hw.zip",
    "name_flat": "Mallory_4567_assignsubmission_file_x_4568_assignsubmission_file_hw.zip",
}


def test_moodle_a_folder_is_its_id_before_moodle_s_own_end_whatever_the_name_holds(tmp_path):
    (tmp_path / FORGED_MOODLE["name"]).mkdir()
    (tmp_path / FORGED_MOODLE["name"] / "attention.py").write_text("mallory")
    (tmp_path / "Victor_4567_assignsubmission_file_").mkdir()
    found = {s.student_id: s for s in discover(tmp_path, names="moodle")}
    assert set(found) == {"4567", "4568"}
    assert found["4568"].name == "Mallory_4567_assignsubmission_file_x"
    assert found["4568"].path.name == FORGED_MOODLE["name"]


@pytest.mark.parametrize("entry", [FORGED_MOODLE["file_name"], FORGED_MOODLE["name_flat"]])
def test_moodle_a_file_name_that_reads_as_two_students_is_rejected_alone(tmp_path, entry):
    _zip(tmp_path / entry, {"attention.py": "mallory"})
    _zip(tmp_path / "Victor_4567_assignsubmission_file_hw.zip", {"attention.py": "victor"})
    found = {s.student_id: s for s in discover(tmp_path, names="moodle")}
    victor, mallory = found["4567"], found[entry.removesuffix(".zip")]  # graded as neither student
    assert (victor.path.name, victor.rejected) == ("Victor_4567_assignsubmission_file_hw.zip", "")
    assert mallory.path.name == entry and "graded as neither" in mallory.rejected
    assert "4567, 4568" in mallory.rejected or "4568, 4567" in mallory.rejected


@pytest.mark.slow
def test_a_batch_grades_everyone_but_the_entry_whose_name_reads_as_two_students(tmp_path):
    """One crafted name (Canvas: `eve_12345_99999_777_hw.zip` reads as 12345 and as 99999) costs
    one rejected row with its reason, not the batch: the others are graded."""
    from graders.batch.cli import cmd_batch
    from tests.course import REFERENCE_DIR

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    solution = {path.name: path.read_text() for path in REFERENCE_DIR.glob("*.py") if path.name != "__init__.py"}
    for name in ("bob_4567_700_hw.zip", "eve_12345_99999_777_hw.zip"):
        _zip(downloads / name, solution)
    out = tmp_path / "gradebook"
    assert cmd_batch([str(downloads), "--out", str(out), "--names", "canvas", "--parts", "attention", "--no-progress"],
                     "bert") == 0
    with open(out / "gradebook.csv", newline="") as table:
        rows = {row["student_id"]: row for row in csv.DictReader(table)}
    assert set(rows) == {"4567", "eve_12345_99999_777_hw"}
    assert rows["4567"]["status"] == "graded" and float(rows["4567"]["total"]) > 0
    eve = rows["eve_12345_99999_777_hw"]
    assert (eve["status"], eve["total"]) == ("rejected", "0") and "reads as the canvas ids 12345, 99999" in eve["reason"]


def _first_id_reading(monkeypatch):
    """The layer removed: the intake reads the first `_<id>_` of a name, as it did."""
    import re

    from graders.batch import discover as intake

    layouts = {"moodle": r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_(?P<file>.*)$",
               "canvas": r"^(?P<name>[^_]+)_(?P<late>LATE_)?(?P<id>\d+)_(?P<submission>\d+)_(?P<file>.*)$"}

    def first(entry_name, scheme, *, folder=False):
        match = re.match(layouts[scheme], entry_name) if scheme in layouts else None
        return intake.LmsName(match["name"], match["id"], match["file"]) if match else None

    monkeypatch.setattr(intake, "lms_name", first)


def test_moodle_positive_control_the_first_id_made_mallory_the_absent_victim(tmp_path, monkeypatch):
    (tmp_path / FORGED_MOODLE["name"]).mkdir()
    assert [s.student_id for s in discover(tmp_path, names="moodle")] == ["4568"]
    _first_id_reading(monkeypatch)
    assert [s.student_id for s in discover(tmp_path, names="moodle")] == ["4567"]


@pytest.mark.parametrize("entries", [
    ["mallory_4567_1_x_4568_2_attention.py"],  # Canvas keeps `_` of a name: the name holds Victor's id
    ["mallory_4568_2_x_4567_1_attention.py"],  # the uploaded file's name holds it
    ["mallory_LATE_4568_2_x_4567_1_attention.py"],
])
def test_canvas_a_name_that_reads_as_two_students_is_rejected_alone(tmp_path, entries):
    for entry in entries:
        (tmp_path / entry).write_text("mallory")
    (tmp_path / "victor_4567_700_attention.py").write_text("victor")
    found = {s.student_id: s for s in discover(tmp_path, names="canvas", staging=tmp_path.parent / "staging")}
    assert set(found) == {"4567", *entries}  # the entry keeps its plain id (its name: a .py is no zip)
    assert found["4567"].rejected == "" and (found["4567"].path / "attention.py").read_text() == "victor"
    [entry] = entries
    assert "reads as the canvas ids" in found[entry].rejected and found[entry].path == tmp_path / entry


def test_canvas_positive_control_the_first_id_made_mallory_the_victim(tmp_path, monkeypatch):
    _zip(tmp_path / "mallory_4567_1_x_4568_2_hw.zip", {"attention.py": "mallory"})
    _first_id_reading(monkeypatch)
    assert [s.student_id for s in discover(tmp_path, names="canvas")] == ["4567"]


def test_canvas_uploads_of_one_id_under_two_names_are_refused_not_merged(tmp_path):
    (tmp_path / "victor_4567_700_attention.py").write_text("victor")
    (tmp_path / "mallory_4567_701_attention.py").write_text("mallory")
    with pytest.raises(DiscoveryError, match="uploads of the student id 4567 under different names"):
        discover(tmp_path, names="canvas", staging=tmp_path.parent / "staging")


@pytest.mark.parametrize("entry, expected", [
    ("doe_jane_12345_67890_hw3.zip", ("12345", "doe_jane", False)),  # `_` in a Canvas name
    ("doejane_LATE_12345_67890_hw_3.zip", ("12345", "doejane", True)),
    ("doejane_12345_67890_attention_2.py", ("12345", "doejane", False)),
])
def test_canvas_names_read_anchored_to_the_layout(entry, expected):
    from graders.batch.discover import lms_name

    reading = lms_name(entry, "canvas")
    assert (reading.student_id, reading.name, reading.late) == expected


def test_lateness_is_a_gradebook_column(tmp_path):
    store.publish(tmp_path, "12345", fake_results(5.0) | {"batch": {"name": "doejane", "late": True}}, {"key": "a"})
    store.publish(tmp_path, "678", fake_results(6.0) | {"batch": {"name": "roejohn", "late": False}}, {"key": "b"})
    header, rows = gradebook_rows(load_rows(tmp_path))
    assert header[:3] == ["student_id", "name", "late"]
    assert [row[:3] for row in rows] == [["12345", "doejane", "late"], ["678", "roejohn", ""]]


# ---------------------------------------------------------------------------- totals out


@pytest.fixture
def batch(tmp_path):
    graded = fake_results(5.5) | {"batch": {"name": "doejane"}, "assignment": {"name": "bert", "title": "BERT HW"}}
    store.publish(tmp_path, "12345", graded, {"key": "a"})
    store.publish(tmp_path, "678", written_results() | {"batch": {"name": "=cmd|calc"}}, {"key": "b"})
    store.publish(tmp_path, "9", fake_results(0.0) | {"status": "rejected", "parts": []}, {"key": "c"})
    store.publish(tmp_path, "10", fake_results(0.0) | {"status": "error", "parts": [], "batch": {"outcome": "error"}},
                  {"key": "d"})
    return tmp_path


def test_canvas_import_has_canvas_identity_columns_an_assignment_column_and_points_possible(batch):
    export = canvas_import(batch)
    rows = list(csv.reader(export.text.splitlines()))
    assert rows[0] == [*CANVAS_IDENTITY, "BERT HW"]  # the columns of Canvas's own gradebook export
    assert rows[1][0].strip() == "Points Possible" and rows[1][5] == "16"
    by_id = {row[1]: row for row in rows[2:]}
    assert by_id["12345"] == ["doejane", "12345", "", "", "", "5.5"]
    assert by_id["678"][0] == "'=cmd|calc"  # no formula for a spreadsheet to run
    assert by_id["9"][5] == "0" and by_id["10"][5] == ""  # rejected: its grade; error: none yet
    assert export.not_graded == ["10"] and export.pending == ["678 (2)"]


def test_moodle_worksheet_has_the_worksheet_columns_and_participant_identifiers(batch):
    rows = list(csv.DictReader(moodle_worksheet(batch).text.splitlines()))
    assert tuple(rows[0]) == MOODLE_COLUMNS == ("Identifier", "Full name", "Email address", "Status", "Grade",
                                                "Maximum Grade", "Grade can be changed", "Last modified (submission)",
                                                "Last modified (grade)", "Feedback comments")
    jane = next(row for row in rows if row["Identifier"] == "Participant 12345")
    assert (jane["Full name"], jane["Grade"], jane["Grade can be changed"]) == ("doejane", "5.5", "Yes")


def test_the_export_command_writes_the_file_and_warns_of_what_is_missing(batch, capsys):
    assert main(["export", str(batch), "--lms", "canvas", "--title", "Transformers HW (123456)"]) == 0
    captured = capsys.readouterr()
    assert "canvas-import.csv (4 students)" in captured.out
    assert "no total for 1 submission(s)" in captured.err and "written answers still to grade" in captured.err
    assert (batch / "canvas-import.csv").read_text().splitlines()[0].endswith(",Transformers HW (123456)")
    assert main(["export", str(batch), "--lms", "moodle"]) == 0
    assert (batch / "moodle-worksheet.csv").is_file()
    assert main(["export", str(batch / "nope"), "--lms", "moodle"]) == 2


def test_canvas_heads_the_column_title_and_id_from_the_option_or_the_manifest(batch, tmp_path, monkeypatch):
    """Canvas's import matches a column by `Title (id)`; without the id it would create a new one."""
    assert list(csv.reader(canvas_import(batch, canvas_id="4711").text.splitlines()))[0][-1] == "BERT HW (4711)"
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "assignment.toml").write_text('[lms]\ncanvas_assignment_id = 90210\n')
    monkeypatch.setattr("graders.assignment.load", lambda name: type("Pack", (), {"folder": pack})())
    export = canvas_import(batch)
    assert export.canvas_id == "90210" and export.text.splitlines()[0].endswith(",BERT HW (90210)")


def test_the_export_warns_of_a_missing_canvas_id_and_of_ids_no_lms_gave(batch, capsys):
    store.publish(batch, "alice", fake_results(3.0) | {"batch": {"name": "Alice"}}, {"key": "e"})
    assert main(["export", str(batch), "--lms", "canvas"]) == 0
    err = capsys.readouterr().err
    assert "the column has no assignment id" in err
    assert "1 student id(s) are not Canvas user ids (not numbers), so canvas matches no student to them: alice" in err
    assert main(["export", str(batch), "--lms", "moodle"]) == 0
    assert "are not Moodle participant ids" in capsys.readouterr().err
    # Positive control: ids the LMS gave draw no such warning.
    shutil.rmtree(batch / store.SUBMISSIONS / "alice")
    assert main(["export", str(batch), "--lms", "canvas", "--canvas-id", "4711"]) == 0
    assert "warning: the column" not in (err := capsys.readouterr().err) and "not Canvas user ids" not in err


def test_moodle_status_and_grade_time_come_from_what_the_batch_knew(batch):
    store.publish(batch, "77", fake_results(4.0) | {"batch": {"name": "Late Student", "late": True}}, {"key": "f"})
    rows = {row["Identifier"]: row for row in csv.DictReader(moodle_worksheet(batch).text.splitlines())}
    assert rows["Participant 77"]["Status"] == "Submitted for grading - Late"
    assert rows["Participant 12345"]["Status"] == "Submitted for grading"
    assert re.fullmatch(r"\w+day, \d\d \w+ \d{4}, \d\d:\d\d [AP]M", rows["Participant 77"]["Last modified (grade)"])
    assert rows["Participant 10"]["Last modified (grade)"] == ""  # no grade yet: grading did not finish
