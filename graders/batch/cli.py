"""`grade batch` and `grade merge`.

    grade batch SUBMISSIONS --out DIR [--jobs N] [--gpus 0,1] [--manifest CSV] [--parts P ...]
                [--timeout-per-submission S] [--backend local|slurm] [--slurm-* ...]
    grade merge MANUAL.csv --out DIR

Exit status of `grade batch`: 0 when every submission has a result (graded, rejected or error:
all are results), 1 when some were interrupted or are still queued on Slurm, 2 for bad usage,
3 when grading was refused because this machine cannot isolate student code (or, at container
isolation, the submissions of the batch from one another: docs/sandbox.md).
`grade merge`: 0 when every row was merged, 1 when some rows named unknown students or checks
(the others are merged), 2 for bad usage. A batch graded at the review desk (`grade review`)
takes the rows into the desk's database, which then publishes them the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graders.sandbox.isolation import CONTAINER, EXIT_NOT_ISOLATED, container_batch_refusal, refuse_unless_isolated
from graders.options import add_grading_arguments, command_parser, grading_options


def _batch_parser(assignment) -> argparse.ArgumentParser:
    parser = command_parser("grade batch", "Grade a folder of submissions, resumably.")
    parser.add_argument("submissions", type=Path, nargs="?", default=None,
                        help="folder of zips / folders / .ipynb notebooks (one per student)")
    parser.add_argument("--out", type=Path, required=True, help="output folder (resumes what is there)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="submissions graded at a time (default: one per core, no more than the GPUs' memory "
                             "holds at 8 GiB each; docs/batch.md)")
    parser.add_argument("--gpus", default=None,
                        help="GPU ids, e.g. 0,1: job slot i gets GPU i mod len (CUDA_VISIBLE_DEVICES); "
                             "default: every GPU nvidia-smi lists, unless CUDA_VISIBLE_DEVICES is set")
    parser.add_argument("--manifest", type=Path, default=None, help="CSV student_id,path: grade exactly these")
    parser.add_argument("--names", choices=("plain", "canvas", "moodle"), default="plain",
                        help="how student ids are read from entry names (docs/batch.md)")
    parser.add_argument("--hard-timeout", type=float, default=None, metavar="S",
                        help="kill a submission's grading process after S s (default 1.5 x budget + 120)")
    parser.add_argument("--retries", type=int, default=2, help="retries for lost infrastructure (never for a student's failure)")
    parser.add_argument("--regrade", action="store_true", help="grade everything again")
    parser.add_argument("--redo-errors", action="store_true", help="grade again the submissions that ended in an error")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    parser.add_argument("--backend", choices=("local", "slurm"), default="local")
    add_grading_arguments(parser, assignment)
    slurm = parser.add_argument_group("Slurm (through submitit; DIR must be on a shared file system)")
    slurm.add_argument("--slurm-partition", default=None)
    slurm.add_argument("--slurm-time", type=float, default=None, metavar="MIN",
                       help="minutes of work per array task, every attempt (default: the hard timeout x (retries + 1)); "
                            "Slurm is asked for about 2 minutes more (docs/batch.md)")
    slurm.add_argument("--slurm-mem-gb", type=int, default=6, help="memory per array task (default 6)")
    slurm.add_argument("--slurm-gpus-per-job", type=int, default=0, help="GPUs per array task (gpus_per_node)")
    slurm.add_argument("--slurm-cpus-per-task", type=int, default=2)
    slurm.add_argument("--slurm-parallelism", type=int, default=64, help="array tasks running at once (--array=0-N%%P)")
    slurm.add_argument("--slurm-account", default=None)
    slurm.add_argument("--slurm-qos", default=None)
    slurm.add_argument("--slurm-constraint", default=None)
    slurm.add_argument("--slurm-setup", action="append", default=[], metavar="LINE",
                       help="a shell line run before each task (e.g. 'module load cuda'); repeatable")
    slurm.add_argument("--slurm-cluster", choices=("slurm", "local", "debug"), default="slurm",
                       help="local/debug: submitit's executors on this machine (testing without Slurm)")
    slurm.add_argument("--no-wait", action="store_true", help="submit and return; run again later to collect")
    return parser


def _submissions_problem(args) -> str | None:
    """What is wrong with where the batch's submissions are to come from, or None."""
    if args.submissions is None and args.manifest is None:
        return "give a SUBMISSIONS folder or a --manifest"
    if args.submissions is not None and not args.submissions.is_dir():
        return f"{args.submissions} is not a folder"
    return None


def _slurm_options_given(parser: argparse.ArgumentParser, args) -> list[str]:
    """The Slurm options set to something other than their default: a local batch would pass over them."""
    group = next(group for group in parser._action_groups if group.title and group.title.startswith("Slurm"))
    return [action.option_strings[0] for action in group._group_actions
            if getattr(args, action.dest) != action.default]


def config_from_args(args, parser, assignment):
    from graders.batch.run import BatchConfig

    options = grading_options(args, parser, assignment).resolved()
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    slurm = {"partition": args.slurm_partition, "time_min": args.slurm_time, "mem_gb": args.slurm_mem_gb,
             "gpus_per_job": args.slurm_gpus_per_job, "cpus_per_task": args.slurm_cpus_per_task,
             "parallelism": args.slurm_parallelism, "cluster": args.slurm_cluster, "account": args.slurm_account,
             "qos": args.slurm_qos, "constraint": args.slurm_constraint, "setup": args.slurm_setup,
             "wait": not args.no_wait}
    return BatchConfig(jobs=args.jobs, gpus=gpus, parts=list(options.parts) if options.parts else None,
                       seed=options.seed, limits=options.limits(), hard_timeout_s=args.hard_timeout,
                       retries=args.retries, options=options.check_options(), names=args.names,
                       manifest=args.manifest, regrade=args.regrade, redo_errors=args.redo_errors,
                       backend=args.backend, slurm=slurm, progress=False if args.no_progress else None,
                       unsafe=options.unsafe, isolation=options.isolation)


def cmd_batch(argv: list[str], given: str | None = None) -> int:
    """`grade batch` of the assignment `given` (--assignment), else of the only installed one, else
    of the one the submissions are hand-ins of (`discover.detect_assignment`)."""
    from graders.assignment import given_or_only, load

    assignment = given_or_only(given)  # None: several packs installed and none given
    if assignment is None and not {"-h", "--help"} & set(argv):
        # The homework the submissions are, as `grade SUBMISSION` tells it; its options then parse.
        from graders.batch.discover import DiscoveryError, detect_assignment

        known = _batch_parser(None).parse_known_args(argv)[0]
        if problem := _submissions_problem(known):
            print(f"grade batch: {problem}", file=sys.stderr)
            return 2
        try:
            name, said = detect_assignment(known.submissions, manifest=known.manifest, names=known.names,
                                           exclude=(known.out,))
        except DiscoveryError as error:
            print(f"grade batch: {error}", file=sys.stderr)
            return 2
        print(f"grade batch: {said}", file=sys.stderr)
        assignment = load(name)
    parser = _batch_parser(assignment)
    args = parser.parse_args(argv)
    if problem := _submissions_problem(args):
        print(f"grade batch: {problem}", file=sys.stderr)
        return 2
    if args.jobs < 0 or args.retries < 0:
        print("grade batch: --jobs and --retries must not be negative", file=sys.stderr)
        return 2
    if args.backend == "local" and (given_slurm := _slurm_options_given(parser, args)):
        print(f"grade batch: {', '.join(given_slurm)} {'is an option' if len(given_slurm) == 1 else 'are options'} of "
              "--backend slurm: add --backend slurm, or leave it out", file=sys.stderr)
        return 2
    config = config_from_args(args, parser, assignment)  # exits 2 on a bad option
    # Local jobs run on this machine: refuse here, before anything is read. Slurm tasks run on
    # compute nodes, which may differ from this one: each refuses there (graders.batch.run_one),
    # and its submission's row says why.
    if args.backend == "local":
        refused = refuse_unless_isolated(config.unsafe, prog="grade batch", level=config.isolation)
        if refused is not None:
            return refused
    if config.isolation == CONTAINER and not config.unsafe:
        refusal = container_batch_refusal(gpu=_gives_the_gpu(config, assignment),
                                          one_at_a_time=args.backend == "local" and args.jobs == 1)
        if refusal is not None:
            print(f"grade batch: {refusal}", file=sys.stderr)
            return EXIT_NOT_ISOLATED
    from graders.batch.discover import DiscoveryError
    from graders.batch.run import run_batch
    from graders.batch.supervise import Interrupted

    try:
        summary = run_batch(assignment, args.submissions, args.out, config)
    except DiscoveryError as error:
        print(f"grade batch: {error}", file=sys.stderr)
        return 2
    except Interrupted as signal_name:
        print(f"grade batch: interrupted ({signal_name}); finished results are kept, "
              "run the same command again to resume", file=sys.stderr)
        return 1
    except RuntimeError as error:  # another run holds the folder, a Slurm array still runs
        print(f"grade batch: {error}", file=sys.stderr)
        return 2
    counts = summary.counts()
    done = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing new"
    print(f"{summary.total} submissions: {summary.skipped} already done, this run: {done}")
    if config.backend == "slurm" and not config.slurm.get("wait", True):
        if summary.submitted:
            print(f"submitted {summary.submitted} array task(s) as Slurm job {summary.slurm_job}; "
                  "run the same command again after it ends to collect and rebuild the gradebook")
        else:
            print("nothing left to submit to Slurm")
        print(f"gradebook: {summary.gradebook}\nsummary: {summary.summary}")
        return 1 if summary.submitted else 0
    print(f"gradebook: {summary.gradebook}\nsummary: {summary.summary}")
    print(f"similarity (for the staff: code shared between hand-ins): grade similarity {args.out}")
    return 0


def _gives_the_gpu(config, assignment) -> bool:
    """Whether the batch's workers would be given a GPU: a part of its own worker (the
    fine-tuning) is graded, on cuda, or by default on a machine or Slurm job with GPUs."""
    from graders.batch.concurrency import gpu_memory_mib

    long_part = any(part.own_worker for part in assignment.rubric.parts if not config.parts or part.id in config.parts)
    device = (config.options or {}).get("device")
    if not long_part or device == "cpu":
        return False
    return device == "cuda" or bool(config.slurm.get("gpus_per_job") if config.backend == "slurm" else gpu_memory_mib())


def cmd_merge(argv: list[str], given: str | None = None) -> int:
    parser = command_parser("grade merge", "Merge manual scores of written answers.")
    parser.add_argument("manual", type=Path, help="CSV: student_id,check_id,score[,comment]")
    parser.add_argument("--out", type=Path, required=True, help="the batch output folder")
    args = parser.parse_args(argv)
    if args.manual.is_dir():
        print(f"grade merge: {args.manual} is a folder: give the CSV file of scores", file=sys.stderr)
        return 2
    if not args.manual.is_file():
        print(f"grade merge: no such file: {args.manual}", file=sys.stderr)
        return 2
    if not (args.out / "submissions").is_dir():
        print(f"grade merge: {args.out} holds no batch results (no submissions/ folder)", file=sys.stderr)
        return 2
    from graders.review.database import exists

    if exists(args.out):  # the batch is graded at the review desk: its database keeps the hand grades
        from graders.review.cli import cmd_review

        return cmd_review([str(args.out), "--import", str(args.manual), "--as", "grade merge"], given)
    from graders.assignment import installed, load
    from graders.batch import store
    from graders.batch.merge import merge_manual

    graded = store.graded_assignment(args.out)
    # the gradebook is rebuilt in its rubric's order, where the pack is at hand
    assignment = load(given) if given is not None else load(graded) if graded in installed() else None
    try:
        report = merge_manual(args.manual, args.out, assignment)
    except (ValueError, RuntimeError) as error:
        print(f"grade merge: {error}", file=sys.stderr)
        return 2
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


if __name__ == "__main__":  # `python -m graders.batch.cli [batch|merge] ...`: `grade batch` and `grade merge`
    from graders.cli import main

    argv = sys.argv[1:]
    sys.exit(main(argv if argv[:1] in (["batch"], ["merge"]) else ["batch", *argv]))
