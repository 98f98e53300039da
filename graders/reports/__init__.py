"""Renderers that read results.json and nothing else: HTML report, Gradescope export, terminal.

`write_reports` puts `report.html` (the course staff's: rubric, hidden checks, flags),
`feedback.html` (the one to send a student: none of those before the due date) and
`gradescope.json` next to results.json. Each file is
written to a temporary name in the same folder and renamed into place, so that a crash or a
concurrent reader never sees half a report (batch grading resumes by looking at these files).
"""

from __future__ import annotations

import json
from pathlib import Path

from graders.atomic import write_atomically

from .figures import inconsistencies
from .gradescope import to_gradescope
from .html import render_feedback_html, render_html
from .terminal import print_summary

__all__ = ["render_html", "to_gradescope", "print_summary", "write_reports", "read_results", "UnusableResults"]

RESULTS_SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "results.schema.json"

HTML_NAME = "report.html"
FEEDBACK_NAME = "feedback.html"
GRADESCOPE_NAME = "gradescope.json"


def write_reports(results: dict, out_dir: Path, *, after_due_date: bool = False) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path = write_atomically(out_dir / HTML_NAME, render_html(results))
    feedback_path = write_atomically(out_dir / FEEDBACK_NAME, render_feedback_html(results, after_due_date=after_due_date))
    gradescope_path = write_atomically(
        out_dir / GRADESCOPE_NAME, json.dumps(to_gradescope(results), indent=2, ensure_ascii=False) + "\n"
    )
    return {"html": html_path, "feedback": feedback_path, "gradescope": gradescope_path}


class UnusableResults(ValueError):
    """A results.json no report should be rendered from; the message says why, with the fix."""


def read_results(path: Path) -> dict:
    """The results.json at `path` (or in the folder `path`), if the reports can be rendered from
    it: JSON of the schema (graders/schemas/results.schema.json) whose figures agree with its
    checks (`figures.inconsistencies`). Raises UnusableResults otherwise."""
    import jsonschema

    path = Path(path)
    path = path / "results.json" if path.is_dir() else path
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnusableResults(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UnusableResults(f"cannot read {path} as JSON ({error})") from None
    if not isinstance(results, dict) or "schema_version" not in results:
        raise UnusableResults(f"{path} is not a grade's results.json (it has no schema_version); give the "
                              "results.json that `grade` or `grade batch` wrote")
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(json.loads(RESULTS_SCHEMA.read_text())).iter_errors(results))
    if error is not None:
        raise UnusableResults(f"{path} does not follow the results schema at {error.json_path}: {error.message}; "
                              "it was edited or damaged: restore it, or grade the submission again")
    problems = inconsistencies(results)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise UnusableResults(f"{path} disagrees with itself: {'; '.join(problems[:3])}{more}; it was edited by hand "
                              "or damaged: restore it or grade the submission again (written answers take their "
                              "points through grade merge)")
    return results
