"""The last layer against leaks, on its own: solution text in what a student is shown is removed,
even from an unsafe grade in which the student's code could read the solution."""

import json
import shutil

from graders.build import REPO_ROOT
from tests.course import REFERENCE_DIR
from graders.grading import grade
from graders.redact import REDACTED, redact_results, redact_text, solution_lines
from graders.reports import render_html, to_gradescope
from graders.sandbox import Limits, isolation

SECRET = solution_lines(REFERENCE_DIR)
HONEST = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"
MARKERS = ["the same keys are hidden from every query", "heads side by side again", "blocks [q | k | v]"]


def _solution_text(module="attention.py"):
    return (REFERENCE_DIR / module).read_text()


def test_a_whole_solution_in_a_message_is_removed():
    text, removed = redact_text("RuntimeError: " + _solution_text(), SECRET)
    assert removed >= 10 and REDACTED in text
    assert not any(marker in text for marker in MARKERS)


def test_a_line_or_two_a_student_shares_with_the_solution_stays():
    traceback = 'File "attention.py", line 12\n    d_k = q.size(-1)\n    attention = F.softmax(logits, dim=-1)  # (B, H, T, T), rows sum to 1\n'
    assert redact_text(traceback, SECRET) == (traceback, 0)


def test_results_are_walked_everywhere():
    nested = {"checks": [{"message": "ok", "details": {"output": _solution_text(), "numbers": [1.5, None]}}]}
    cleaned, removed = redact_results(nested, SECRET)
    assert removed and not any(marker in json.dumps(cleaned) for marker in MARKERS)
    assert cleaned["checks"][0]["details"]["numbers"] == [1.5, None] and nested["checks"][0]["details"]["output"] == _solution_text()


LEAKER = '''

def _steal():
    import os, torch, graders
    candidates = [os.path.join(os.path.dirname(os.path.dirname(graders.__file__)), "reference", "attention.py")]
    for candidate in candidates:
        try:
            raw = torch.from_file(candidate, shared=False, size=os.stat(candidate).st_size, dtype=torch.uint8)
            return bytes(raw.tolist()).decode()
        except Exception as error:
            return f"could not steal: {error}"


def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):
    raise RuntimeError(_steal())
'''


def test_an_unsafe_grade_that_reads_the_solution_shows_none_of_it(tmp_path, monkeypatch):
    """No bubblewrap, and (where the interpreter is private to root) no sandbox user: the
    student's code reads the solution and raises it; the outputs still hold none of it."""
    folder = tmp_path / "submission"
    shutil.copytree(HONEST, folder)
    with (folder / "attention.py").open("a") as handle:
        handle.write(LEAKER)
    monkeypatch.setenv(isolation.BWRAP_ENVIRONMENT, "")
    results = grade(folder, only_parts=["attention"], limits=Limits(call_timeout_s=10), unsafe=True)
    rendered = json.dumps(results) + render_html(results) + json.dumps(to_gradescope(results))
    assert not any(marker in rendered for marker in MARKERS)
    if results["sandbox"]["sandbox_uid"] is None and "could not steal" not in json.dumps(results):
        assert any(flag["kind"] == "solution-text" for flag in results["integrity"]["flags"])

