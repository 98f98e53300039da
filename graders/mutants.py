"""Mutants and alternatives: small edits of an assignment's reference that its checks must tell apart.

A Mutant is a realistic student mistake: graded, it must lose points in its own part, and
should be named by `diagnosis`. An Alternative is a different correct implementation: it must
get full marks in every part it touches. A pack lists them in the module its manifest names
under `mutants` (`MUTANTS` and `ALTERNATIVES`); they hold solution text, so they never go into
a student bundle. tests/test_mutation.py grades the course's; docs/authoring.md shows how to
write them.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graders.assignment import Assignment


@dataclass(frozen=True)
class Edit:
    file: str  # a module of the reference, e.g. "model.py"
    find: str  # exact text that occurs once in the reference file
    replace: str


@dataclass(frozen=True)
class Mutant:
    id: str
    part: str  # the rubric part that must lose points
    edits: tuple
    diagnosis: str | None = None  # the diagnosis id a careful TA would give (None: no diagnosis expected)
    # The other diagnoses its part's checks give it, each for a behaviour of its own code that they
    # observe: with `diagnosis`, the exact set the mutation suite expects (a diagnosis outside it is
    # a false one).
    also: tuple = ()

    @property
    def expected_diagnoses(self) -> set:
        return ({self.diagnosis} if self.diagnosis else set()) | set(self.also)


def one_edit(id: str, part: str, file: str, find: str, replace: str, diagnosis: str | None, also: tuple = ()) -> Mutant:
    """A mutant made of a single edit (most are)."""
    return Mutant(id, part, (Edit(file, find, replace),), diagnosis, also)


@dataclass(frozen=True)
class Alternative:
    id: str
    parts: tuple  # rubric parts that must keep full marks
    edits: tuple
    notes: str = field(default="")


def apply_edits(folder: str | Path, edits: Iterable[Edit]) -> None:
    """Apply edits in place to a copy of the reference in `folder`; each `find` must occur exactly once."""
    for edit in edits:
        path = Path(folder) / edit.file
        text = path.read_text()
        count = text.count(edit.find)
        if count != 1:
            raise AssertionError(f"{edit.file}: {edit.find!r} occurs {count} times, expected once")
        path.write_text(text.replace(edit.find, edit.replace))


def collect(assignment: Assignment) -> tuple[list[Mutant], list[Alternative]]:
    """The pack's mutants and alternatives: from its `mutants` module, or from every module of
    that package."""
    if not assignment.mutants_module:
        return [], []
    assignment.ensure_importable()
    root = importlib.import_module(assignment.mutants_module)
    modules = [root] + [importlib.import_module(f"{root.__name__}.{info.name}")
                        for info in pkgutil.iter_modules(getattr(root, "__path__", []))]
    mutants = [m for module in modules for m in getattr(module, "MUTANTS", [])]
    alternatives = [a for module in modules for a in getattr(module, "ALTERNATIVES", [])]
    return mutants, alternatives


# ------------------------------------------------------------------------------ grading them

LOST = ("failed", "error")  # a check that lost its points: a skipped one only lacked something to run


@dataclass(frozen=True)
class CheckOutcome:
    status: str
    diagnosis: str | None
    message: str


# Grades `parts` of the submission in `folder` under a grading seed: {check id: CheckOutcome}.
PartGrader = Callable[[Path, tuple, int], dict]


@dataclass(frozen=True)
class Row:
    """One line of `grade mutants`: a mutant caught (and named) or not, an alternative kept at full marks or not."""

    id: str
    kind: str  # "mutant" or "alternative"
    parts: tuple  # the mutant's part, or the parts an alternative must keep
    expected: str | None  # the diagnosis a mutant should be named by
    diagnoses: tuple  # the diagnoses its lost checks gave, sorted
    lost: dict  # {check id: message} of the checks that lost points, under the first seed that lost any

    @property
    def caught(self) -> bool:
        return bool(self.lost)

    @property
    def named(self) -> bool:
        return self.expected is None or self.expected in self.diagnoses

    @property
    def missed(self) -> bool:
        """A mutant that kept its points or was not named as expected, or an alternative that lost points."""
        return not (self.caught and self.named) if self.kind == "mutant" else self.caught


def grade_variant(variant: Mutant | Alternative, reference_dir: Path, grade_parts: PartGrader,
                  seeds: Sequence[int], scratch: Path) -> Row:
    """Grade a copy of the reference with the variant's edits: a mutant in its part under the
    first seed, an alternative in each of its parts under every seed (until one loses points)."""
    folder = Path(scratch) / variant.id
    shutil.copytree(reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, variant.edits)
    if isinstance(variant, Mutant):
        kind, parts, expected, tried = "mutant", (variant.part,), variant.diagnosis, seeds[:1]
    else:
        kind, parts, expected, tried = "alternative", tuple(variant.parts), None, seeds
    lost: dict = {}
    for seed in tried:
        outcomes = grade_parts(folder, parts, seed)
        lost = {cid: outcome for cid, outcome in outcomes.items() if outcome.status in LOST}
        if lost:
            break
    diagnoses = tuple(sorted({o.diagnosis for o in lost.values() if o.diagnosis}))
    return Row(variant.id, kind, parts, expected, diagnoses, {cid: o.message for cid, o in lost.items()})


def grade_all(assignment: Assignment, grade_parts: PartGrader, *, seeds: Sequence[int] = (0,),
              only: Iterable[str] = (), scratch: Path) -> list[Row]:
    """A row for every mutant and alternative of the pack (those named in `only`, if any)."""
    mutants, alternatives = collect(assignment)
    variants: list[Mutant | Alternative] = [*mutants, *alternatives]
    chosen = [v for v in variants if not only or v.id in set(only)]
    unknown = set(only) - {v.id for v in chosen}
    if unknown:
        raise ValueError(f"{assignment.name} has no mutant or alternative {', '.join(sorted(unknown))}")
    return [grade_variant(v, assignment.reference_dir, grade_parts, list(seeds), scratch) for v in chosen]


def sandboxed_grader(assignment: Assignment, *, unsafe: bool = False, isolation: str = "full") -> PartGrader:
    """Grades as `grade` does: an instructor's grade of those parts in the sandboxed worker."""
    from graders.grading import grade

    def grade_parts(folder: Path, parts: tuple, seed: int) -> dict:
        results = grade(folder, assignment=assignment, seed=seed, only_parts=list(parts), unsafe=unsafe,
                        isolation=isolation)
        return {check["id"]: CheckOutcome(check["status"], (check["diagnosis"] or {}).get("id"), check["message"] or "")
                for part in results["parts"] for check in part["checks"]}

    return grade_parts


def table(rows: Sequence[Row]) -> str:
    """The rows as `grade mutants` prints them, with a line of totals."""
    lines = [f"{'':3}{'id':40} {'part':22} {'caught':7} {'named':6} diagnoses earned"]
    for row in rows:
        mark = "!!" if row.missed else ""  # a miss stands out in a long table
        if row.kind == "mutant":
            named = "-" if row.expected is None else "yes" if row.named else "NO"
            earned = ", ".join(row.diagnoses) or "-"
            if row.expected is not None and not row.named:
                earned += f" (expected {row.expected})"
            lines.append(f"{mark:3}{row.id:40} {row.parts[0]:22} {'yes' if row.caught else 'NO':7} {named:6} {earned}")
        else:
            kept = "full marks" if not row.caught else "LOST " + "; ".join(f"{c}: {m[:80]}" for c, m in row.lost.items())
            lines.append(f"{mark:3}{row.id:40} {','.join(row.parts):22} {'':7} {'':6} alternative: {kept}")
    mutants = [row for row in rows if row.kind == "mutant"]
    alternatives = [row for row in rows if row.kind == "alternative"]
    lines.append(f"mutants: {len(mutants)}, caught {sum(r.caught for r in mutants)}, "
                 f"named {sum(r.named and r.expected is not None for r in mutants)} of "
                 f"{sum(r.expected is not None for r in mutants)} with a diagnosis; alternatives: {len(alternatives)}, "
                 f"at full marks {sum(not r.caught for r in alternatives)}")
    return "\n".join(lines)


def cmd_mutants(argv: list[str], given: str | None = None) -> int:
    """`grade mutants`: every mutant and alternative of the pack `given` (--assignment, else the
    only installed one) graded; exit 1 on a miss."""
    import sys
    import tempfile

    from graders.assignment import resolve
    from graders.options import command_parser
    from graders.sandbox.isolation import refuse_unless_isolated

    parser = command_parser("grade mutants", "Grade every mutant and alternative of an assignment pack.")
    parser.add_argument("--seeds", type=int, default=1, metavar="N",
                        help="grade each alternative under N grading seeds from the rubric's (default 1)")
    parser.add_argument("--only", nargs="+", default=(), metavar="NAME", help="only these mutants or alternatives")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade without full isolation (the mutants are edits of your own reference)")
    parser.add_argument("--isolation", choices=("full", "container"), default="full",
                        help="the isolation the grades require (as for `grade`)")
    args = parser.parse_args(argv)
    assignment = resolve(given)  # several packs installed and none given: PackError, exit 2
    if args.seeds < 1:
        parser.error("--seeds must be 1 or more")
    refused = refuse_unless_isolated(args.unsafe_no_sandbox, prog="grade mutants", level=args.isolation)
    if refused is not None:
        return refused
    first = assignment.rubric.seed
    grader = sandboxed_grader(assignment, unsafe=args.unsafe_no_sandbox, isolation=args.isolation)
    with tempfile.TemporaryDirectory(prefix="grade-mutants-") as scratch:
        try:
            rows = grade_all(assignment, grader, seeds=range(first, first + args.seeds), only=args.only,
                             scratch=Path(scratch))
        except ValueError as error:
            print(f"grade mutants: {error}", file=sys.stderr)
            return 2
    print(table(rows))
    if not rows:
        print(f"grade mutants: {assignment.name} has no mutants ([assignment] mutants in its manifest)", file=sys.stderr)
    return 1 if any(row.missed for row in rows) else 0
