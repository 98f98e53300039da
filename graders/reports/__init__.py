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

from .gradescope import to_gradescope
from .html import render_feedback_html, render_html
from .terminal import print_summary

__all__ = ["render_html", "to_gradescope", "print_summary", "write_reports"]

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
