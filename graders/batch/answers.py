"""The written answers of a batch, for the people who grade them: `grade answers DIR`.

    grade answers DIR [--csv FILE] [--html FILE] [--all]

answers.csv, one row per written answer still to grade (pending, or left blank; with --all,
also those graded before), sorted by question then student:

    student_id, check_id, score, comment, max_score, status, question, answer, rubric

Fill in `score` (and `comment`) and hand the file to `grade merge answers.csv --out DIR`: it reads
student_id, check_id, score and comment, passes over the rows whose score is still empty, and
clamps a score to [0, max_score]. answers.html is the same, question by question with the rubric
on top, to read on a screen. Both hold the rubric (the model answers): they are for the course
staff, never for students.
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, StrictUndefined

from graders.atomic import OutputFolderError, output_file, write_atomically
from graders.batch import store
from graders.batch.gradebook import _defuse, load_rows
from graders.batch.merge import is_written_answer
from graders.options import command_parser
from graders.reports.html import CSP_META, visible_text
from graders.reports.summary import MANUAL, format_points, merged_by_hand

ANSWERS_CSV = "answers.csv"
ANSWERS_HTML = "answers.html"
COLUMNS = ("student_id", "check_id", "score", "comment", "max_score", "status", "question", "answer", "rubric")


@dataclass(frozen=True)
class Answer:
    student_id: str
    check_id: str
    score: str  # the points given before, or "" while nobody has graded it
    comment: str
    max_score: str
    status: str  # pending (written, not graded), blank (nothing written), graded
    question: str
    answer: str
    rubric: str


def written_answers(out: Path, *, include_graded: bool = False) -> list[Answer]:
    """Every written answer of the graded submissions in the batch folder `out`."""
    answers = []
    for row in load_rows(out):
        results = row["results"]
        if store.outcome_of(results) != store.GRADED:
            continue
        for part in results.get("parts") or []:
            for check in part.get("checks") or []:
                if not is_written_answer(check):
                    continue
                graded = merged_by_hand(check)
                details = check.get("details") if isinstance(check.get("details"), dict) else {}
                if graded and not include_graded:
                    continue
                status = "graded" if graded else "pending" if check.get("status") == MANUAL else "blank"
                answers.append(Answer(
                    student_id=row["student_id"], check_id=str(check.get("id")),
                    score=format_points(details["manual"].get("score")) if graded else "",
                    comment=str(details.get("comment") or ""), max_score=format_points(check.get("max_score")),
                    status=status, question=str(details.get("question") or check.get("title") or ""),
                    answer=str(details.get("answer") or ""), rubric=str(details.get("rubric") or "")))
    return sorted(answers, key=lambda answer: (answer.check_id, answer.student_id))


def answers_csv(answers: list[Answer]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for answer in answers:
        writer.writerow([_defuse(str(getattr(answer, column))) for column in COLUMNS])
    return buffer.getvalue()


_TEMPLATE = """<!doctype html>
<html lang="en"><head>{{ csp_meta }}<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Written answers to grade: {{ count }}</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:900px;padding:1em;color:#222;overflow-wrap:anywhere}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
.staff{border:2px solid #b8860b;background:#fff8e1;border-radius:6px;padding:.5em 1em}
.rubric{background:#f4f6f8;border-radius:6px;padding:.5em 1em}
article{border:1px solid #ddd;border-left:5px solid #8a4baf;border-radius:6px;padding:.5em 1em;margin:.8em 0}
article.blank{border-left-color:#c33}article.graded{border-left-color:#888}
pre{white-space:pre-wrap;font:inherit;margin:.3em 0}.muted{color:#666}
</style></head><body>
<h1>Written answers to grade</h1>
<p class="staff" role="note"><strong>For the course staff:</strong> this page shows the rubric's model answers.
Do not send it to students. Enter the scores in <code>{{ csv_name }}</code> and merge them with
<code>grade merge {{ csv_name }} --out DIR</code>.</p>
<p>{{ count }} answer{{ "" if count == 1 else "s" }} from {{ students }} student{{ "" if students == 1 else "s" }}.</p>
{% for question in questions %}
<h2>{{ question.title }} <span class="muted">({{ question.check_id }}, {{ question.max_score }} points)</span></h2>
{% if question.rubric %}<div class="rubric"><strong>Rubric:</strong><pre>{{ question.rubric }}</pre></div>{% endif %}
{% for answer in question.answers %}
<article class="{{ answer.status }}"><strong>{{ answer.student_id }}</strong> <span class="muted">· {{ answer.status }}
{%- if answer.score %} · {{ answer.score }} / {{ answer.max_score }}{% endif %}</span>
{% if answer.answer %}<pre>{{ answer.answer }}</pre>{% else %}<p class="muted">nothing written</p>{% endif %}
{% if answer.comment %}<p class="muted">comment: {{ answer.comment }}</p>{% endif %}</article>
{% endfor %}
{% else %}<p>Nothing to grade.</p>{% endfor %}
</body></html>
"""

_environment = Environment(autoescape=True, undefined=StrictUndefined, keep_trailing_newline=True,
                           finalize=visible_text)


def answers_html(answers: list[Answer], csv_name: str = ANSWERS_CSV) -> str:
    questions = {}
    for answer in answers:
        question = questions.setdefault(answer.check_id, {"check_id": answer.check_id, "title": answer.question,
                                                          "max_score": answer.max_score, "rubric": answer.rubric,
                                                          "answers": []})
        question["answers"].append(answer)
    return _environment.from_string(_TEMPLATE).render(
        csp_meta=CSP_META, count=len(answers), students=len({a.student_id for a in answers}),
        questions=list(questions.values()), csv_name=csv_name)


def cmd_answers(argv: list[str]) -> int:
    parser = command_parser("grade answers", "Export the written answers of a batch for hand grading: a CSV to fill "
                            "in and merge (grade merge), and a page to read them on.")
    parser.add_argument("out", type=Path, metavar="DIR", help="the batch output folder")
    parser.add_argument("--csv", type=Path, default=None, help=f"where the CSV goes (default: DIR/{ANSWERS_CSV})")
    parser.add_argument("--html", type=Path, default=None, help=f"where the page goes (default: DIR/{ANSWERS_HTML})")
    parser.add_argument("--all", action="store_true", help="also the answers graded before (to regrade them)")
    args = parser.parse_args(argv)
    if not (args.out / store.SUBMISSIONS).is_dir():
        print(f"grade answers: {args.out} holds no batch results (no {store.SUBMISSIONS}/ folder)", file=sys.stderr)
        return 2
    answers = written_answers(args.out, include_graded=args.all)
    not_graded = None if answers else ungraded_answers(args.out)
    if not_graded:
        print(f"grade answers: {not_graded}", file=sys.stderr)
        return 2
    try:
        csv_path, html_path = (output_file(args.csv or args.out / ANSWERS_CSV),
                               output_file(args.html or args.out / ANSWERS_HTML))
    except OutputFolderError as error:
        print(f"grade answers: {error}", file=sys.stderr)
        return 2
    write_atomically(csv_path, answers_csv(answers))
    write_atomically(html_path, answers_html(answers, csv_path.name))
    print(count_line(answers))
    print(f"csv: {csv_path}\nhtml: {html_path}")
    if any(answer.status != "graded" for answer in answers):
        print(f"fill in the score column, then: grade merge {csv_path} --out {args.out}")
    return 0


def count_line(answers: list[Answer]) -> str:
    """How many answers there are, as the gradebook counts them: "to grade" are the written ones
    no person has graded (its pending_manual column), blank ones apart (they keep 0 unless given
    points)."""
    students = len({a.student_id for a in answers})
    counts = {status: sum(a.status == status for a in answers) for status in ("pending", "blank", "graded")}
    said = [f"{counts['pending']} to grade"]
    if counts["blank"]:
        said.append(f"{counts['blank']} left blank (0 points unless you give some)")
    if counts["graded"]:
        said.append(f"{counts['graded']} graded before")
    return (f"{len(answers)} written answer{'' if len(answers) == 1 else 's'} from {students} "
            f"student{'' if students == 1 else 's'}: {', '.join(said)}")


def ungraded_answers(out: Path) -> str | None:
    """Why a batch holds no written answer when its assignment has some: the batch graded only
    other parts (`--parts`); None when it did grade them (all graded before, say)."""
    from graders.assignment import PackError, load

    rows = [row for row in load_rows(out) if store.outcome_of(row["results"]) == store.GRADED]
    graded = {part.get("id") for row in rows for part in row["results"].get("parts") or [] if isinstance(part, dict)}
    names = {(row["results"].get("assignment") or {}).get("name") for row in rows
             if isinstance(row["results"].get("assignment"), dict)}
    if not rows or len(names) != 1:
        return None
    try:
        assignment = load(names.pop())
    except PackError:
        return None
    holding = [part.id for part in assignment.rubric.parts if part.module == assignment.answers_file]
    if not holding or set(holding) & graded:
        return None
    return (f"the batch in {out} graded only {', '.join(sorted(map(str, graded)))}, not the written answers' part "
            f"{', '.join(holding)}: run the batch again with it among its --parts (or without --parts), "
            "then grade answers")
