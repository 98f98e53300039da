"""Integrity flags in the outputs: results.json (schema), the HTML report, the terminal, the
batch gradebook and summary; and one grade through the real sandbox of a hostile fixture whose
code the audit hook refuses."""

from __future__ import annotations

import csv
import io
import json
import shutil

import jsonschema
import pytest
from rich.console import Console

from graders.batch import store
from graders.batch.gradebook import rebuild
from graders.build import REPO_ROOT
from graders.grading import grade
from graders.reports import print_summary, render_html, to_gradescope
from graders.sandbox import Limits

SCHEMA = json.loads((REPO_ROOT / "graders" / "schemas" / "results.schema.json").read_text())
HOSTILE = REPO_ROOT / "fixtures" / "bert" / "submissions" / "hostile"
HONEST = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"


def results(flags=(), dropped=0, score=8.0, status="graded"):
    document = {
        "schema_version": 1, "status": status, "reason": None, "mode": "instructor", "score": score,
        "max_score": 8.0, "submission": {"sha256": "0" * 64, "name": "x.zip", "kind": "zip", "notes": []},
        "versions": {"grader": "0.1.0"}, "timings": {"total_s": 1.0},
        "parts": [{"id": "attention", "title": "Attention", "score": score, "max_score": 8.0, "checks": [
            {"id": "attention.matches_reference", "title": "matches", "status": "passed" if score else "failed",
             "score": score, "max_score": 8.0, "visibility": "public"}]}],
    }
    if status == "graded":
        document["integrity"] = {"flags": list(flags), "dropped": dropped}
    return document


CODE_FLAG = {"source": "code", "kind": "grader-import", "reason": "imports the grader's module graders.checks",
             "where": "attention.py:12", "file": "attention.py", "line": 12,
             "code": "import graders.checks  # <script>alert(1)</script>"}
DENIAL = {"source": "sandbox", "kind": "sandbox-denial", "reason": "the sandbox refused open (/tmp/x)",
          "where": "importing attention", "event": "open", "detail": "/tmp/x"}


def test_flags_follow_the_schema_and_render_near_the_top_escaped():
    document = results([CODE_FLAG, DENIAL], dropped=3)
    jsonschema.validate(document, SCHEMA)
    html = render_html(document)
    box = html.index("Flags for review (5)")
    assert box < html.index("<main>")  # at the top, before the parts
    assert "not a penalty" in html and "2 more" not in html and "3 more, not shown here" in html
    assert "attention.py:12" in html and "importing attention" in html and "the sandbox refused open" in html
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "Flags for review" not in render_html(results())  # no flags, no box
    # Students see Gradescope's output: flags stay out of it.
    assert "graders.checks" not in json.dumps(to_gradescope(document))
    console = Console(file=io.StringIO(), width=200)
    print_summary(document, console)
    assert "5 integrity flags for review (grader-import, sandbox-denial)" in console.file.getvalue()
    # They are for the course staff: a student's self-check does not mention them.
    console = Console(file=io.StringIO(), width=200)
    print_summary({**document, "mode": "self-check"}, console)
    assert "integrity" not in console.file.getvalue()


def test_gradebook_counts_flags_and_the_summary_lists_the_flagged(tmp_path):
    store.publish(tmp_path, "alice", results(), {"key": "a"})
    store.publish(tmp_path, "mallory", results([CODE_FLAG, DENIAL, DENIAL]), {"key": "m"})
    store.publish(tmp_path, "rejected", results(status="rejected"), {"key": "r"})
    gradebook, summary = rebuild(tmp_path)
    rows = {r["student_id"]: r for r in csv.DictReader(gradebook.read_text().splitlines())}
    assert rows["alice"]["flags"] == "0"
    assert rows["mallory"]["flags"] == "3: grader-import, sandbox-denial"
    assert rows["rejected"]["flags"] == ""
    assert rows["mallory"]["total"] == rows["alice"]["total"] == "8"  # a flag changes no points
    html = summary.read_text()
    section = html[html.index("Flagged for review"):html.index("Lowest totals")]
    assert "submissions/mallory/report.html" in section and "alice" not in section
    assert "grader-import, sandbox-denial" in section


@pytest.mark.slow
def test_a_hostile_write_is_flagged_by_the_scan_and_by_the_sandbox(tmp_path):
    """One grade through the real sandbox: the attack writes outside its folder at import."""
    folder = tmp_path / "submission"
    shutil.copytree(HONEST, folder)
    shutil.copy(HOSTILE / "write_outside" / "attention.py", folder / "attention.py")
    graded = grade(folder, only_parts=["attention"], limits=Limits(call_timeout_s=10.0, submission_budget_s=120.0))
    jsonschema.validate(graded, SCHEMA)
    flags = graded["integrity"]["flags"]
    code = [f for f in flags if f["source"] == "code"]
    assert [(f["kind"], f["file"]) for f in code] == [("write-outside", "attention.py")]
    denials = [f for f in flags if f["source"] == "sandbox"]
    # Exactly the two writes outside the worker's folder; the honest code and the grader's own
    # harness are refused nothing.
    assert sorted((f["event"], f["detail"], f["where"]) for f in denials) == [
        ("open", "/tmp/hostile-was-here", "importing attention"),
        ("open", "/work/hostile-was-here", "importing attention"),
    ]
    assert all(f["kind"] == "sandbox-denial" for f in denials)
    assert graded["parts"][0]["score"] > 0  # the flags took no points
    html = render_html(graded)
    assert "Flags for review (3)" in html and "/tmp/hostile-was-here" in html and "write-outside" in html
