"""Renderers that read results.json and nothing else: HTML report, Gradescope export, terminal.

`write_reports` puts `report.html` and `gradescope.json` next to results.json. Each file is
written to a temporary name in the same folder and renamed into place, so that a crash or a
concurrent reader never sees half a report (batch grading resumes by looking at these files).
"""

from __future__ import annotations

import json
from pathlib import Path

from graders.atomic import write_atomically

from .gradescope import to_gradescope
from .html import render_html
from .terminal import print_summary

__all__ = ["render_html", "to_gradescope", "print_summary", "write_reports"]

HTML_NAME = "report.html"
GRADESCOPE_NAME = "gradescope.json"


def write_reports(results: dict, out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path = write_atomically(out_dir / HTML_NAME, render_html(results))
    gradescope_path = write_atomically(
        out_dir / GRADESCOPE_NAME, json.dumps(to_gradescope(results), indent=2, ensure_ascii=False) + "\n"
    )
    return {"html": html_path, "gradescope": gradescope_path}
