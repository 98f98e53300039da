"""Renderers of results.json: HTML report, Gradescope export, terminal summary, write_reports."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st
from markupsafe import escape
from rich.console import Console

import report_samples
from graders.reports import print_summary, render_html, to_gradescope, write_reports
from graders.reports.html import render_feedback_html, visible_text
from graders.scoring import totals
from graders.reports.gradescope import md_code
from graders.reports.summary import format_points
from graders.reports.svg import score_bar

SAMPLE_NAMES = sorted(report_samples.SAMPLES)
RESULTS_SCHEMA = json.loads(report_samples.RESULTS_SCHEMA.read_text())
GRADESCOPE_SCHEMA = json.loads(report_samples.GRADESCOPE_SCHEMA.read_text())
SELF_CHECK_WORDING = "public checks passed — hidden checks run after the deadline"


@pytest.fixture(scope="module", params=SAMPLE_NAMES)
def sample(request):
    results = report_samples.SAMPLES[request.param]()
    return request.param, results, render_html(results)


class TagCollector(HTMLParser):
    """Every start tag with its attributes, and the text of <style> elements."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def parse(html: str) -> TagCollector:
    collector = TagCollector()
    collector.feed(html)
    return collector


# --------------------------------------------------------------------------- samples


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_samples_follow_the_results_schema(name):
    jsonschema.validate(report_samples.SAMPLES[name](), RESULTS_SCHEMA)


# --------------------------------------------------------------------------- HTML


def test_html_shows_score_parts_and_every_failing_diagnosis(sample):
    _, results, html = sample
    assert f"{format_points(results['score'])}</span>" in html
    assert f"/ {format_points(results['max_score'])} points" in html
    for part in results["parts"]:
        assert str(escape(part["title"])) in html
    for check in report_samples.failing_checks(results):
        # control characters (escape codes in a student's message) are shown replaced
        assert str(escape(visible_text(report_samples.shown_summary_line(check)))) in html, check["id"]


def test_html_loads_nothing_from_outside(sample):
    _, _, html = sample
    page = parse(html)
    for tag, attributes in page.tags:
        for name in ("src", "href", "xlink:href", "action", "data", "poster", "srcset", "background"):
            value = (attributes.get(name) or "").strip()
            assert not value or value.startswith("#"), f"<{tag} {name}={value!r}>"
    css = "".join(page.styles)
    assert "@import" not in css and "url(" not in css
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.IGNORECASE)


def test_html_has_no_script_and_one_style(sample):
    _, _, html = sample
    tags = [tag for tag, _ in parse(html).tags]
    assert "script" not in tags
    assert tags.count("style") == 1
    assert html.count("</style>") == 1


def test_hostile_strings_stay_text():
    html = render_html(report_samples.hostile())
    page = parse(html)
    assert report_samples.SCRIPT not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert {tag for tag, _ in page.tags}.isdisjoint({"script", "img", "link", "iframe", "object", "embed"})
    assert all(attributes.get("href", "").startswith("#") for tag, attributes in page.tags if tag == "a")
    assert not any(name.startswith("on") for _, attributes in page.tags for name in attributes)


def test_huge_output_is_cut():
    html = render_html(report_samples.hostile())
    assert len(html) < 200_000
    assert "characters cut" in html


def test_html_flags_provisional_parts_and_hidden_checks():
    html = render_html(report_samples.buggy())
    assert "Provisional score." in html
    assert "Smoke mode: trained on the small shipped set" in html
    assert '<span class="tag">hidden</span>' in html


def test_html_shows_written_answer_beside_its_rubric():
    html = render_html(report_samples.buggy())
    assert "Because every token attends to every other token" in html
    assert "5 points: explains that attention cost grows" in html
    assert "1 written answer awaits manual grading" in html


def test_html_draws_the_pictures():
    html = render_html(report_samples.buggy())
    assert html.count('class="heatmap"') == 6  # expected, got, difference for two checks
    assert html.count('class="track"') == 4
    assert html.count('class="chart"') == 2
    assert "validation loss is not a finite number at epoch 4, 5, 6." in html


def test_rejected_submission_page():
    results = report_samples.rejected()
    html = render_html(results)
    assert "Submission rejected" in html
    assert str(escape(results["reason"])) in html


def test_self_check_wording():
    html = render_html(report_samples.self_check_all_passing())
    assert f"9/9 {SELF_CHECK_WORDING}" in html
    template = render_html(report_samples.template_not_implemented())
    assert f"0/9 {SELF_CHECK_WORDING}" in template
    for page in (html, template):
        assert "all tests passed" not in page.lower()
        assert "all checks passed" not in page.lower()


def test_instructor_wording_does_not_mention_hidden_checks_running_later():
    html = render_html(report_samples.full_marks())
    assert "9/9 checks passed" in html
    assert "after the deadline" not in html


def test_malformed_details_do_not_break_the_report():
    results = report_samples.buggy()
    check = results["parts"][0]["checks"][0]
    check["details"] = {
        "attention_maps": {"expected": [[1, 0], [0.5]], "got": "not a matrix"},
        "proportions": {"not": "a list"},
        "training_curve": {"train_loss": [None, "x"]},
        "numbers": "nope",
    }
    html = render_html(results)
    assert "is not a rectangular (T, T) matrix" in html
    results["parts"][0]["checks"][1].update(diagnosis="a string, not {id, text}", details=["a", "list"])
    for verbose in (False, True):
        print_summary(results, Console(file=io.StringIO(), width=80), verbose=verbose)


def test_a_part_worth_no_points_gets_a_neutral_bar():
    assert score_bar(0, 0, "no points").count("<rect") == 1
    assert score_bar(3, 4, "some points").count("<rect") == 2


# --------------------------------------------------------------------------- Gradescope


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_gradescope_export_follows_its_schema(name):
    results = report_samples.SAMPLES[name]()
    export = to_gradescope(results)
    jsonschema.validate(export, GRADESCOPE_SCHEMA)
    json.dumps(export, allow_nan=False)  # Gradescope reads strict JSON
    numbers = [test["number"] for test in export["tests"]]
    assert len(numbers) == len(set(numbers))


def test_gradescope_visibility_and_scores():
    results = report_samples.buggy()
    export = to_gradescope(results)
    checks = [c for p in results["parts"] for c in p["checks"]]
    for check, test in zip(checks, export["tests"], strict=True):
        expected = "after_due_date" if check["visibility"] == "hidden" else "visible"
        assert test["visibility"] == expected
        if check["status"] == "pending_manual":
            assert test["max_score"] == 0 and "status" not in test
        else:
            assert test["status"] == ("passed" if check["status"] == "passed" else "failed")
            counted = not provisional(results, check)
            assert test["max_score"] == (check["max_score"] if counted else 0)
    assert any(test["visibility"] == "after_due_date" for test in export["tests"])
    automatic = sum(c["score"] for c in checks if c["status"] != "pending_manual" and not provisional(results, c))
    assert sum(test["score"] for test in export["tests"]) == pytest.approx(automatic, abs=1e-3)


def provisional(results, check):
    return any(p["provisional"] and check in p["checks"] for p in results["parts"])


def test_gradescope_hidden_checks_reveal_nothing_before_the_due_date():
    results = report_samples.buggy()
    export = to_gradescope(results)
    assert "score" not in export, "the top-level score is always shown: it would count the hidden checks"
    hidden = [c for p in results["parts"] for c in p["checks"] if c["visibility"] == "hidden"]
    assert hidden
    for check in hidden:
        assert check["title"] not in export["output"]
    for part in results["parts"]:
        if all(c["visibility"] == "hidden" for c in part["checks"]):
            assert part["title"] not in export["output"]


HIDDEN_OUTCOMES = st.lists(st.tuples(st.sampled_from(["passed", "failed", "error", "skipped"]),
                                     st.floats(0, 1), st.text(max_size=20)), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(hidden_provisional=st.booleans(), first=HIDDEN_OUTCOMES, second=HIDDEN_OUTCOMES)
def test_gradescope_visible_bytes_do_not_depend_on_hidden_results(hidden_provisional, first, second):
    """Two submissions that differ only in how their hidden checks went (and, for the provisional
    fine-tuning, hidden or not) show the same bytes before the due date: resubmitting tells a
    student nothing about a hidden answer."""
    def graded(outcomes):
        results = report_samples.buggy()
        hidden = [c for p in results["parts"] for c in p["checks"]
                  if c["visibility"] == "hidden" or (hidden_provisional and p["provisional"])]
        for check, (status, fraction, message) in zip(hidden, outcomes * len(hidden)):
            check.update(visibility="hidden", status=status, message=message or None,
                         score=round(check["max_score"] * (fraction if status == "passed" else 0), 4))
        for part in results["parts"]:
            part["score"] = sum(c["score"] for c in part["checks"])
        results.update(totals(results["parts"]))
        return to_gradescope(results)

    assert report_samples.visible_bytes(graded(first)) == report_samples.visible_bytes(graded(second))
    assert render_feedback_html(graded(first)) == render_feedback_html(graded(second))  # feedback.html too


def test_feedback_for_students_holds_no_rubric_no_flags_and_before_the_due_date_no_hidden_check():
    results = report_samples.buggy()
    results["integrity"] = {"flags": [{"source": "static", "kind": "reach", "where": "attention.py:3",
                                       "reason": "opens the grader's files"}]}
    hidden = [c for p in results["parts"] for c in p["checks"] if c["visibility"] == "hidden"]
    staff = render_html(results)
    assert "For the course staff" in staff and report_samples.WRITTEN_RUBRIC[:40] in staff and "opens the grader" in staff
    feedback = render_feedback_html(results)
    assert "For the course staff" not in feedback and "feedback" in feedback
    assert report_samples.WRITTEN_RUBRIC[:40] not in feedback and "opens the grader" not in feedback
    assert hidden and not any(check["title"] in feedback for check in hidden)
    assert f"{len(hidden)} more {'check is' if len(hidden) == 1 else 'checks are'} graded now and shown after the due date" in feedback
    visible = sum(c["score"] for p in results["parts"] if not p["provisional"] for c in p["checks"]
                  if c["visibility"] != "hidden")
    assert f'<span class="total-score">{format_points(visible)}</span>' in feedback
    later = render_feedback_html(results, after_due_date=True)
    assert all(check["title"] in later for check in hidden) and "shown after the due date" not in later
    assert report_samples.WRITTEN_RUBRIC[:40] not in later and "opens the grader" not in later


def test_gradescope_counts_in_the_output_are_of_the_visible_checks():
    results = report_samples.buggy()
    checks = [c for p in results["parts"] for c in p["checks"] if c["status"] != "pending_manual"]
    visible = [c for c in checks if c["visibility"] != "hidden"]
    assert len(visible) < len(checks)
    passed = sum(c["status"] == "passed" for c in visible)
    assert f"{passed}\\/{len(visible)} checks passed" in to_gradescope(results)["output"]  # Markdown-escaped


def test_gradescope_score_is_given_when_nothing_is_hidden():
    results = report_samples.buggy()
    for part in results["parts"]:
        part["checks"] = [c for c in part["checks"] if c["visibility"] != "hidden"]
    export = to_gradescope(results)
    counted = sum(c["score"] for p in results["parts"] for c in p["checks"]
                  if c["status"] != "pending_manual" and not p["provisional"])
    assert export["score"] == pytest.approx(counted, abs=1e-3)


def test_provisional_points_stay_out_of_every_total_unless_counted():
    results = report_samples.buggy()
    [part] = [p for p in results["parts"] if p["provisional"]]
    assert results["provisional"] == {"parts": [part["id"]], "score": part["score"],
                                      "max_score": part["max_score"], "counted": False}
    assert results["max_score"] == sum(p["max_score"] for p in results["parts"] if not p["provisional"])
    export = to_gradescope(results)
    finetune = [t for t in export["tests"] if t["tags"][0] == part["id"]]
    assert finetune and all(t["max_score"] == 0 for t in finetune)
    assert "not in the total" in export["output"]
    buffer = io.StringIO()
    print_summary(results, Console(file=buffer, width=120))
    assert "provisional points, not in the total" in buffer.getvalue()
    assert "not in the total" in render_html(results)


def test_gradescope_merged_written_answers_are_not_counted_twice():
    results = report_samples.buggy()
    written = next(c for p in results["parts"] for c in p["checks"] if c["status"] == "pending_manual")
    written.update(status="passed", score=written["max_score"],
                   details={"manual": {"score": written["max_score"], "max_score": written["max_score"], "given": 5}})
    test = next(t for t in to_gradescope(results)["tests"] if t["name"].endswith(written["title"]))
    assert test["score"] == 0 and test["max_score"] == 0
    assert "own question" in test["output"]


def test_gradescope_rejected_submission():
    export = to_gradescope(report_samples.rejected())
    assert export["score"] == 0
    assert export["tests"] == []
    assert export["output"].startswith("Submission rejected: not a zip file")


def test_gradescope_student_text_is_fenced_or_escaped():
    export = to_gradescope(report_samples.hostile())
    fence = re.compile(r"^(`{3,})text\n.*?\n\1$", re.DOTALL | re.MULTILINE)
    for text in [export["output"]] + [test["output"] for test in export["tests"]]:
        outside_code = fence.sub("", text)
        assert not re.search(r"(?<!\\)<", outside_code), outside_code


def test_markdown_fence_outlasts_backticks_inside():
    block = md_code("```\nstill code\n````")
    assert block.startswith("`````text\n") and block.endswith("\n`````")


# --------------------------------------------------------------------------- terminal


def test_terminal_summary_is_plain_text_when_not_a_terminal():
    buffer = io.StringIO()
    print_summary(report_samples.hostile(), Console(file=buffer, width=200))
    text = buffer.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "[bold red]loud[/bold red]" in text  # student text is not rich markup
    assert text.rstrip().splitlines()[-1].startswith("Score: 0 / 11")


def test_terminal_summary_piped_from_a_process_has_no_escape_codes():
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import report_samples; "
        "from graders.reports import print_summary; print_summary(report_samples.buggy())"
    )
    environment = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    environment["COLUMNS"] = "200"
    run = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent)],
        capture_output=True, text=True, env=environment, check=True,
    )
    assert "\x1b" not in run.stdout
    assert "Attention is not scaled by 1/sqrt(d_k)" in run.stdout
    assert run.stdout.rstrip().splitlines()[-2].startswith("Score: 0 / 31")
    assert run.stdout.rstrip().splitlines()[-1] == ("Provisional: plus 2.4 / 8 provisional points, not in the total "
                                                    "(they may still change)")


def test_terminal_self_check_wording():
    buffer = io.StringIO()
    print_summary(report_samples.self_check_all_passing(), Console(file=buffer, width=120))
    text = buffer.getvalue()
    assert f"9/9 {SELF_CHECK_WORDING}" in " ".join(text.split())
    assert "all tests passed" not in text.lower()


def test_terminal_rejected_submission():
    buffer = io.StringIO()
    print_summary(report_samples.rejected(), Console(file=buffer, width=200))
    assert buffer.getvalue().startswith("Submission rejected: not a zip file")


# --------------------------------------------------------------------------- write_reports


def test_write_reports_puts_every_file_next_to_results(tmp_path):
    results = report_samples.buggy()
    (tmp_path / "results.json").write_text(json.dumps(results))
    paths = write_reports(results, tmp_path)
    assert paths == {"html": tmp_path / "report.html", "feedback": tmp_path / "feedback.html",
                     "gradescope": tmp_path / "gradescope.json"}
    assert paths["html"].read_text(encoding="utf-8") == render_html(results)
    assert paths["feedback"].read_text(encoding="utf-8") == render_feedback_html(results)
    jsonschema.validate(json.loads(paths["gradescope"].read_text()), GRADESCOPE_SCHEMA)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feedback.html", "gradescope.json", "report.html", "results.json"]


def test_write_reports_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    (tmp_path / "report.html").write_text("previous report")

    def failing_replace(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_reports(report_samples.buggy(), tmp_path)
    assert (tmp_path / "report.html").read_text() == "previous report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


# --------------------------------------------------------------------------- terminal: what to fix


def _terminal(results, width=80, **options):
    buffer = io.StringIO()
    print_summary(results, Console(file=buffer, width=width), **options)
    return buffer.getvalue()


def _flat(text):
    return " ".join(text.split())


def test_terminal_prints_every_diagnosis_in_full_at_80_columns():
    """The table has no room for the fix; the findings under it wrap it, never cut it."""
    text = _terminal(report_samples.buggy())
    assert all(len(line.rstrip()) <= 80 for line in text.splitlines())
    assert "…" not in text
    for check in report_samples.failing_checks(report_samples.buggy()):
        if check.get("diagnosis"):
            assert check["diagnosis"]["text"] in _flat(text), check["id"]
    assert "smallest input: q = k = v of shape (1, 1, 6, 4), seed 3, mask=None" in _flat(text)
    assert "got: tensor([[0.02, 0.01, 0.97], ...])" in _flat(text)
    assert "measured: of selected: mask token 1 (target 0.8, accepted 0.77 to 0.83)" in _flat(text)  # no input


def test_terminal_merges_checks_that_share_a_diagnosis():
    results = report_samples.buggy()
    twin = dict(report_samples.failing_checks(results)[1], id="sdp-mask-again", title="padding again")
    results["parts"][0]["checks"].append(twin)
    text = _terminal(results, width=200)
    assert _flat(text).count(twin["diagnosis"]["text"]) == 1
    assert "sdp-mask:" in text and "sdp-mask-again:" in text
    assert _flat(_terminal(results, width=200, verbose=True)).count(twin["diagnosis"]["text"]) == 2


def test_terminal_an_untouched_function_is_one_line():
    results = report_samples.template_not_implemented()
    text = _terminal(results)
    assert "Traceback" not in text and "raise NotImplementedError" not in text
    # Each part is one line naming the function (found in the traceback: the sample's stubs
    # raise a bare NotImplementedError), and the function is not listed again under them.
    for part in results["parts"]:
        assert f"{part['title']} — 0 / {format_points(part['max_score'])}: not implemented yet: scaled_dot_product" in _flat(text)
    assert "What to fix" not in text
    assert len(text.strip().splitlines()) <= 2 * len(results["parts"]) + 3


def test_terminal_verbose_shows_every_detail():
    text = _flat(_terminal(report_samples.buggy(), width=120, verbose=True))
    assert "max abs error: 0.4213" in text
    assert "debug: scores shape" in text  # what the student's code printed


def test_terminal_self_check_total_leaves_written_answers_out():
    """A perfect self-check reads "N / N"; written answers are listed apart with their points."""
    results = report_samples.self_check_all_passing()
    results["parts"][-1]["checks"].append(report_samples.check(
        "q-residual", "Why is the residual connection crucial?", "pending_manual", 5))
    results["parts"][-1]["checks"][-1]["graded_by_hand"] = True
    text = _terminal(results, width=120)
    automatic = sum(c["max_score"] for p in results["parts"] for c in p["checks"] if c["status"] == "passed")
    assert f"Score on public automatic checks: {format_points(automatic)} / {format_points(automatic)}" in text
    assert "Written answers, graded by hand after the deadline" in text
    assert re.search(r"Why is the residual connection crucial\? +5 points +written", text)
    html = render_html(results)
    assert f'<span class="total-score">{format_points(automatic)}</span>' in html


def test_terminal_zero_point_part_is_marked_practice():
    results = report_samples.self_check_all_passing()
    encoder = results["parts"][1]
    encoder["checks"] = [c for c in encoder["checks"] if c["max_score"] == 0]
    encoder["max_score"] = encoder["score"] = 0
    assert "Positional encoding and Transformer block — practice, 0 points: its check passed" in _terminal(results, 120)
    encoder["checks"][0].update(status="failed", message="the table is a parameter")
    text = _terminal(results, 120)
    assert "practice, 0 points" in text and "the table is a parameter" in text


def test_terminal_details_are_rounded():
    results = report_samples.buggy()
    results["parts"][0]["checks"][0]["details"]["numbers"]["max_abs_error"] = 0.014294875785708427
    text = _terminal(results, width=120, verbose=True)
    assert "max abs error: 0.01429" in text and "0.0142948" not in text


# --------------------------------------------------------------------------- what a TA reads first


def _section(html: str, start_marker: str, end_marker: str) -> str:
    start = html.index(start_marker)
    return html[start: html.index(end_marker, start)]


def test_mistakes_found_lists_each_diagnosis_once_with_its_checks_and_points():
    results = report_samples.notebook_handin()
    html = render_html(results)
    mistakes = _section(html, '<section class="mistakes"', "</section>")
    diagnosis = str(escape(report_samples.MASK_ON_QUERIES[1]))
    assert mistakes.count(diagnosis) == 1
    entry = _section(mistakes, '<li id="mistake-1">', "</li>")
    assert diagnosis in entry and "3 checks" in entry
    assert "−6.5 points" in entry  # 3 + 2 + (2 - 0.5)
    for title in ("masked keys get zero weight", "padding keys are ignored", "a (B, T) mask broadcasts"):
        assert title in entry
    # The checks themselves link to it instead of repeating it: the text is in full only once more.
    assert html.count(diagnosis) == 2
    assert html.count('the same as <a href="#mistake-1">mistake 1</a>') == 2
    assert "weights differ" not in mistakes and "outputs change with padding" not in mistakes
    assert 'id="mistake-2"' not in mistakes and "Mistakes found (1)" in mistakes
    # Parts never attempted (a TODO stub, a module the notebook leaves out) are one line each, apart.
    not_attempted = _section(mistakes, "<strong>Not attempted:</strong>", "</ul>")
    assert "not implemented yet: mask_inputs (4 checks, −8 points)" in not_attempted
    assert "defines none of gpt.py&#39;s names (GPTConfig, GPT, ...) (3 checks, −6 points)" in not_attempted
    assert "no written answer given (2 checks, −10 points)" in not_attempted


def test_failures_without_a_known_cause_follow_the_known_mistakes():
    results = report_samples.buggy()
    first = report_samples.failing_checks(results)[0]
    first["diagnosis"] = None  # now the first failure has no known cause
    mistakes = _section(render_html(results), '<section class="mistakes"', "</section>")
    entries = re.findall(r'<li id="mistake-\d+">(.*?)</li>', mistakes, re.DOTALL)
    assert ["Likely cause:" in entry for entry in entries] == [True] * (len(entries) - 1) + [False]
    assert str(escape(first["message"])) in entries[-1]


def test_a_part_not_attempted_is_one_line_without_tracebacks():
    html = render_html(report_samples.notebook_handin())
    pretraining = _section(html, '<section class="part" id="part-2">', "</section>")
    assert pretraining.count('<details class="not-attempted">') == 1
    assert "not implemented yet: mask_inputs" in pretraining and "4 checks · −8 points" in pretraining
    assert "Traceback" not in pretraining and "<article" not in pretraining
    answers = _section(html, '<section class="part" id="part-3">', "</section>")
    assert "no written answer given <span class=\"muted\">· 2 checks · −10 points" in answers
    assert '<article class="check pending_manual"' in answers  # the answer given is shown in full
    gpt = _section(html, '<section class="part" id="part-4">', "</section>")
    assert gpt.count('<details class="not-attempted">') == 1 and "<article" not in gpt
    # A part with a real failure still shows it in full.
    assert '<article class="check failed"' in _section(html, '<section class="part" id="part-1">', "</section>")


def test_timings_are_folded_away_and_the_total_stays_in_view():
    html = render_html(report_samples.notebook_handin())
    footer = html[html.index("<footer>"):]
    assert "<dt>total time</dt><dd>41.70 s</dd>" in footer
    folded = _section(footer, '<details class="timings">', "</details>")
    assert "<summary>Timings (81)</summary>" in folded  # the worker start, 5 parts, 75 checks
    assert folded.count("checks time: check_") == 75
    assert footer.count("checks time: check_") == 75


def test_the_notebook_cell_map_comes_before_the_parts():
    html = render_html(report_samples.notebook_handin())
    origin = _section(html, '<section class="origin"', "</section>")
    assert "Hand-in: notebook hw.ipynb" in origin
    assert "<tr><td><code>MultiHeadAttention</code></td><td>7</td><td>attention.py</td></tr>" in origin
    assert "<tr><td><code>layer_norm</code></td><td>12</td></tr>" in origin
    assert "cell 23: top-level code not run: 2 loops" in origin  # the notes, folded under the map
    assert html.index('<section class="origin"') < html.index('<section class="part"')
    assert "<h3>Notes</h3>" not in html


def test_notebook_text_in_the_cell_map_stays_text():
    results = report_samples.notebook_handin()
    results["submission"]["origin"]["definitions"][0]["name"] = report_samples.SCRIPT
    results["submission"]["origin"]["notebook"] = report_samples.SCRIPT
    html = render_html(results)
    assert report_samples.SCRIPT not in html and "&lt;script&gt;" in html


def test_a_template_handed_in_as_it_is_has_no_mistakes_only_parts_not_attempted():
    html = render_html(report_samples.template_not_implemented())
    mistakes = _section(html, '<section class="mistakes"', "</section>")
    assert "Mistakes found: none in what was attempted" in mistakes and '<li id="mistake-' not in mistakes
    assert "not implemented yet: scaled_dot_product" in mistakes
    assert "Traceback" not in html and "<article" not in html
