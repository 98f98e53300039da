"""Text from a submission or an LMS name reaches people through files and terminals: the terminal
summary, report.html and feedback.html, gradebook.csv, summary.html, the LMS exports, the written
answers' CSV and page. None of them may carry a control character that acts when the file is
printed (`cat gradebook.csv`: an OSC 52 clipboard write, a BEL, a C1 CSI) or reorders what is
shown (a bidi override), nor a cell a spreadsheet runs as a formula.

Every string of each sample results.json is poisoned; each output is checked for the poison, and
each layer has its positive control: without it, the poison comes through."""

import copy
import csv
import io

import pytest
from rich.console import Console

from graders.batch import gradebook, store
from graders.batch.answers import answers_csv, answers_html, written_answers
from graders.batch.lms import canvas_import, moodle_worksheet
from graders.reports import html, render_html
from graders.reports.terminal import print_summary
from tests.report_samples import SAMPLES

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # sets the clipboard of whoever prints it
CSI = "\x9b2J"  # C1 control sequence introducer: clears the screen on some terminals
BIDI = "\u202e"  # right-to-left override: shows text reversed
POISON = f"{OSC52}{CSI}{BIDI}"
FORBIDDEN = ("\x1b", "\x07", "\x9b", "\u202e")


def poisoned(value):
    """`value` with the poison appended to every string (and to every dict key a report shows)."""
    if isinstance(value, str):
        return value + POISON
    if isinstance(value, list):
        return [poisoned(item) for item in value]
    if isinstance(value, dict):
        return {key: poisoned(item) for key, item in value.items()}
    return value


def assert_clean(text, where):
    found = [repr(character) for character in FORBIDDEN if character in text]
    assert not found, f"{where} carries {', '.join(found)}"


def _terminal(results):
    console = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=False)
    print_summary(results, console, verbose=True)
    return console.file.getvalue()


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_reports_written_for_a_person_carry_no_control_characters(sample):
    results = poisoned(SAMPLES[sample]())
    assert_clean(_terminal(results), f"{sample}: the terminal summary")
    assert_clean(render_html(results), f"{sample}: report.html")


def test_without_the_template_s_filter_the_poison_reaches_report_html(monkeypatch):
    """Positive control: autoescaping alone keeps markup out, not control characters."""
    monkeypatch.setattr(html._environment, "finalize", lambda value: value)
    with pytest.raises(AssertionError, match="carries"):
        assert_clean(render_html(poisoned(SAMPLES["buggy"]())), "report.html")


def _batch(out, name):
    results = copy.deepcopy(SAMPLES["buggy"]())
    results["batch"] = {"name": name, "late": False}
    results["reason"] = f"=HYPERLINK(\"http://x\"){POISON}"
    store.publish(out, "4567", results, {"key": "a"})
    return out


@pytest.mark.parametrize("name", [f"Jane{POISON}", f"=cmd|' /C calc'!A0{POISON}", f"\t+1+cmd{POISON}",
                                  f" @SUM(1){POISON}"])
def test_batch_files_defuse_names_and_reasons(tmp_path, name):
    out = _batch(tmp_path, name)
    gradebook.rebuild(out)
    files = {"gradebook.csv": (out / gradebook.GRADEBOOK).read_text(),
             "summary.html": (out / gradebook.SUMMARY).read_text(),
             "canvas-import.csv": canvas_import(out).text, "moodle-worksheet.csv": moodle_worksheet(out).text}
    answers = written_answers(out, include_graded=True)
    files["answers.csv"], files["answers.html"] = answers_csv(answers), answers_html(answers)
    for where, text in files.items():
        assert_clean(text, where)
    for where in ("gradebook.csv", "canvas-import.csv", "moodle-worksheet.csv"):
        for row in csv.reader(files[where].splitlines()):
            for cell in row:
                assert cell.lstrip()[:1] not in ("=", "+", "-", "@") or cell.lstrip().lstrip("-+").replace(".", "").isdigit(), \
                    (where, cell)


def test_without_the_cell_filter_a_name_s_escape_sequence_reaches_gradebook_csv(tmp_path, monkeypatch):
    """Positive control: the CSV writer quotes, it does not neutralise."""
    monkeypatch.setattr(gradebook, "visible_text", lambda text: text)
    out = _batch(tmp_path, f"Mallory{OSC52}")
    gradebook.rebuild(out)
    assert OSC52 in (out / gradebook.GRADEBOOK).read_text()


def test_without_the_terminal_s_filter_the_poison_reaches_the_terminal(monkeypatch):
    """Positive control: rich writes a Text's characters as they are."""
    from graders.reports import terminal

    monkeypatch.setattr(terminal, "one_line", lambda text, limit: str(text))
    with pytest.raises(AssertionError, match="carries"):
        assert_clean(_terminal(poisoned(SAMPLES["buggy"]())), "the terminal summary")
