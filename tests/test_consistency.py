"""The assignment's pieces agree (graders/consistency.py): the installed one does, and each kind
of slip a course author can make is named with its file and entry."""

import pytest

from graders.checks.framework import Check
from graders.consistency import AssignmentError, problems, validate_assignment
from graders.diagnoses import DIAGNOSES
from graders.sandbox import tasks  # noqa: F401  registers the general tasks
from graders.sandbox.harness import TASKS
from graders.scoring import Part, Rubric
from tests.course import HOMEWORK


def test_the_installed_assignment_agrees():
    validate_assignment(HOMEWORK)


def _check(id):
    return Check(id, id.split(".")[0], "a title", lambda ctx: None, "public", False, False)


@pytest.mark.parametrize("rubric_parts, registry, source, expected", [
    ([Part("attention", "A", "attention", 4, {"attention.nope": 2})], {"attention": [_check("attention.rows")]},
     "", "[parts.attention] weights 'attention.nope', which is no check of that part"),
    ([Part("attention", "A", "attention", 4)], {"attention": [_check("attention.rows")], "extra": [_check("extra.one")]},
     "", "check extra.one belongs to part 'extra'"),
    ([Part("attention", "A", "attention", 4), Part("gpt", "G", "gpt", 4)], {"attention": [_check("attention.rows")]},
     "", "[parts.gpt] has no check"),
    ([Part("attention", "A", "attention", 4)], {"attention": [_check("attention.rows")]},
     'raise CheckFailed("x", diagnosis="no_such_mistake")\n', "checks.py:1: diagnosis 'no_such_mistake'"),
    ([Part("attention", "A", "attention", 4)], {"attention": [_check("attention.rows")]},
     'NEW_DIAGNOSES = {"a": "not_catalogued"}\n', "checks.py:1: diagnosis 'not_catalogued'"),
    ([Part("attention", "A", "attention", 4)], {"attention": [_check("attention.rows")]},
     'ctx.student.task("attention.unregistered", 1)\n', "checks.py:1: harness task 'attention.unregistered'"),
])
def test_each_slip_is_named_with_its_file_and_entry(rubric_parts, registry, source, expected):
    found = problems(Rubric(0, rubric_parts, ""), registry, DIAGNOSES, TASKS, {"checks.py": source})
    assert len(found) == 1 and expected in found[0], found


def test_an_instructors_grade_refuses_an_assignment_whose_pieces_disagree(monkeypatch):
    from graders import consistency

    monkeypatch.setattr(consistency, "problems", lambda *args, **kwargs: ["assignment.toml: a slip"])
    consistency.validate_assignment.cache_clear()
    try:
        with pytest.raises(AssignmentError, match="a slip"):
            validate_assignment(HOMEWORK)
    finally:
        consistency.validate_assignment.cache_clear()
