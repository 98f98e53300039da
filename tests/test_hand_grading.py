"""Written answers graded by hand: `grade merge` takes a score for a blank or unreadable answer
too (it is a person's to grade, not the machine's), and partial credit reads as graded, never as
a red "failed", in the HTML report and the terminal."""

import copy
import io

from rich.console import Console

import report_samples
from graders.batch.merge import apply_one, is_written_answer
from graders.reports import print_summary, render_html


def notebook_with_blank_answers():
    results = copy.deepcopy(report_samples.notebook_handin())
    blank = [c for part in results["parts"] for c in part["checks"] if c.get("graded_by_hand") and c["status"] == "failed"]
    assert blank, "the sample holds answers left blank"
    return results, blank


def test_a_blank_written_answer_is_a_persons_to_grade():
    results, blank = notebook_with_blank_answers()
    assert all(is_written_answer(check) for check in blank)
    changed, given = apply_one(results, blank[0]["id"], 0, "nothing written")
    assert changed and given == 0
    assert blank[0]["message"] == "graded by hand: 0 / 5 (nothing written)"


def test_an_automatic_check_is_not_graded_by_hand():
    results, _ = notebook_with_blank_answers()
    automatic = [c for part in results["parts"] for c in part["checks"] if not c.get("graded_by_hand")]
    assert automatic and not any(is_written_answer(check) for check in automatic)


def test_partial_credit_reads_as_graded_not_failed():
    results, blank = notebook_with_blank_answers()
    apply_one(results, blank[0]["id"], 1, "")  # 1 / 5: below half
    assert blank[0]["status"] == "failed"  # results.json keeps passed/failed at half the points
    html = render_html(results)
    article = html[html.index(f'id="{_anchor_of(results, blank[0])}"'):]
    article = article[:article.index("</article>")]
    assert "graded by hand" in article and "✗" not in article and "failed" not in article
    assert 'class="check graded"' in html
    mistakes = html[html.index('id="mistakes-title"'):html.index("</section>", html.index('id="mistakes-title"'))]
    assert blank[0]["title"] not in mistakes  # a person's judgement is not a mistake the grader found
    buffer = io.StringIO()
    print_summary(results, Console(file=buffer, width=120))
    line = next(line for line in buffer.getvalue().splitlines() if blank[0]["title"] in line)
    assert "graded" in line and "not written yet" not in line and "1 / 5" in line


def _anchor_of(results, wanted):
    for p, part in enumerate(results["parts"]):
        for c, check in enumerate(part["checks"]):
            if check is wanted:
                return f"part-{p}-check-{c}"
    raise AssertionError("not in the results")


# ---------------------------------------------------------------------------- grade answers, then merge


def test_answers_export_round_trips_through_merge(tmp_path, capsys):
    import csv
    import json

    from graders.batch import store
    from graders.batch.merge import merge_manual
    from graders.cli import main
    from tests.test_batch_units import written_results

    alice = written_results()
    bob = written_results()
    [part] = bob["parts"]
    part["checks"][1].update(status="failed", message="no answer written for: LN", graded_by_hand=True, details={})
    part["checks"][1]["details"] = {"question": "Why LN?", "rubric": "=HYPERLINK(\"model answer\")"}
    store.publish(tmp_path, "alice", alice, {"key": "a"})
    store.publish(tmp_path, "bob", bob, {"key": "b"})

    assert main(["answers", str(tmp_path)]) == 0
    assert "4 written answers from 2 students: 3 to grade, 1 left blank" in capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "answers.csv").read_text().splitlines()))
    assert [(r["student_id"], r["check_id"], r["status"]) for r in rows] == [
        ("alice", "answers.layer_norm", "pending"), ("bob", "answers.layer_norm", "blank"),
        ("alice", "answers.scaling_factor", "pending"), ("bob", "answers.scaling_factor", "pending")]
    assert rows[0]["answer"] == "it normalises" and rows[0]["max_score"] == "5"
    assert rows[1]["rubric"].startswith("'=")  # a formula in a spreadsheet cell is defused
    page = (tmp_path / "answers.html").read_text()
    assert "Do not send it to students" in page and "it normalises" in page and "nothing written" in page

    rows[0]["score"], rows[0]["comment"] = "3", "partly"
    rows[1]["score"] = "0"
    with (tmp_path / "answers.csv").open("w", newline="") as handle:  # the TA's spreadsheet, saved again
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    report = merge_manual(tmp_path / "answers.csv", tmp_path)
    assert report.ok and len(report.applied) == 2 and len(report.not_graded) == 2
    assert "2 row(s) without a score passed over: 2 written answer(s) not graded yet" in report.lines()
    merged = json.loads((tmp_path / "submissions" / "alice" / "results.json").read_text())
    assert merged["parts"][0]["checks"][1]["details"]["manual"]["score"] == 3

    assert main(["answers", str(tmp_path)]) == 0  # what is left to grade
    left = list(csv.DictReader((tmp_path / "answers.csv").read_text().splitlines()))
    assert {(r["student_id"], r["check_id"]) for r in left} == {("alice", "answers.scaling_factor"),
                                                               ("bob", "answers.scaling_factor")}
    assert main(["answers", str(tmp_path), "--all"]) == 0
    assert len(list(csv.DictReader((tmp_path / "answers.csv").read_text().splitlines()))) == 4


def test_answers_of_a_folder_that_is_no_batch_is_a_usage_error(tmp_path, capsys):
    from graders.cli import main

    assert main(["answers", str(tmp_path)]) == 2
    assert "holds no batch results" in capsys.readouterr().err
