"""One definition of a total (graders.scoring.totals): grading, `grade merge`, the gradebook and
the reports agree, and no total exceeds its maximum, whatever mix of provisional parts, pending
and merged written answers a grade holds."""

import copy

import pytest
from hypothesis import given, settings, strategies as st

import report_samples
from graders.batch.gradebook import gradebook_rows
from graders.batch.merge import is_written_answer, apply_one
from graders.reports.summary import shown_total
from graders.scoring import totals

MERGED_SCORES = st.lists(st.tuples(st.integers(0, 9), st.floats(-5, 50, allow_nan=False)), max_size=6)


def graded(count_provisional):
    """The sample grade (a provisional smoke-mode fine-tuning, pending written answers), totalled
    as grading totals it under `count_provisional`."""
    results = copy.deepcopy(report_samples.buggy())
    assert any(part["provisional"] for part in results["parts"])
    results.update(totals(results["parts"], count_provisional))
    return results


@settings(max_examples=60, deadline=None, derandomize=True)
@given(count_provisional=st.booleans(), merges=MERGED_SCORES)
def test_merged_written_answers_keep_every_total_within_its_maximum_and_equal_everywhere(count_provisional, merges):
    results = graded(count_provisional)
    maximum = results["max_score"]
    written = [c["id"] for part in results["parts"] for c in part["checks"] if is_written_answer(c)]
    assert written
    for which, score in merges:
        apply_one(results, written[which % len(written)], score, "")
    assert results["max_score"] == maximum  # merging gives points, never moves the maximum
    assert results == {**results, **totals(results["parts"], count_provisional)}
    assert 0 <= results["score"] <= results["max_score"]
    header, [row] = gradebook_rows([{"student_id": "s1", "marker": {}, "results": results}])
    shown = {column: float(row[header.index(column)]) for column in ("total", "max")}  # two decimals
    assert shown == {"total": pytest.approx(results["score"], abs=0.005), "max": pytest.approx(maximum, abs=0.005)}
    assert shown_total(results) == (results["score"], results["max_score"])


def test_a_merge_leaves_a_provisional_part_out_of_the_total_it_was_left_out_of():
    """The case that read 66 / 59: the smoke fine-tuning's points entered the total at the first merge."""
    results = graded(count_provisional=False)
    provisional = sum(part["score"] for part in results["parts"] if part["provisional"])
    assert provisional > 0
    written = next(c["id"] for part in results["parts"] for c in part["checks"] if is_written_answer(c))
    apply_one(results, written, 5, "")
    counted = sum(part["score"] for part in results["parts"] if not part["provisional"])
    assert results["score"] == round(counted, 4) <= results["max_score"]


def test_a_rejection_is_out_of_what_the_grades_beside_it_are_out_of(tmp_path):
    """A rejected row read '0 / 67' beside totals out of 59: the smoke fine-tuning's 8 points are
    provisional, out of the totals, unless counted (or trained for real)."""
    from graders.grading import grade
    from tests.course import BERT

    bogus = tmp_path / "hw.tar.gz"
    bogus.write_bytes(b"not a zip")
    finetune = BERT.rubric.part("finetune").points
    rejected = grade(bogus, unsafe=True, assignment=BERT)
    assert rejected["status"] == "rejected" and rejected["max_score"] == BERT.rubric.points() - finetune
    counted = grade(bogus, unsafe=True, assignment=BERT, options={"count_provisional": True})
    assert counted["max_score"] == BERT.rubric.points()
    trained = grade(bogus, unsafe=True, assignment=BERT, options={"imdb": str(tmp_path), "encoder": str(tmp_path)})
    assert trained["max_score"] == BERT.rubric.points()


def test_the_dashboard_maximum_is_that_of_the_graded_totals():
    from graders.batch.gradebook import summary_view

    results = graded(count_provisional=False)
    error = {**results, "status": "error", "parts": [], "max_score": 999, "batch": {"outcome": "error"}}
    rows = [{"student_id": "a", "marker": {}, "results": results}, {"student_id": "b", "marker": {}, "results": error}]
    assert summary_view(rows)["max"] == results["max_score"]
