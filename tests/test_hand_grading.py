"""Written answers graded by hand: `grade merge` takes a score for a blank or unreadable answer
too (it is a person's to grade, not the machine's), and partial credit reads as graded, never as
a red "failed", in the HTML report and the terminal."""

import copy
import io

from rich.console import Console

import report_samples
from graders.batch.merge import apply_one, _is_manual
from graders.reports import print_summary, render_html


def notebook_with_blank_answers():
    results = copy.deepcopy(report_samples.notebook_handin())
    blank = [c for part in results["parts"] for c in part["checks"] if c.get("graded_by_hand") and c["status"] == "failed"]
    assert blank, "the sample holds answers left blank"
    return results, blank


def test_a_blank_written_answer_is_a_persons_to_grade():
    results, blank = notebook_with_blank_answers()
    assert all(_is_manual(check) for check in blank)
    changed, given = apply_one(results, blank[0]["id"], 0, "nothing written")
    assert changed and given == 0
    assert blank[0]["message"] == "graded by hand: 0 / 5 (nothing written)"


def test_an_automatic_check_is_not_graded_by_hand():
    results, _ = notebook_with_blank_answers()
    automatic = [c for part in results["parts"] for c in part["checks"] if not c.get("graded_by_hand")]
    assert automatic and not any(_is_manual(check) for check in automatic)


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
