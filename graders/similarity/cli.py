"""`grade similarity BATCH_OUT`: the batch's hand-ins compared pair by pair, for the staff.

    grade similarity BATCH_OUT [--out DIR] [--reference] [--corpus FOLDER ...] [--common N] [--flag-at PERCENT]

Exit status: 0 when the report was written, 2 for bad usage (no batch folder, no such corpus
folder, a value out of range, an assignment that is not installed).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from graders.options import command_parser


def _parser():
    parser = command_parser("grade similarity", "Compare every pair of a batch's hand-ins on the code that was graded.")
    parser.add_argument("batch", type=Path, help="the --out folder of `grade batch`")
    parser.add_argument("--out", type=Path, default=None, help="where the report goes (default: BATCH_OUT/similarity)")
    parser.add_argument("--reference", action="store_true", help="compare every hand-in with the reference solution too")
    parser.add_argument("--corpus", type=Path, action="append", default=[], metavar="FOLDER",
                        help="earlier years, public solutions: a folder of hand-ins (zips, folders, notebooks) to "
                             "compare every hand-in with; repeatable")
    parser.add_argument("--common", type=int, default=None, metavar="N",
                        help="code found in more than N hand-ins is the class's common code and counts for no pair "
                             "(default: 10, or 5%% of a large class, at most half of a small one)")
    parser.add_argument("--flag-at", type=float, default=None, metavar="PERCENT",
                        help="pairs scoring this or more are marked and grouped (default 50)")
    return parser


def cmd_similarity(argv: list[str], given: str | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from graders.assignment import installed, load
    from graders.batch import store

    if not store.submissions_dir(args.batch).is_dir():
        return _usage(f"{args.batch} holds no batch results (no submissions/ folder): give the --out folder of grade batch")
    for folder in args.corpus:
        if not folder.is_dir():
            return _usage(f"--corpus {folder} is not a folder: give a folder of hand-ins (zips, folders or notebooks)")
    out = args.out or args.batch / "similarity"
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / "similarity.json").is_file())):
        return _usage(f"{out} exists and is not a similarity report (it would be replaced): choose another --out")
    if args.common is not None and args.common < 1:
        return _usage("--common must be 1 or more")
    if args.flag_at is not None and not 0 < args.flag_at <= 100:
        return _usage("--flag-at is a percentage: more than 0, at most 100")
    name = given or store.graded_assignment(args.batch)
    if name is None:
        return _usage(f"{args.batch} holds no graded result that names its assignment: give --assignment NAME|PATH")
    if given is None and name not in installed():
        return _usage(f"the batch graded the assignment {name!r}, which is not installed here: give --assignment PATH")
    assignment = load(name)

    from graders.similarity.code import Course
    from graders.similarity.compare import FLAG_AT, compare
    from graders.similarity.handins import read_batch, read_corpus, read_reference
    from graders.similarity.report import write_report

    started = time.perf_counter()
    course = Course.of(assignment)
    print(f"reading the hand-ins of {args.batch} ...", file=sys.stderr, flush=True)
    hand_ins, not_compared = read_batch(args.batch, assignment, course)
    if args.reference:
        hand_ins.append(read_reference(assignment, course))
    for folder in args.corpus:
        entries, skipped = read_corpus(folder, assignment, course)
        hand_ins.extend(_unique(entries, {h.id for h in hand_ins}))
        not_compared.extend(skipped)
    read_s = time.perf_counter() - started
    print(f"read {len(hand_ins)} hand-ins in {read_s:.1f} s; comparing ...", file=sys.stderr, flush=True)
    comparison = compare(hand_ins, common=args.common, flag_at=FLAG_AT if args.flag_at is None else args.flag_at / 100)
    index = write_report(comparison, not_compared, assignment, out)
    flagged = comparison.flagged()
    print(f"{len(comparison.students())} hand-ins, {len(comparison.pairs)} pairs: {len(flagged)} at "
          f"{round(comparison.flag_at * 100)}% or more, evidence to look at; {len(comparison.clusters())} groups of "
          f"three or more; {len(not_compared)} not compared ({time.perf_counter() - started:.1f} s)")
    for pair in flagged[:5]:
        print(f"  {pair.a} & {pair.b}: {round(pair.score * 100)}%")
    print(f"report: {index}")
    return 0


def _unique(entries, taken: set[str]):
    """Corpus entries under names no other hand-in has (an entry named like a student gets a suffix)."""
    for entry in entries:
        name, number = entry.id, 2
        while entry.id in taken:
            entry.id = f"{name}-{number}"
            number += 1
        taken.add(entry.id)
        yield entry


def _usage(message: str) -> int:
    print(f"grade similarity: {message}", file=sys.stderr)
    return 2
