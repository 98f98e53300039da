"""Student self-check: `grade check [PART ...]`, and `grade build` (template, golden answers,
bundle). The golden answers themselves are graders/recording.py's; the rubric's queries,
graders/scoring.py's.

    grade check                  every public check on the folder you are in
    grade check attention mha    only these parts
    grade check --path hw/ --out hw/.grade
    grade check --verbose        every check, every detail of every failing one
    grade check finetune         a part graded after the deadline on the course's machine: a
                                 rehearsal of your code in smoke mode, with its figures, not a score

A self-check grades the student's folder exactly as an instructor would (same worker, same
checks, same renderers), with two differences: only public checks run, and the expected
behaviour comes from the golden fixtures (the pack's `golden/`) instead of the reference solution,
which students do not have. The golden fixtures are what the reference answered when `grade
build --golden` ran every public check on it, with the same seeds, so a self-check draws the
same inputs and finds their answers recorded (an input without a recorded answer, such as a
shrunk counterexample, is skipped by hypothesis, never guessed).

Exit status: 0 when every public check passes (written answers awaiting a grader do not count),
1 while one fails, errs or cannot run, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

from graders import interrupt
from graders.atomic import write_atomically
from graders.lock import draw_mismatch
from graders.options import command_parser
from graders.recording import library_versions, out_of_date, read_manifest, record_golden
from graders.scoring import NOT_PASSING, part_ids

DEFAULT_OUT = ".grade"
# The results' list of what the self-check left to the instructor's grade (after_the_deadline).
AFTER_DEADLINE = "after_deadline"
REPORT_NAME = "report.html"

# Files copied from the student's folder into the graded copy. Only top-level module files:
# a virtual environment, data, checkpoints or old reports in the folder are never read.
STAGED_SUFFIXES = (".py", ".toml", ".ipynb")
NOT_STAGED = {"conftest.py", "setup.py"}


class SelfCheckError(Exception):
    """Self-check cannot start (no golden fixtures, no module files): a message for the student."""


# ---------------------------------------------------------------------------- self-check


def stage_folder(folder, dest):
    """Copy the module files of a student's folder into dest (created); returns their names.

    Only top-level regular files ending in .py, .toml or .ipynb (not conftest.py, not dot
    files) are copied, so that a virtual environment, a dataset or a checkpoint in the folder
    never makes the submission too big to grade."""
    folder, dest = Path(folder), Path(dest)
    dest.mkdir(parents=True)
    copied = []
    for path in sorted(folder.iterdir()):
        if (path.name.startswith(".") or path.name in NOT_STAGED or path.suffix not in STAGED_SUFFIXES
                or path.is_symlink() or not path.is_file()):
            continue
        shutil.copyfile(path, dest / path.name)
        copied.append(path.name)
    return copied


def self_check(path=".", parts=None, *, assignment=None, golden_dir=None, limits=None, progress=None, rehearse=()):
    """Grade the student folder at `path` in self-check mode as a hand-in of `assignment` (by
    default the one the folder belongs to): public checks, golden answers (the pack's, unless
    `golden_dir`); the parts in `rehearse` also rehearse the hidden checks that run here in smoke
    mode (the fine-tuning: the student's training loop on the small set), never scored. Returns
    the results dict (results.json)."""
    from graders.assignment import for_submission
    from graders.grading import SELF_CHECK, grade

    folder = Path(path).resolve()
    if not folder.is_dir():
        raise SelfCheckError(f"{path} is not a folder")
    assignment = assignment or for_submission(folder)
    expected = assignment.expected_files
    golden_dir = golden_dir or assignment.golden_dir
    manifest = read_manifest(golden_dir)
    if manifest is None or not (Path(golden_dir) / "golden.json").is_file():
        raise SelfCheckError(f"no golden fixtures in {golden_dir}: run `grade build --golden` (course authors), "
                             "or reinstall the student bundle")
    recorded = manifest["fingerprint"].get("versions", {})
    if mismatch := draw_mismatch(recorded):
        raise SelfCheckError(mismatch)
    if stale := out_of_date(assignment, golden_dir):
        raise SelfCheckError(stale)
    with tempfile.TemporaryDirectory(prefix="grade-check-") as scratch:
        staged_dir = Path(scratch) / (folder.name or "submission")
        staged = stage_folder(folder, staged_dir)
        if not any(name in expected or name.endswith(".ipynb") for name in staged):
            raise SelfCheckError(
                f"{folder} holds none of {', '.join(expected)}: run `grade check` in your homework "
                f"folder (the one with {expected[0]}), or pass it with --path")
        results = grade(staged_dir, mode=SELF_CHECK, seed=manifest["fingerprint"]["seed"], only_parts=parts,
                        limits=limits, golden_dir=golden_dir, progress=progress, assignment=assignment,
                        rehearse=rehearse)
        if results.get("status") == "graded":
            answers = submitted_answers(staged_dir, Path(scratch) / "answers", assignment)
            results[AFTER_DEADLINE] = after_the_deadline(assignment, [p["id"] for p in results["parts"]], answers)
            _note_parts_graded_later(results)
    notes = results["submission"].setdefault("notes", [])
    notes.insert(0, f"self-check of {folder}: graded {', '.join(staged)}; other files in the folder are not read")
    for library, version in library_versions().items():
        if recorded.get(library) and recorded[library] != version:
            notes.append(f"the golden answers were recorded with {library} {recorded[library]}, you have {version}: "
                         "some inputs may differ and their checks be skipped")
    return results


def submitted_answers(staged_dir, scratch, assignment):
    """The questions file as the grade reads it (a notebook's answer cells included), or None."""
    from graders.grading import read_answers
    from graders.ingest import Rejected, ingest

    if assignment.answers_file is None:
        return None
    try:
        ingested = ingest(staged_dir, scratch, assignment=assignment)
    except Rejected:
        return None
    return read_answers(ingested.root, assignment.answers_file)


def after_the_deadline(assignment, part_ids, answers):
    """What a self-check of `part_ids` does not grade and the instructor grades after the
    deadline, with its points, so that no point goes unexplained: every numeric answer (what the
    student wrote and whether it reads as a number; whether it is right stays hidden), and every
    part with no public check (fine-tuning: it trains on the course's data and machine)."""
    from graders.checks.framework import HIDDEN
    from graders.checks.questions import parse_count

    registry = assignment.registry()
    numeric = {key: (key, *aliases) for (section, key), aliases in assignment.questions.items() if section == "numeric"}
    given = (answers or {}).get("numeric", {}) if isinstance(answers, dict) else {}
    pending = []
    for part in assignment.rubric.parts:
        if part.id not in part_ids:
            continue
        checks = registry.get(part.id, [])
        points = part.check_points([c.id for c in checks])
        hidden = [c for c in checks if c.visibility == HIDDEN]
        if part.module == assignment.answers_file:
            for chk in hidden:
                key = next((key for key, names in numeric.items() if chk.id.split(".", 1)[-1] in names), None)
                if key is None:
                    continue
                answer = given.get(key, "") if isinstance(given, dict) else ""
                state = ("not answered yet" if answer in ("", None) else
                         "not a number" if parse_count(answer) is None else "graded after the due date")
                pending.append({"kind": "numeric", "part": part.id, "id": chk.id, "title": chk.title, "points": points[chk.id],
                                "answer": None if answer in ("", None) else str(answer)[:200], "state": state})
        elif hidden and len(hidden) == len(checks):
            pending.append({"kind": "part", "part": part.id, "id": part.id, "title": part.title, "points": part.points,
                            "checks": [c.title for c in hidden], "state": "graded after the due date"})
    return pending


def _note_parts_graded_later(results):
    """Each part's note says what of it is graded after the deadline, so that a report's part
    of "0 / 0" points (fine-tuning) or without its numeric answers is never unexplained."""
    from graders.reports.summary import after_deadline_rows

    rows = list(zip(results[AFTER_DEADLINE], after_deadline_rows(results)))
    for part in results["parts"]:
        later = [f"{points} {state}" if entry["kind"] == "part" else f"{title}, {points}: {state}"
                 for entry, (title, points, state) in rows if entry["part"] == part["id"]]
        if later:
            part["note"] = "Not in this score: " + " | ".join(later)


def not_passing(results):
    """The public automatic checks that keep the self-check from succeeding: [(check id, status)].
    Written answers, blank or not, are graded by hand after the deadline and never count here."""
    from graders.reports.summary import is_graded_by_hand

    if results.get("status") != "graded":
        return [("submission", results.get("status", "rejected"))]
    return [(c["id"], c["status"]) for part in results.get("parts", []) for c in part.get("checks", [])
            if c.get("visibility") != "hidden" and c.get("status") in NOT_PASSING and not is_graded_by_hand(c)]


def write_self_check_reports(results, out_dir):
    """results.json and report.html into out_dir; returns {kind: path}."""
    from graders.grading import write_results
    from graders.reports.html import render_html

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"results": write_results(results, out_dir)}
    paths["html"] = write_atomically(out_dir / REPORT_NAME, render_html(results))
    return paths


def _check_parser():
    parser = command_parser("grade check", "Run the public checks on your homework folder, offline, with the golden answers.")
    parser.add_argument("parts", nargs="*", metavar="PART", help="only these parts (default: all)")
    parser.add_argument("--path", type=Path, default=Path("."), help="your homework folder (default: here)")
    parser.add_argument("--out", type=Path, default=None, help=f"where results.json and report.html go (default: PATH/{DEFAULT_OUT})")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock seconds per call into your code")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="every check, and every failing one on its own with all its details")
    parser.add_argument("--golden", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def cmd_check(argv, given=None) -> int:
    """`grade check [PART ...] [--path DIR] [--out DIR]` of the assignment `given` (--assignment),
    else of the one the folder belongs to; returns the exit status."""
    args = _check_parser().parse_args(argv)
    from graders.assignment import PackError, for_submission

    if not args.path.is_dir():
        print(f"grade check: {args.path} is {'a file' if args.path.exists() else 'no folder'}: give --path the "
              "homework folder (the one holding your module files)", file=sys.stderr)
        return 2

    try:
        assignment = for_submission(args.path, given)
    except PackError as error:
        print(f"grade check: {error}", file=sys.stderr)
        return 2
    known = part_ids(assignment.rubric)
    unknown = [p for p in args.parts if p not in known]
    if unknown:
        print(f"grade check: unknown part {', '.join(unknown)}; the parts are: {', '.join(known)}", file=sys.stderr)
        return 2
    from graders.sandbox.limits import Limits
    from graders.sandbox.spawn import end_prestarted, prestart_self_check_worker
    from graders.scoring import preload_of

    limits = Limits() if args.timeout is None else Limits(call_timeout_s=args.timeout)
    # The workers the grade will use import torch (and BERT, for a part that preloads it, in a
    # worker of its own) while this process does.
    selected = [part for part in assignment.rubric.parts if not args.parts or part.id in args.parts]
    if any(not part.preload for part in selected):
        prestart_self_check_worker(threads=limits.threads)
    if preload := preload_of(selected):
        prestart_self_check_worker(threads=limits.threads, preload=preload)
    from rich.console import Console

    from graders.reports import print_summary

    console = Console()
    status = console.status("starting the worker...") if console.is_terminal else nullcontext()
    with status:
        def progress(chk):
            if console.is_terminal:
                status.update(f"checking {chk.id}...")

        try:
            # a part named on the command line is rehearsed where it has nothing public to check
            results = self_check(args.path, args.parts or None, assignment=assignment, golden_dir=args.golden,
                                 limits=limits, progress=progress, rehearse=tuple(args.parts))
        except SelfCheckError as error:
            print(f"grade check: {error}", file=sys.stderr)
            return 2
        finally:
            end_prestarted()  # a worker started ahead for a part that had nothing to run
    out = args.out or args.path / DEFAULT_OUT
    interrupt.stop_if_interrupted()  # nothing is written after Ctrl-C, even one whose KeyboardInterrupt was lost
    paths = write_self_check_reports(results, out)
    print_summary(results, console, verbose=args.verbose)
    for note in results["submission"].get("notes", [])[1:]:
        console.print(f"note: {note}", markup=False, highlight=False)
    # Not wrapped: a path cut in two cannot be copied.
    console.print(f"report: {paths['html']}", markup=False, highlight=False, soft_wrap=True)
    return 1 if not_passing(results) else 0


# ---------------------------------------------------------------------------- grade build


def _build_parser():
    parser = command_parser("grade build", "Regenerate what is made from the reference: the student template, the golden "
                            "fixtures of the self-check, and the student bundle (all three when no flag is given).")
    parser.add_argument("--template", action="store_true", help="the student template (student_template/)")
    parser.add_argument("--golden", action="store_true", help="the golden fixtures (golden/ in the assignment's pack)")
    parser.add_argument("--bundle", action="store_true", help="the student bundle (dist/<bundle name>.zip)")
    parser.add_argument("--bundle-out", type=Path, default=None, help="where the bundle zip goes")
    return parser


def cmd_build(argv, given=None) -> int:
    """`grade build [--template] [--golden] [--bundle]`; no flag builds all three, in that order,
    for the assignment `given` (--assignment) or, where none is given, for every installed pack."""
    args = _build_parser().parse_args(argv)
    from graders.assignment import given_or_all
    from graders.consistency import AssignmentError, validate_assignment

    assignments = given_or_all(given)
    if args.bundle_out and len(assignments) > 1:
        print(f"grade build: --bundle-out names one zip, and {len(assignments)} assignments are installed: "
              "choose one with --assignment NAME", file=sys.stderr)
        return 2
    for assignment in assignments:
        try:
            validate_assignment(assignment)
        except AssignmentError as error:
            print(f"grade build: {error}", file=sys.stderr)
            return 2
    for assignment in assignments:
        status = _build(assignment, args)
        if status:
            return status
    return 0


def _build(assignment, args) -> int:
    everything = not (args.template or args.golden or args.bundle)
    from graders.lock import LockError, golden_mismatch, recording_mismatch

    if (everything or args.golden or args.bundle) and (mismatch := recording_mismatch()):
        print(f"grade build: {mismatch}", file=sys.stderr)
        return 2
    if everything or args.template:
        from graders.build import build_template

        for path in build_template(assignment):
            print(f"wrote {path}")
    if everything or args.golden:
        import time

        started = time.perf_counter()
        results = record_golden(assignment, progress=lambda chk: None)
        manifest = read_manifest(assignment.golden_dir)
        checks = sum(len(p["checks"]) for p in results["parts"])
        print(f"wrote {assignment.golden_dir} ({manifest['records']} recorded answers from {checks} public checks "
              f"in {time.perf_counter() - started:.0f} s)")
    if everything or args.bundle:
        from graders.bundle import LeakError, build_bundle, bundle_path

        if mismatch := (golden_mismatch(read_manifest(assignment.golden_dir), assignment.name)
                        or out_of_date(assignment)):
            print(f"grade build: {mismatch}", file=sys.stderr)
            return 2
        try:
            path = build_bundle(assignment, args.bundle_out or bundle_path(assignment))
        except LeakError as error:
            print(f"grade build: {error}", file=sys.stderr)
            return 1
        except LockError as error:
            print(f"grade build: {error}", file=sys.stderr)
            return 2
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # `python -m graders.selfcheck check|build ...`: the same as `grade check|build ...`
    from graders.cli import main

    if sys.argv[1:2] not in (["check"], ["build"]):
        print("usage: python -m graders.selfcheck {check,build} ...", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
