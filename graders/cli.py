"""The `grade` command.

    grade SUBMISSION [--out DIR]      grade a zip, folder or notebook (instructor mode)
    grade check [PART ...]            self-check the student folder you are in (public checks)
    grade build [--template] ...      regenerate the template, golden fixtures, student bundle
    grade report RESULTS.json         re-render the reports of a results.json
    grade batch SUBMISSIONS --out DIR grade a whole course, resumably
    grade answers DIR                 the batch's written answers to grade: a CSV to fill in, a page to read
    grade merge MANUAL.csv --out DIR  merge manual scores of written answers into a batch
    grade review DIR                  grade the batch's written answers in the browser, by question, with rubric items
    grade export DIR --lms canvas     the batch's totals as Canvas's gradebook import (or moodle's worksheet)
    grade similarity DIR              the batch's hand-ins compared pair by pair: shared code, for the staff
    grade doctor                      every layer of the sandbox on this machine, with fixes
    grade gradescope-kit [--out ZIP]  the autograder zip to upload to Gradescope
    grade mutants [--seeds N]         grade the pack's mutants and alternatives: which are caught, named, kept
    grade coverage                    what the checks exercise of the pack's contract, graded on the reference

Every command takes --assignment NAME|PATH: an installed assignment pack or the folder of one
(default: the only installed pack; for `grade SUBMISSION`, `grade check` and `grade batch`, the
pack whose files the submission, homework folder or submissions hold; `grade build` builds every
pack).

Exit status: 0 whenever a result was written (also for a rejected submission), 1 for
`grade check` while a public check fails (and for `grade doctor` on a machine without full
isolation), 2 for bad usage, a missing dependency of the grader (the message says what to
install) or, for `grade check`, golden answers that no longer match the checks, 3 when grading was refused because student code would not be
isolated on this machine (the message says how to fix it), 1 for `grade mutants` when a mutant
is missed or an alternative loses points, 1 for `grade coverage` on a gap, 130 when interrupted (Ctrl-C: one
line, no traceback; `grade batch` keeps its own, docs/batch.md).

    grade --version                   the grader's version, and whether this is the locked environment
"""

import os
import sys
import time
import traceback
from pathlib import Path

from graders import interrupt
from graders.options import add_grading_arguments, command_parser, grading_options
from graders.sandbox.isolation import EXIT_NOT_ISOLATED, refuse_unless_isolated

SUBCOMMANDS = ("check", "build", "report", "batch", "answers", "merge", "review", "export", "doctor", "gradescope-kit",
               "mutants", "coverage", "similarity")
# A package the grader needs is not installed (the message gives the fix): like bad usage, the
# command could not do its work at all.
EXIT_INCOMPLETE_INSTALLATION = 2
EXIT_INTERRUPTED = interrupt.EXIT_INTERRUPTED


def _grade_parser(assignment):
    """`grade`'s parser, with the options of `assignment` (None: the submission named no homework;
    it may not exist, which cmd_grade says)."""
    parser = command_parser("grade", f"Grade a submission of {assignment.title if assignment else 'an installed assignment'}.")
    parser.add_argument("submission", type=Path, help="a .zip, a folder or a .ipynb")
    parser.add_argument("--out", type=Path, default=None, help="where results.json and the reports go (default: ./grade-out/<name>)")
    parser.add_argument("--force", action="store_true",
                        help="replace what --out holds even if it is another submission's grade or other files")
    add_grading_arguments(parser, assignment)
    return parser


def cmd_grade(argv, given=None):
    """`grade SUBMISSION`, of the assignment `given` (--assignment), else of the one the submission's
    files say; a hand-in that shows none of any installed assignment's is rejected, with its reason."""
    from graders.assignment import UnrecognisedSubmission, for_submission, given_or_only

    submission, unrecognised = _submission_argument(argv), None
    try:
        assignment = for_submission(submission, given) if submission is not None else given_or_only(given)
    except UnrecognisedSubmission as error:
        assignment, unrecognised = None, error
    parser = _grade_parser(assignment)
    # Nothing of a hand-in no assignment is recognised in is graded: an option of a pack's is moot.
    args = parser.parse_known_args(argv)[0] if unrecognised else parser.parse_args(argv)
    if not args.submission.exists():
        print(f"grade: no such file or folder: {args.submission}", file=sys.stderr)
        return 2
    options = grading_options(args, parser, assignment)
    refused = refuse_unless_isolated(options.unsafe, level=options.isolation) if unrecognised is None else None
    if refused is not None:
        return refused
    from graders.atomic import OutputFolderError
    from graders.grade_folder import GradeFolder

    try:  # before any worker starts: a folder a student's process made first would be its to rewrite
        folder = GradeFolder.prepare(args.out or Path("grade-out") / args.submission.stem, args.submission,
                                     force=args.force, untrusted_uids=options.limits().sandbox_uids)
    except OutputFolderError as refusal:
        print(f"grade: {refusal}", file=sys.stderr)
        return 2
    try:
        return _grade_into(folder, args, options, assignment, unrecognised)
    finally:
        folder.discard()


def _grade_into(folder, args, options, assignment, unrecognised):
    from graders.grading import INSTRUCTOR, error_result, grade, rejected_result, write_results
    from graders.reports import print_summary, write_reports
    from graders.sandbox.isolation import IsolationUnavailable

    started = time.perf_counter()
    if unrecognised is not None:
        print(f"grade: {args.submission} shows no installed assignment's files: rejected, without an assignment "
              "(--assignment NAME judges it as that homework's)", file=sys.stderr)
        results = rejected_result(args.submission, unrecognised.reason, None, INSTRUCTOR, started)
    else:
        try:
            results = grade(args.submission, seed=options.seed, only_parts=options.parts, limits=options.limits(),
                            options=options.check_options(), extra_secrets=folder.secret_paths(), unsafe=options.unsafe,
                            isolation=options.isolation, progress=PartProgress(options, assignment),
                            assignment=assignment)
        except IsolationUnavailable as refusal:  # found only once the secrets were known: still a refusal
            print(f"grade: {refusal}", file=sys.stderr)
            return EXIT_NOT_ISOLATED
        except Exception as error:  # noqa: BLE001 - a result is always written; the traceback is for us
            traceback.print_exc()
            results = error_result(args.submission, f"the grader failed: {type(error).__name__}: {error}",
                                   assignment=assignment, only_parts=options.parts, started=started)
    if results.get("status") == "rejected" and assignment is not None:
        results["reason"] += _another_homework(args.submission, assignment)
    interrupt.stop_if_interrupted()  # nothing is written after Ctrl-C, even one whose KeyboardInterrupt was lost
    write_results(results, folder.staging)
    try:
        reports = write_reports(results, folder.staging)
    except Exception:  # noqa: BLE001 - results.json is written; the reports can be made again
        traceback.print_exc()
        print(f"grade: the reports could not be written; `grade report {folder.final / 'results.json'}` makes them again",
              file=sys.stderr)
        reports = {}
    interrupt.stop_if_interrupted()
    replaced = folder.replacement_note(results)
    out = folder.publish()
    try:
        print_summary(results)
    except Exception:  # noqa: BLE001 - everything is written; the summary is only shown
        traceback.print_exc()
    if replaced:
        print(f"grade: {replaced}", file=sys.stderr)
    print(f"results: {out / 'results.json'}")
    for kind, report in reports.items():
        print(f"{kind}: {out / report.name}")
    return 0


def _another_homework(submission, assignment) -> str:
    """"; it holds the files of bert: ..." for a hand-in rejected as `assignment`'s that another
    installed assignment's files are found in (--assignment named the wrong homework), else ""."""
    from graders.assignment import PackError, for_submission

    try:
        found = for_submission(submission)
    except PackError:
        return ""
    if found.name == assignment.name:
        return ""
    return f"; it holds the files of {found.name} ({found.title}): --assignment {found.name} grades it as that homework"


class PartProgress:
    """One line on stderr as each part starts, and the notes of long checks (each fine-tuning
    epoch), so a long grade says what it is doing; stdout keeps the summary alone. Called from
    two threads when a part runs beside the others: each line is one write."""

    def __init__(self, options, assignment):
        self.options = options
        self.describe_part = getattr(assignment.options_module(), "describe_part", None)
        self.parts_shown = set()  # a long part runs beside the others: their checks interleave
        self.started = time.perf_counter()

    def __call__(self, chk) -> None:
        part = chk.id.split(".")[0]
        if part in self.parts_shown:
            return
        self.parts_shown.add(part)
        note = self.describe_part(part, self.options.assignment) if self.describe_part else ""
        print(f"[{time.perf_counter() - self.started:6.1f} s] grading {part}{note}", file=sys.stderr, flush=True)

    def note(self, text) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f} s]   {text}", file=sys.stderr, flush=True)


def cmd_report(argv, given=None):
    """`grade report RESULTS.json`: a results.json says its assignment; `given` is not needed."""
    parser = command_parser("grade report", "Re-render the reports of a results.json.")
    parser.add_argument("results", type=Path, help="a results.json, or the folder holding one")
    parser.add_argument("--out", type=Path, default=None, help="default: the folder of results.json")
    parser.add_argument("--after-due-date", action="store_true",
                        help="feedback.html shows the hidden checks too (never the rubric or the flags)")
    args = parser.parse_args(argv)
    from graders.atomic import OutputFolderError, make_folder
    from graders.reports import UnusableResults, print_summary, read_results, write_reports

    try:
        results = read_results(args.results)
    except UnusableResults as error:
        print(f"grade report: {error}", file=sys.stderr)
        return 2
    out = args.out or (args.results if args.results.is_dir() else args.results.parent)
    try:
        reports = write_reports(results, make_folder(out), after_due_date=args.after_due_date)
    except OutputFolderError as error:
        print(f"grade report: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"grade report: cannot write the reports into {out}: {error.strerror}", file=sys.stderr)
        return 2
    for kind, report in reports.items():
        print(f"{kind}: {report}")
    print_summary(results)
    return 0


def cmd_doctor(argv, given=None):
    from graders.assignment import given_or_only

    # The paths an assignment's long parts read are checked too, for the assignment given (or the
    # only one); the sandbox's layers need no assignment.
    assignment = given_or_only(given)
    parser = command_parser("grade doctor", "Show every layer of the sandbox on this machine.")
    add_grading_arguments(parser, assignment)
    chosen_options = grading_options(parser.parse_args(argv), parser, assignment)
    options = chosen_options.check_options()
    from graders.grading import assignment_paths
    from graders.sandbox.doctor import diagnose, ready_to_grade, render
    from graders.scoring import preload_of

    paths = {kind: assignment_paths(assignment, options, kind) if assignment else []
             for kind in ("readable_paths", "held_out_paths")}
    findings = diagnose(readable_paths=paths["readable_paths"], secret_paths=paths["held_out_paths"],
                        gpu=options.get("device") == "cuda", level=chosen_options.isolation,
                        modules=preload_of(assignment.rubric.parts) if assignment else ())
    print(render(findings, chosen_options.isolation))
    return 0 if ready_to_grade(findings) else 1


def run():
    """The `grade` command: main(), then straight out of the process. Everything is written and
    flushed by then; the interpreter's own teardown of torch and the grading machinery would
    add most of a second to every `grade check` a student runs, for nothing."""
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status if isinstance(status, int) else 1)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(version_line())
        return 0
    return interrupt.run_command(_main, argv)


def version_line():
    """`grade --version`: the grader's version and the versions that decide a grade, and whether
    this environment is the lock they were tested with (graders/lock.py)."""
    from graders import __version__
    from graders.lock import LockError, differences, installed_versions, release

    installed = installed_versions()
    libraries = ", ".join(f"{name} {release(installed[name])}" for name in ("torch", "hypothesis", "transformers")
                          if name in installed)
    try:
        locked = "the locked environment" if not differences() else "not the locked environment (python -m graders.lock check)"
    except (OSError, LockError):
        locked = "no lock found"
    return f"transformer-grader {__version__} (Python {sys.version.split()[0]}; {libraries}; {locked})"


def _main(argv):
    """The command line's boundary: --assignment is read here, before any parser (the pack decides
    the options they have), and handed to the command, which loads the pack it names (or finds
    the one it needs) and passes it down as a value."""
    from graders.assignment import PackError

    try:
        argv, given = take_assignment(argv)
    except ValueError as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    try:
        if argv[0] in SUBCOMMANDS:
            return _subcommand(argv[0])(argv[1:], given)
        return cmd_grade(argv, given)
    except PackError as error:  # no such pack, or several installed and none given where one is needed
        print(f"grade: {error}", file=sys.stderr)
        return 2
    except ImportError as error:
        from graders.dependencies import missing_dependency_message, missing_module

        if missing_module(error) is None:
            raise
        print(f"grade: {missing_dependency_message(missing_module(error))}", file=sys.stderr)
        return EXIT_INCOMPLETE_INSTALLATION


def take_assignment(argv):
    """(argv without its --assignment NAME|PATH, that value or None): every command takes it, and
    the assignment decides the options the commands' parsers have, so it is read first."""
    rest, chosen = [], None
    items = iter(argv)
    for item in items:
        if item == "--assignment":
            chosen = next(items, None)
            if chosen is None:
                raise ValueError("--assignment needs a pack's name or folder")
        elif item.startswith("--assignment="):
            chosen = item.partition("=")[2]
        else:
            rest.append(item)
    return rest, chosen


def _submission_argument(argv):
    """The submission `grade` is given (the argument naming a file or folder that is no option's
    value), read before the parser: the assignment it belongs to decides the parser's options.
    An option's value is known as `grade`'s parser would take it, with the options of every
    installed assignment (`--imdb PATH` is a folder, and not the submission)."""
    from graders.assignment import installed, load

    values = {}  # option -> how many values it takes (None: one or more)
    for parser in (_grade_parser(None), *(_grade_parser(load(name)) for name in installed())):
        for action in parser._actions:
            if action.option_strings and action.nargs != 0:
                values.update(dict.fromkeys(action.option_strings, 1 if action.nargs is None else action.nargs))
    left = 0  # values still to come of the option before: an int, or "+" while an nargs="+" option takes them
    for item in argv:
        if item.startswith("-"):
            left = values.get(item.partition("=")[0], 0) if "=" not in item else 0
            left = "+" if left in ("+", "*") else left
        elif left == "+":
            continue
        elif left:
            left -= 1
        elif Path(item).exists():
            return Path(item)
    return None


def _similarity_command():
    """`grade similarity`, a staff tool the student bundle leaves out (graders/bundle.py)."""
    try:
        from graders.similarity.cli import cmd_similarity
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("graders.similarity"):
            raise
        print("grade similarity: a tool of the course staff's grader, not part of this installation", file=sys.stderr)
        return lambda argv, given: 2
    return cmd_similarity


def _subcommand(name):
    """Each subcommand's module is imported only when used: `grade check` must start fast."""
    if name == "report":
        return cmd_report
    if name == "doctor":
        return cmd_doctor
    if name == "mutants":
        from graders.mutants import cmd_mutants

        return cmd_mutants
    if name == "coverage":
        from graders.coverage import cmd_coverage

        return cmd_coverage
    if name == "gradescope-kit":
        from graders import gradescope_kit

        return gradescope_kit.cmd_kit
    if name in ("check", "build"):
        from graders import selfcheck

        return selfcheck.cmd_check if name == "check" else selfcheck.cmd_build
    if name == "answers":
        from graders.batch.answers import cmd_answers

        return lambda argv, given: cmd_answers(argv)  # a batch's results say their assignment
    if name == "review":
        from graders.review.cli import cmd_review

        return cmd_review
    if name == "export":
        from graders.batch.lms import cmd_export

        return lambda argv, given: cmd_export(argv)
    if name == "similarity":
        return _similarity_command()
    from graders.batch import cli as batch_cli

    return batch_cli.cmd_batch if name == "batch" else batch_cli.cmd_merge


if __name__ == "__main__":
    run()
