"""The grading options of `grade`, `grade batch` and the Slurm path: declared, defaulted and
validated here once, so that an option means the same wherever it is given.

    parser = argparse.ArgumentParser()
    add_grading_arguments(parser, assignment)
    options = grading_options(parser.parse_args(argv), parser, assignment)   # exits 2 on a bad value
    options.limits()          # the sandbox's budgets, the assignment's extra budget included
    options.check_options()   # what graders.grading.grade takes as `options`

An assignment adds options of its own through the `options` module its manifest names (the
fine-tuning's data and encoder, say). Such a module has `add_arguments(parser)` and
`from_arguments(args, parser)`, which returns an object with `check_options()` (a dict the
checks read as `ctx.options`), `resolved()` (the same with paths made absolute, for a job that
runs elsewhere) and `budget_s` (seconds added to a submission's budget, or None); and may have
`readable_paths(check_options)` (what the worker of a long part, graded apart, may read),
`held_out_paths(check_options)` (what no worker may read), `describe_part(part_id, options)`
(said when a part starts) and `prepare_batch(check_options, folder, *, parts, gpus)` (what every
job of a local `grade batch` would prepare alike, prepared once before they start into `folder`,
which no worker may read: it returns the check options to add to each job's, which the resume
key leaves out; graders/batch/run.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any


def command_parser(prog, description):
    """The parser of one `grade` command, whose help lists --assignment with its own options.
    The CLI takes --assignment out of the arguments before any parser runs (it decides which
    options a parser has), so the argument here is for the help and never receives a value."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--assignment", metavar="NAME|PATH", default=None,
                        help="the homework: an installed pack's name or a pack's folder (default: the only "
                             "installed pack, or the one whose files the submission holds)")
    return parser


@dataclass(frozen=True)
class GradingOptions:
    parts: tuple[str, ...] | None = None  # None: every part
    seed: int | None = None  # None: the rubric's
    call_timeout_s: float | None = None  # per call into student code; None: Limits' default
    submission_budget_s: float | None = None  # the sandbox's budget for the whole submission
    unsafe: bool = False  # grade without full isolation; every output says so
    isolation: str = "full"  # the level instructor grading requires: full, or container (graders/sandbox/isolation.py)
    count_provisional: bool = False  # provisional (smoke-mode) points in the totals
    assignment: Any = None  # the options of the assignment's own `options` module, or None

    def limits(self):
        """The sandbox's limits. An assignment's long work (training) runs inside the submission's
        budget, so its budget extends it by as much: the parts after it keep the time they had."""
        from graders.sandbox import Limits

        limits = Limits()
        if self.call_timeout_s is not None:
            limits = dataclasses.replace(limits, call_timeout_s=self.call_timeout_s)
        budget = self.submission_budget_s if self.submission_budget_s is not None else limits.submission_budget_s
        if getattr(self.assignment, "budget_s", None) is not None:
            budget += self.assignment.budget_s
        return dataclasses.replace(limits, submission_budget_s=budget)

    def check_options(self) -> dict:
        """The options of the checks and totals, as graders.grading.grade takes them."""
        own = self.assignment.check_options() if self.assignment is not None else {}
        return {**own, "count_provisional": self.count_provisional}

    def resolved(self) -> GradingOptions:
        """The same options with paths made absolute, for a job that runs elsewhere (another
        process, a Slurm node) with another environment."""
        if self.assignment is None:
            return self
        return dataclasses.replace(self, assignment=self.assignment.resolved())


def assignment_options_module(assignment):
    """The `options` module of the assignment, or None (also where there is no assignment)."""
    return assignment.options_module() if assignment is not None else None


def positive_number(text: str) -> float:
    """argparse type: a number above 0 (a budget, a timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def add_grading_arguments(parser: argparse.ArgumentParser, assignment) -> None:
    """The options of one grade, the same for `grade` and `grade batch`, with the assignment's own
    (none where `assignment` is None)."""
    parser.add_argument("--seed", type=int, default=None, help="grading seed (default: the rubric's; same seed, same score)")
    parser.add_argument("--parts", nargs="+", default=None, metavar="PART", help="grade only these parts")
    parser.add_argument("--timeout", type=positive_number, default=None, metavar="S",
                        help="wall-clock seconds per call into student code (default 60)")
    parser.add_argument("--timeout-per-submission", type=positive_number, default=None, metavar="S",
                        help="sandbox time budget of one submission (default 600, plus the assignment's training budget)")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade without full isolation, for code you trust (your own); every output says so")
    parser.add_argument("--isolation", choices=("full", "container"), default="full",
                        help="what grading requires: full (bubblewrap's namespaces, a uid of its own, ...) or container, "
                             "in a one-shot container that holds one submission (Gradescope's): no namespaces, the "
                             "container is the boundary (docs/sandbox.md)")
    parser.add_argument("--count-provisional", action="store_true",
                        help="count provisional points (checks run in a reduced mode) in the totals; they are shown apart otherwise")
    module = assignment_options_module(assignment)
    if module is not None:
        module.add_arguments(parser)


def validate_parts(parts, parser: argparse.ArgumentParser, assignment) -> None:
    """A usage error (exit 2) naming the parts that the assignment's rubric does not have."""
    if not parts or assignment is None:
        return  # nothing to look up: a command that needs no assignment (`grade doctor`) goes on
    known = [part.id for part in assignment.rubric.parts]
    unknown = [part for part in parts if part not in known]
    if unknown:
        parser.error(f"no such part: {', '.join(unknown)} (the parts are: {', '.join(known)})")


def grading_options(args: argparse.Namespace, parser: argparse.ArgumentParser, assignment) -> GradingOptions:
    """The options of `args`, validated against `assignment` (None: no assignment's): an unknown
    part, or a bad value of the assignment's own options, is a usage error."""
    validate_parts(args.parts, parser, assignment)
    module = assignment_options_module(assignment)
    return GradingOptions(
        parts=tuple(args.parts) if args.parts else None,
        seed=args.seed,
        call_timeout_s=args.timeout,
        submission_budget_s=args.timeout_per_submission,
        unsafe=args.unsafe_no_sandbox,
        isolation=args.isolation,
        count_provisional=args.count_provisional,
        assignment=module.from_arguments(args, parser) if module is not None else None,
    )
