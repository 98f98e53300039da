"""What a TA and a student read beside the totals: no empty rubric box on a student's page, totals
shown to the hundredth, and no isolation level for code that never ran."""

import copy

import report_samples
from graders.batch.gradebook import gradebook_rows, render_summary
from graders.reports.html import render_feedback_html, render_html


def test_a_students_page_shows_their_written_answer_and_no_rubric_box():
    results = report_samples.buggy()
    feedback = render_feedback_html(copy.deepcopy(results))
    assert "Because every token attends to every other token" in feedback
    assert "no rubric recorded" not in feedback and "<figcaption>Rubric</figcaption>" not in feedback
    staff = render_html(copy.deepcopy(results))  # control: the staff's report keeps the box
    assert "<figcaption>Rubric</figcaption>" in staff


def test_the_summary_shows_the_lowest_totals_to_the_hundredth():
    # a total of 19.333..., as its check and its part give it
    results = report_samples.result([report_samples.part("p", "P", [report_samples.check("p.c", "c", "failed", 34,
                                                                                         score=58 / 3)])])
    page = render_summary([{"student_id": "s1", "marker": {}, "results": results}])
    lowest = page.split("<h2>Lowest totals</h2>", 1)[1].split("</table>", 1)[0]
    assert ">19.33<" in lowest and "19.333" not in lowest


def test_a_rejected_row_names_no_isolation_level():
    header, [rejected, graded] = gradebook_rows([
        {"student_id": "s1", "marker": {}, "results": report_samples.rejected()},
        {"student_id": "s2", "marker": {}, "results": report_samples.full_marks()},
    ])
    column = header.index("isolation")
    assert rejected[column] == ""
    assert graded[column] == "full"  # control: a graded row says how it ran
