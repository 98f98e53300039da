"""The batch's totals in the files an LMS imports: `grade export DIR --lms canvas|moodle`.

    canvas   DIR/canvas-import.csv, Canvas's gradebook import (Grades -> Import): the identity
             columns of Canvas's own export, `Student, ID, SIS User ID, SIS Login ID, Section`,
             then one column for the assignment, and a `Points Possible` row. Canvas matches a
             row by `ID`, the Canvas user id (the id `--names canvas` reads from the download's
             file names), and the column by its header `Title (assignment id)`, as its own
             export writes it: the id comes from `--canvas-id` or the pack's manifest
             (`[lms] canvas_assignment_id`); without one Canvas would create a new assignment,
             which the command warns of.
    moodle   DIR/moodle-worksheet.csv, Moodle's offline grading worksheet (the assignment's
             "Upload a grading worksheet"): `Identifier, Full name, Email address, Status, Grade,
             Maximum Grade, Grade can be changed, Last modified (submission), Last modified
             (grade), Feedback comments`, matched by `Identifier` = `Participant <id>` (the id
             `--names moodle` reads from the download's folder names). Status says the
             submission was submitted (and late, where the intake read Canvas's LATE), Last
             modified (grade) when the batch graded it; the intake knows no e-mail address nor
             when the student submitted, and those columns stay empty.

Both LMSs number their users: an id that is not a number (a plain folder name, `alice`) matches
nobody there, and the command lists such ids in a warning instead of exporting them silently.

Which total goes in: a graded submission's (provisional points apart, as the gradebook has
it); a rejected one's 0 (it is its grade); none for a submission whose grading did not finish
(status error: grade it again first). Written answers still pending are said, for each student:
their points are not in the total yet (`grade answers`, then `grade merge`).
"""

from __future__ import annotations

import csv
import io
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from graders.atomic import OutputFolderError, output_file, write_atomically
from graders.batch import store
from graders.batch.gradebook import _defuse, _fmt, display_name, load_rows
from graders.batch.merge import is_written_answer
from graders.options import command_parser
from graders.reports.figures import figures, number
from graders.reports.summary import MANUAL

CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_COLUMNS = ("Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade", "Grade can be changed",
                  "Last modified (submission)", "Last modified (grade)", "Feedback comments")
FILES = {"canvas": "canvas-import.csv", "moodle": "moodle-worksheet.csv"}


# Moodle's worksheet writes its dates so ("Tuesday, 3 March 2026, 10:15 AM").
MOODLE_DATE = "%A, %d %B %Y, %I:%M %p"


@dataclass
class Export:
    text: str
    rows: int = 0
    not_graded: list[str] = field(default_factory=list)  # status error: no total to give
    pending: list[str] = field(default_factory=list)  # written answers still to grade
    title: str = "Assignment"  # the assignment's, as its results name it
    assignment: str = ""  # the pack's name, as its results name it
    not_lms_ids: list[str] = field(default_factory=list)  # ids the LMS cannot have given: it numbers its users
    canvas_id: str = ""  # the Canvas assignment's id in the column's header, "" when none was known
    parts: set[str] = field(default_factory=set)  # the parts the graded submissions were graded on
    provisional: set[str] = field(default_factory=set)  # parts whose provisional points the totals leave out


@dataclass
class Total:
    student_id: str
    name: str
    total: str  # "" for a submission whose grading did not finish
    maximum: str
    late: bool
    graded_at: float | None  # when the batch published it (seconds since the epoch)


def _totals(out: Path, export: Export) -> list[Total]:
    """The total of every submission of the batch."""
    rows = []
    for row in load_rows(out):
        results = row["results"]
        outcome = store.outcome_of(results)
        name = display_name(row)
        assignment = results.get("assignment") if isinstance(results.get("assignment"), dict) else {}
        export.title = str(assignment.get("title") or export.title)
        export.assignment = str(assignment.get("name") or export.assignment)
        if not row["student_id"].isdigit():
            export.not_lms_ids.append(row["student_id"])
        total = ""
        figured = figures(results).total
        if outcome == store.GRADED:
            total = _fmt(figured.score)
            export.parts |= {str(part.get("id")) for part in results.get("parts") or [] if isinstance(part, dict)}
            provisional = results.get("provisional") if isinstance(results.get("provisional"), dict) else {}
            if not provisional.get("counted"):
                export.provisional |= {str(part) for part in provisional.get("parts") or []}
            pending = sum(1 for part in results.get("parts") or [] for check in part.get("checks") or []
                          if is_written_answer(check) and check.get("status") == MANUAL)
            if pending:
                export.pending.append(f"{row['student_id']} ({pending})")
        elif outcome == store.REJECTED:
            total = "0"
        else:
            export.not_graded.append(row["student_id"])
        batch = results.get("batch") if isinstance(results.get("batch"), dict) else {}
        finished = row["marker"].get("finished_at")
        rows.append(Total(row["student_id"], name, total, _fmt(figured.max_score), batch.get("late") is True,
                          finished if isinstance(finished, (int, float)) and not isinstance(finished, bool) else None))
    return rows


def manifest_canvas_id(assignment_name: str) -> str:
    """The Canvas assignment id the pack's manifest gives (`[lms] canvas_assignment_id`), or ""."""
    from graders.assignment import PackError, load

    if not assignment_name:
        return ""
    try:
        manifest = tomllib.loads((load(assignment_name).folder / "assignment.toml").read_text())
    except (PackError, OSError, tomllib.TOMLDecodeError):
        return ""
    return str(manifest.get("lms", {}).get("canvas_assignment_id") or "")


def short_of_the_assignment(export: Export) -> str | None:
    """What the exported totals leave out of the assignment's points, in a warning, or None: the
    parts a batch with --parts did not grade, and provisional points (smoke-mode fine-tuning)."""
    from graders.assignment import PackError, load

    try:
        rubric = load(export.assignment).rubric if export.assignment else None
    except PackError:
        rubric = None
    if rubric is None or not export.parts:
        return None
    missing = [part for part in rubric.parts if part.id not in export.parts and part.points]
    provisional = [part for part in rubric.parts if part.id in export.provisional and part.points]
    if not missing and not provisional:
        return None
    said = []
    if missing:
        said.append(f"the batch graded only some parts: not {', '.join(p.id for p in missing)} "
                    f"({_fmt(sum(p.points for p in missing))} points; grade batch without --parts grades them)")
    if provisional:
        said.append(f"the provisional points of {', '.join(p.id for p in provisional)} "
                    f"({_fmt(sum(p.points for p in provisional))}; smoke mode: grade on a GPU runner with the real data, "
                    "or --count-provisional) are not in them")
    left_out = sum(p.points for p in missing) + sum(p.points for p in provisional)
    return (f"these totals are out of {_fmt(rubric.points() - left_out)}, not the assignment's "
            f"{_fmt(rubric.points())}: {'; '.join(said)}")


def canvas_import(out: Path, title: str | None = None, canvas_id: str | None = None) -> Export:
    """`title` replaces the assignment's title, `canvas_id` the manifest's id (Canvas's own
    export heads the column `Title (id)`, and its import matches the column by it)."""
    export = Export("")
    rows = _totals(out, export)
    export.canvas_id = canvas_id or manifest_canvas_id(export.assignment)
    header = f"{title or export.title} ({export.canvas_id})" if export.canvas_id else title or export.title
    top = max((row.maximum for row in rows), key=number, default="0")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CANVAS_IDENTITY, header])
    writer.writerow(["    Points Possible", "", "", "", "", top])
    for row in rows:
        writer.writerow([_defuse(row.name), _defuse(row.student_id), "", "", "", row.total])
    export.text, export.rows = buffer.getvalue(), len(rows)
    return export


def moodle_worksheet(out: Path) -> Export:
    export = Export("")
    rows = _totals(out, export)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(MOODLE_COLUMNS)
    for row in rows:
        status = "Submitted for grading" + (" - Late" if row.late else "")
        graded_at = time.strftime(MOODLE_DATE, time.localtime(row.graded_at)) if row.graded_at and row.total else ""
        writer.writerow([f"Participant {row.student_id}", _defuse(row.name), "", status, row.total, row.maximum,
                         "Yes", "", graded_at, ""])
    export.text, export.rows = buffer.getvalue(), len(rows)
    return export


def cmd_export(argv: list[str]) -> int:
    parser = command_parser("grade export", "Write the batch's totals in the file an LMS imports (Canvas's gradebook "
                            "import, Moodle's grading worksheet).")
    parser.add_argument("out", type=Path, metavar="DIR", help="the batch output folder")
    parser.add_argument("--lms", choices=sorted(FILES), required=True)
    parser.add_argument("--title", default=None,
                        help="canvas: the assignment's name, as Canvas spells it (default: the assignment's title)")
    parser.add_argument("--canvas-id", default=None, metavar="ID",
                        help="canvas: the assignment's id (the number in its Canvas URL), which Canvas matches the column "
                             "by (default: the pack's manifest, [lms] canvas_assignment_id)")
    parser.add_argument("--file", type=Path, default=None, help="where it goes (default: DIR/canvas-import.csv or "
                                                                "DIR/moodle-worksheet.csv)")
    args = parser.parse_args(argv)
    if not (args.out / store.SUBMISSIONS).is_dir():
        print(f"grade export: {args.out} holds no batch results (no {store.SUBMISSIONS}/ folder)", file=sys.stderr)
        return 2
    canvas_only = [option for option, value in (("--title", args.title), ("--canvas-id", args.canvas_id)) if value]
    if args.lms != "canvas" and canvas_only:
        print(f"grade export: {', '.join(canvas_only)} {'is' if len(canvas_only) == 1 else 'are'} for --lms canvas; "
              f"{args.lms}'s worksheet has no such column: leave it out", file=sys.stderr)
        return 2
    if args.lms == "canvas":
        export = canvas_import(args.out, args.title, args.canvas_id)
    else:
        export = moodle_worksheet(args.out)
    try:
        path = write_atomically(output_file(args.file or args.out / FILES[args.lms]), export.text)
    except OutputFolderError as error:
        print(f"grade export: {error}", file=sys.stderr)
        return 2
    print(f"{args.lms}: {path} ({export.rows} students)")
    if short := short_of_the_assignment(export):
        print(f"warning: {short}", file=sys.stderr)
    if export.not_graded:
        print(f"warning: no total for {len(export.not_graded)} submission(s) whose grading did not finish "
              f"(grade batch --redo-errors): {', '.join(export.not_graded)}", file=sys.stderr)
    if args.lms == "canvas" and not export.canvas_id:
        print("warning: the column has no assignment id, so Canvas will not match it to the assignment and offers to "
              "create a new one: give --canvas-id ID (the number in the assignment's Canvas URL) or set "
              "[lms] canvas_assignment_id in the pack's manifest", file=sys.stderr)
    if export.not_lms_ids:
        kind = "Canvas user ids" if args.lms == "canvas" else "Moodle participant ids"
        print(f"warning: {len(export.not_lms_ids)} student id(s) are not {kind} (not numbers), so {args.lms} matches "
              f"no student to them: {', '.join(export.not_lms_ids)} (grade the LMS's download with --names {args.lms}, "
              "or a manifest of its ids)", file=sys.stderr)
    if export.pending:
        print(f"warning: written answers still to grade, not in these totals: {', '.join(export.pending)} "
              "(grade answers, then grade merge, then export again)", file=sys.stderr)
    return 0
