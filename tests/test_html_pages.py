"""Every HTML page the product writes starts its <head> with the Content-Security-Policy, and
student text on it stays text.

The pages: report.html (one per graded submission, self-check included), feedback.html (the
student's, beside it), the batch's summary.html and answers.html (its written answers), and the
similarity report's index.html and its pages of pairs. A scan of graders/ for `.html` names keeps
this list honest: a new page fails `test_every_page_the_product_writes_is_covered` until it is
added here.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import sys

import pytest

import report_samples
from graders.batch import store
from graders.batch.answers import answers_html, written_answers
from graders.batch.gradebook import rebuild
from graders.reports import render_html, write_reports
from graders.reports.html import render_feedback_html
from graders.reports.html import CONTENT_SECURITY_POLICY
from graders.assignment import load
from graders.similarity.code import Course, read_hand_in
from graders.similarity.compare import STUDENT, HandIn, compare
from graders.similarity.report import write_report

REPO = Path(__file__).resolve().parents[1]
GRADERS = REPO / "graders"
sys.path.insert(0, str(REPO / "fixtures" / "similarity"))
import make_corpus  # noqa: E402
PAGES = {"report.html", "feedback.html", "summary.html", "answers.html", "index.html"}
SCRIPT = report_samples.SCRIPT  # <script>alert(1)</script>


class Head(HTMLParser):
    """What <head> holds, in order: ('tag', name, attributes) or ('text', data)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.in_head = False
        self.head: list[tuple] = []
        self.tags: list[str] = []
        self.policies: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append(tag)
        if tag == "meta" and (attributes.get("http-equiv") or "").lower() == "content-security-policy":
            self.policies.append(attributes.get("content") or "")
        if tag == "head":
            self.in_head = True
        elif self.in_head:
            self.head.append(("tag", tag, attributes))

    def handle_endtag(self, tag):
        if tag == "head":
            self.in_head = False

    def handle_data(self, data):
        if self.in_head and data.strip():
            self.head.append(("text", data))

    def handle_comment(self, data):
        if self.in_head:
            self.head.append(("comment", data))


def hostile_batch(out: Path) -> Path:
    """A batch whose results carry script in every string the summary shows."""
    graded = {
        "schema_version": 1, "status": "graded", "reason": None, "mode": "instructor", "score": 0.0,
        "max_score": 8.0, "submission": {"sha256": "0" * 64, "name": f"{SCRIPT}.zip", "kind": "zip", "notes": []},
        "versions": {"grader": "0.1.0"}, "timings": {"total_s": 1.0},
        "parts": [{"id": f"attention{SCRIPT}", "title": SCRIPT, "score": 0.0, "max_score": 8.0, "checks": [
            {"id": f"attention.{SCRIPT}", "title": SCRIPT, "status": "failed", "score": 0.0, "max_score": 8.0,
             "visibility": "public", "message": SCRIPT, "diagnosis": {"id": SCRIPT, "text": SCRIPT}}]}],
        "batch": {"input_sha256": "0" * 64, "wall_s": 1.5, "name": SCRIPT},
    }
    graded["parts"].append({"id": "answers", "title": "answers", "score": 0.0, "max_score": 5.0, "checks": [
        {"id": f"answers.{SCRIPT}", "title": SCRIPT, "status": "pending_manual", "score": 0.0, "max_score": 5.0,
         "visibility": "public", "graded_by_hand": True, "message": SCRIPT,
         "details": {"answer": SCRIPT, "question": SCRIPT, "rubric": SCRIPT}}]})
    rejected = {**graded, "status": "rejected", "reason": f"the zip entry {SCRIPT}", "parts": []}
    store.publish(out, "alice", graded, {"key": "a", "name": SCRIPT})
    store.publish(out, "mallory", rejected, {"key": "m"})
    return rebuild(out)[1]


def hostile_similarity(out: Path) -> dict[str, str]:
    """The similarity report of two copies whose names and code carry script: {page: html}."""
    bert = load("bert")
    course = Course.of(bert)
    files = make_corpus.hand_in_files("einsum")
    files["attention.py"] = f"# {SCRIPT}\nNOTE = '{SCRIPT}'\n" + files["attention.py"]
    hand_ins = [HandIn(f"{name}{SCRIPT}", STUDENT, read_hand_in(make_corpus.write_folder(files, out / name), course))
                for name in ("alice", "bob")]
    index = write_report(compare(hand_ins), [], bert, out / "similarity")
    return {f"{page.relative_to(index.parent)} (hostile similarity)": page.read_text(encoding="utf-8")
            for page in sorted(index.parent.rglob("*.html"))}


def pages(tmp_path: Path) -> dict[str, str]:
    """Every kind of page, rendered as the product renders it."""
    rendered = {f"report.html ({name})": render_html(make()) for name, make in report_samples.SAMPLES.items()}
    grading_failed = report_samples.rejected() | {"status": "error", "reason": f"worker lost {SCRIPT}"}
    written = write_reports(grading_failed, tmp_path / "written")["html"]
    rendered["report.html (grading failed, written)"] = written.read_text(encoding="utf-8")
    rendered |= {f"feedback.html ({name})": render_feedback_html(make()) for name, make in report_samples.SAMPLES.items()}
    rendered["summary.html (hostile batch)"] = hostile_batch(tmp_path / "batch").read_text(encoding="utf-8")
    rendered["answers.html (hostile batch)"] = answers_html(written_answers(tmp_path / "batch", include_graded=True))
    (tmp_path / "empty").mkdir()
    rendered["summary.html (empty batch)"] = rebuild(tmp_path / "empty")[1].read_text(encoding="utf-8")
    rendered |= hostile_similarity(tmp_path / "similarity")
    return rendered


@pytest.fixture(scope="module")
def every_page(tmp_path_factory) -> dict[str, str]:
    return pages(tmp_path_factory.mktemp("pages"))


def test_the_policy_is_strict():
    directives = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["style-src"] == "'unsafe-inline'"
    assert directives["base-uri"] == "'none'" and directives["form-action"] == "'none'"
    assert "script-src" not in directives and "unsafe-eval" not in CONTENT_SECURITY_POLICY
    assert not re.search(r"https?:|\*|data:|blob:", CONTENT_SECURITY_POLICY)


def test_the_policy_is_the_first_thing_in_head(every_page):
    for name, html in every_page.items():
        head = Head()
        head.feed(html)
        assert head.policies == [CONTENT_SECURITY_POLICY], name
        kind, tag, attributes = head.head[0]
        assert (kind, tag, attributes.get("http-equiv")) == ("tag", "meta", "Content-Security-Policy"), name
        # <meta charset> must stay within the first 1024 bytes for the browser's pre-scan.
        assert html.encode("utf-8").find(b'<meta charset="utf-8">') < 1024 - 30, name


def test_student_script_stays_text(every_page):
    for name, html in every_page.items():
        head = Head()
        head.feed(html)
        assert "script" not in head.tags, name
        assert SCRIPT not in html and "<script" not in html.lower(), name
    for name in ("report.html (hostile)", "feedback.html (hostile)", "summary.html (hostile batch)",
                 "report.html (grading failed, written)", "answers.html (hostile batch)",
                 "index.html (hostile similarity)"):
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in every_page[name], name
    pairs = [name for name in every_page if name.startswith("pairs/")]
    assert pairs and all("&lt;script&gt;alert(1)&lt;/script&gt;" in every_page[name] for name in pairs), pairs


def test_every_page_the_product_writes_is_covered():
    named = set()
    for source in GRADERS.rglob("*.py"):
        named.update(re.findall(r"""(?:^|['"/`\s])([\w-]+\.html)(?![\w.])""", source.read_text(encoding="utf-8")))
    assert named <= PAGES, f"pages not covered by this test: {sorted(named - PAGES)}"
