"""The batch's totals in the files an LMS imports: `grade export DIR --lms canvas|moodle`.

    canvas   DIR/canvas-import.csv, Canvas's gradebook import (Grades -> Import): the identity
             columns of Canvas's own export, `Student, ID, SIS User ID, SIS Login ID, Section`,
             then one column for the assignment headed by its title, and a `Points Possible`
             row. Canvas matches a row by `ID`, the Canvas user id (the id `--names canvas`
             reads from the download's file names), and offers to create the assignment when
             it does not know the header.
    moodle   DIR/moodle-worksheet.csv, Moodle's offline grading worksheet (the assignment's
             "Upload a grading worksheet"): `Identifier, Full name, Email address, Status, Grade,
             Maximum Grade, Grade can be changed, Last modified (submission), Last modified
             (grade), Feedback comments`, matched by `Identifier` = `Participant <id>` (the id
             `--names moodle` reads from the download's folder names).

Which total goes in: a graded submission's (provisional points apart, as the gradebook has
it); a rejected one's 0 (it is its grade); none for a submission whose grading did not finish
(status error: grade it again first). Written answers still pending are said, for each student:
their points are not in the total yet (`grade answers`, then `grade merge`).
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path

from graders.atomic import write_atomically
from graders.batch import store
from graders.batch.gradebook import _defuse, _fmt, _number, display_name, load_rows
from graders.batch.merge import is_written_answer
from graders.options import command_parser
from graders.reports.summary import MANUAL

CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_COLUMNS = ("Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade", "Grade can be changed",
                  "Last modified (submission)", "Last modified (grade)", "Feedback comments")
FILES = {"canvas": "canvas-import.csv", "moodle": "moodle-worksheet.csv"}


@dataclass
class Export:
    text: str
    rows: int = 0
    not_graded: list[str] = field(default_factory=list)  # status error: no total to give
    pending: list[str] = field(default_factory=list)  # written answers still to grade
    title: str = "Assignment"  # the assignment's, as its results name it


def _totals(out: Path, export: Export) -> list[tuple[str, str, str, str]]:
    """(student id, display name, total or "", max) of every submission of the batch."""
    rows = []
    for row in load_rows(out):
        results = row["results"]
        outcome = store.outcome_of(results)
        name = display_name(row)
        if isinstance(results.get("assignment"), dict) and results["assignment"].get("title"):
            export.title = str(results["assignment"]["title"])
        total = ""
        if outcome == store.GRADED:
            total = _fmt(_number(results.get("score")))
            pending = sum(1 for part in results.get("parts") or [] for check in part.get("checks") or []
                          if is_written_answer(check) and check.get("status") == MANUAL)
            if pending:
                export.pending.append(f"{row['student_id']} ({pending})")
        elif outcome == store.REJECTED:
            total = "0"
        else:
            export.not_graded.append(row["student_id"])
        rows.append((row["student_id"], name, total, _fmt(_number(results.get("max_score")))))
    return rows


def canvas_import(out: Path, title: str | None = None) -> Export:
    export = Export("")
    rows = _totals(out, export)
    title = title or export.title
    top = max((maximum for *_, maximum in rows), key=_number, default="0")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CANVAS_IDENTITY, title])
    writer.writerow(["    Points Possible", "", "", "", "", top])
    for student_id, name, total, _ in rows:
        writer.writerow([_defuse(name), _defuse(student_id), "", "", "", total])
    export.text, export.rows = buffer.getvalue(), len(rows)
    return export


def moodle_worksheet(out: Path) -> Export:
    export = Export("")
    rows = _totals(out, export)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(MOODLE_COLUMNS)
    for student_id, name, total, maximum in rows:
        writer.writerow([f"Participant {student_id}", _defuse(name), "", "", total, maximum, "Yes", "", "", ""])
    export.text, export.rows = buffer.getvalue(), len(rows)
    return export


def cmd_export(argv: list[str]) -> int:
    parser = command_parser("grade export", "Write the batch's totals in the file an LMS imports (Canvas's gradebook "
                            "import, Moodle's grading worksheet).")
    parser.add_argument("out", type=Path, metavar="DIR", help="the batch output folder")
    parser.add_argument("--lms", choices=sorted(FILES), required=True)
    parser.add_argument("--title", default=None,
                        help="canvas: the assignment's column, as Canvas spells it (default: the assignment's title)")
    parser.add_argument("--file", type=Path, default=None, help="where it goes (default: DIR/canvas-import.csv or "
                                                                "DIR/moodle-worksheet.csv)")
    args = parser.parse_args(argv)
    if not (args.out / store.SUBMISSIONS).is_dir():
        print(f"grade export: {args.out} holds no batch results (no {store.SUBMISSIONS}/ folder)", file=sys.stderr)
        return 2
    if args.lms == "canvas":
        export = canvas_import(args.out, args.title)
    else:
        export = moodle_worksheet(args.out)
    path = write_atomically(args.file or args.out / FILES[args.lms], export.text)
    print(f"{args.lms}: {path} ({export.rows} students)")
    if export.not_graded:
        print(f"warning: no total for {len(export.not_graded)} submission(s) whose grading did not finish "
              f"(grade batch --redo-errors): {', '.join(export.not_graded)}", file=sys.stderr)
    if export.pending:
        print(f"warning: written answers still to grade, not in these totals: {', '.join(export.pending)} "
              "(grade answers, then grade merge, then export again)", file=sys.stderr)
    return 0
