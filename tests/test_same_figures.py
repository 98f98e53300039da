"""One computed truth: every figure the outputs of a grade show comes from the same totals
(graders/reports/figures.py). For every sample result (tests/report_samples.py, with written
answers merged by hand, a provisional part counted and not, hidden checks) and for a real grade
of the built-in example (slow), the total and each part's points read the same in the terminal
summary, report.html, feedback.html (after the due date; before it, the visible checks' own),
the gradebook and Canvas's import; gradescope.json's score is the same total without the
written answers, which Gradescope grades as a question of their own.

The figures are read back from what each output shows, not from the function that computed
them: a renderer that reads a number of its own from results.json fails the test."""

import copy
import csv
import io
import json
import re

import pytest
from rich.console import Console

import report_samples
from graders.batch import store
from graders.batch.gradebook import gradebook_rows
from graders.batch.lms import canvas_import
from graders.batch.merge import apply_one
from graders.reports import print_summary, render_html, to_gradescope
from graders.reports.html import render_feedback_html
from graders.reports.summary import format_points, visible_only
from graders.scoring import totals


def _with_provisional(results, counted):
    results = copy.deepcopy(results)
    results["parts"][-1].update(provisional=True, note="Provisional: trained in smoke mode")
    results.update(totals(results["parts"], counted))
    return results


def _with_merged_answer(results):
    results = copy.deepcopy(results)
    answer = next(c for p in results["parts"] for c in p["checks"] if c.get("graded_by_hand"))
    apply_one(results, answer["id"], 3.5, "partly")
    return results


def _with_hidden(results):
    results = copy.deepcopy(results)
    for part in results["parts"]:
        part["checks"][-1]["visibility"] = "hidden"
    return results


VARIANTS = {
    **{name: make for name, make in report_samples.SAMPLES.items()},
    "merged_answer": lambda: _with_merged_answer(report_samples.notebook_handin()),
    "provisional_apart": lambda: _with_provisional(report_samples.buggy(), counted=False),
    "provisional_counted": lambda: _with_provisional(report_samples.buggy(), counted=True),
    "hidden_checks": lambda: _with_hidden(report_samples.full_marks()),
}


def _terminal(results):
    buffer = io.StringIO()
    print_summary(results, Console(file=buffer, width=250))
    text = buffer.getvalue()
    total = re.search(r"^Score(?: on public automatic checks)?: ([\d.]+)(?: / ([\d.]+))?", text, re.MULTILINE)
    parts = {}
    for part in results["parts"]:
        shown = re.search(rf"^\s*{re.escape(part['title'])} — (?:([\d.]+) / ([\d.]+)|practice, (0) points)", text,
                          re.MULTILINE)
        if shown:  # a part of written answers only is listed apart, with each answer's points
            parts[part["id"]] = (shown[1], shown[2]) if shown[1] else ("0", "0")
    return (total[1], total[2] or "0"), parts


def _html(page, results):
    total = (re.search(r'class="total-score">([^<]+)<', page)[1], re.search(r'class="total-max">/ ([^ ]+) points', page)[1])
    points = re.findall(r'class="part-points">([^<]+) points<', page)
    return total, {part["id"]: tuple(shown.split(" / ")) for part, shown in zip(results["parts"], points)}


def _gradebook(results):
    header, [row] = gradebook_rows([{"student_id": "s", "results": results, "marker": {}, "folder": None}])
    cells = dict(zip(header, row))
    return (cells["total"], cells["max"]), {part["id"]: cells[part["id"]] for part in results["parts"]}


def _canvas(results, tmp_path):
    store.publish(tmp_path, "123", results, {"key": "k"})
    rows = list(csv.reader(canvas_import(tmp_path).text.splitlines()))
    return rows[2][5], rows[1][5]


def _by_hand(results):
    """The written answers' points in the totals: what Gradescope leaves to a question of its own."""
    counted = (results.get("provisional") or {}).get("counted")
    return sum(c["score"] for p in results["parts"] if counted or not p.get("provisional")
               for c in p["checks"] if c.get("graded_by_hand") or c.get("status") == "pending_manual")


def assert_same_figures(results, tmp_path):
    terminal_total, terminal_parts = _terminal(results)
    html_total, html_parts = _html(render_html(results), results)
    late_total, late_parts = _html(render_feedback_html(results, after_due_date=True), results)
    assert terminal_total == html_total == late_total, (terminal_total, html_total, late_total)
    for part_id, shown in terminal_parts.items():
        assert html_parts[part_id] == late_parts[part_id] == shown, part_id
    # Before the due date, the student's figures are those of the checks they may see, and Gradescope's too.
    visible = visible_only(results)
    early_total, early_parts = _html(render_feedback_html(results), visible)
    assert early_total == _terminal(visible)[0], early_total
    if results.get("mode") == "self-check":
        return
    if results.get("status") == "graded":
        book_total, book_parts = _gradebook(results)
        assert book_total == terminal_total, (book_total, terminal_total)
        assert {pid: book_parts[pid] for pid in terminal_parts} == {pid: s[0] for pid, s in terminal_parts.items()}
        assert _canvas(results, tmp_path) == terminal_total
    export = to_gradescope(results)
    if results.get("status") != "graded":
        assert export["score"] == 0
        return
    # Gradescope totals its tests itself where some are hidden (the score would give them away):
    # after the due date they add up to the same total, as they do before it where nothing is hidden.
    without_answers = format_points(float(terminal_total[0]) - _by_hand(results))
    assert format_points(sum(test["score"] for test in export["tests"])) == without_answers
    if "score" in export:
        assert format_points(export["score"]) == without_answers, (export["score"], without_answers)
    overview = {m[1]: (m[2], m[3]) for m in re.finditer(r"^- (.+): ([\d.]+) / ([\d.]+)", export["output"], re.MULTILINE)}
    for part in visible["parts"]:
        automatic = [c for c in part["checks"] if not (c.get("graded_by_hand") or c.get("status") == "pending_manual")]
        title = re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", part["title"])
        if automatic and not part.get("provisional"):
            hand = sum(c["score"] for c in part["checks"] if c not in automatic)
            shown = _html(render_feedback_html(results), visible)[1][part["id"]]
            assert overview[title][0] == format_points(float(shown[0]) - hand), (part["id"], overview[title], shown)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_output_shows_the_same_figures(name, tmp_path):
    results = VARIANTS[name]()
    assert_same_figures(results, tmp_path)


def test_a_results_json_edited_by_hand_still_shows_one_figure_everywhere(tmp_path):
    """A total of 999 in an edited file: every output shows what its checks add up to (and
    `grade report` refuses the file: tests/test_edges.py)."""
    results = copy.deepcopy(report_samples.buggy())
    honest = copy.deepcopy(results)
    results["score"] = 999
    results["parts"][0]["score"] = 50
    assert _terminal(results)[0] == _terminal(honest)[0] != ("999", format_points(results["max_score"]))
    assert_same_figures(results, tmp_path)


@pytest.mark.slow
def test_a_real_grade_shows_the_same_figures_everywhere(tmp_path):
    from graders.grading import grade
    from tests.test_cli import EXAMPLE

    results = json.loads(json.dumps(grade(EXAMPLE)))
    assert results["provisional"] and any(c.get("visibility") == "hidden" for p in results["parts"] for c in p["checks"])
    assert_same_figures(results, tmp_path)
    assert_same_figures(_with_merged_answer(results), tmp_path / "merged")
