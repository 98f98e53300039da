"""`grade coverage`: what the grader's checks exercise of a pack's contract, proved on the reference.

The reference is graded as a submission, and every call the checks send to its code (constructs,
function and method calls) is bound to the signature of the contract it belongs to
(graders/checks/space.py). The report says, per callable and parameter, which values, shapes and
dtypes were given, whether each keyword took a value other than its default, whether one object
saw two input shapes, and which of the declared situations were produced and by which checks. A
gap is a line of it: a callable never called, a parameter never varied, a situation never
produced, a contract without its differential check. A course author runs it after writing or
changing a check; tests/test_coverage.py runs it for every pack.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graders.checks.contract import ForwardingStudent
from graders.checks.space import EVAL, TRAINING, Call, Contract, bind, defaults, differs_from_default, first_tensor, \
    resolve, signature_of

# The methods that set a torch module's mode, by their own names.
SETS_TRAINING, SETS_EVAL = torch.nn.Module.train.__name__, torch.nn.Module.eval.__name__
# How many distinct values of a parameter the report lists before it says "and N more".
SHOWN_VALUES = 8


@dataclass
class _Observed:
    """What the calls of one contract showed."""

    calls: int = 0
    checks: Counter = field(default_factory=Counter)
    values: dict = field(default_factory=lambda: defaultdict(Counter))  # parameter -> {summary: count}
    varied: set = field(default_factory=set)  # parameters given a value other than their default
    shapes: dict = field(default_factory=lambda: defaultdict(set))  # tensor parameter -> shapes
    instance_shapes: dict = field(default_factory=lambda: defaultdict(set))  # object -> input shapes
    situations: dict = field(default_factory=lambda: defaultdict(Counter))  # words -> {check: count}
    modes: Counter = field(default_factory=Counter)
    unbound: int = 0  # calls whose arguments do not fit the signature


def summary(value: Any) -> str:
    """A parameter's value as the report lists it: a tensor by dtype and shape, a number by itself,
    an object of the student's by its type."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{tuple(value.shape)}"
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 24 else text[:21] + "..."
    if isinstance(value, (list, tuple)):
        inner = ", ".join(summary(item) for item in value[:2])
        return f"{type(value).__name__} of {len(value)}" + (f" ({inner}{', ...' if len(value) > 2 else ''})"
                                                            if value else "")
    if isinstance(value, dict):
        return f"dict of {len(value)}"
    return f"<{getattr(value, 'type_name', type(value).__name__)}>"


def _identity(handle: Any) -> tuple:
    """One object of the student's, however many handles name it (the worker's id, or the
    in-process stand-in's object)."""
    if hasattr(handle, "id"):
        return ("worker", handle.id, getattr(handle, "generation", 0))
    return ("object", id(getattr(handle, "obj", handle)))


def _is_object(value: Any) -> bool:
    """A handle of an object on the student's side, not plain data."""
    return not isinstance(value, (type(None), bool, int, float, str, bytes, list, tuple, dict, torch.Tensor))


class CoverageRecorder:
    """Binds every call the checks send to the student's code to the pack's contracts. Thread-safe:
    a part graded in a worker of its own sends its calls from another thread."""

    def __init__(self, contracts: Sequence[Contract], module_of: Any) -> None:
        self.contracts = {contract.name: contract for contract in contracts}
        self.signatures = {}
        for contract in contracts:
            target, is_class = resolve(contract, module_of)
            self.signatures[contract.name] = signature_of(target, is_class)
        self.observed = {name: _Observed() for name in self.contracts}
        self.checks_run: list[str] = []
        self._modes: dict[tuple, str] = {}
        self._built: dict[tuple, dict] = {}  # object -> its constructor's arguments
        self._lock = threading.Lock()

    def observe(self, student: Any, check_id: str) -> ForwardingStudent:
        """`student` as the check `check_id` sees it, each of its calls recorded."""
        with self._lock:
            self.checks_run.append(check_id)
        return _Recording(student, self, check_id)

    def record(self, check_id: str, op: str, args: tuple, kwargs: dict, result: Any) -> None:
        with self._lock:
            if op == "construct":
                module, cls, *rest = args
                key = (check_id, _identity(result))
                self._modes[key] = TRAINING
                call = self._bind(f"{module}.{cls}", rest, kwargs, check_id)
                if call is not None:
                    # an argument that is itself an object the grader built (a model built from its
                    # settings object) stands for that object's constructor arguments, which a
                    # situation may read
                    self._built[key] = {name: self._built.get((check_id, _identity(value)), value)
                                        if _is_object(value) else value for name, value in call.arguments.items()}
            elif op == "task":
                name, *rest = args
                kwargs = {key: value for key, value in kwargs.items() if key != "timeout"}
                self._bind(name, rest, kwargs, check_id, task=True)
            elif op == "call":
                target, name, *rest = args
                if isinstance(target, str):
                    self._bind(f"{target}.{name}", rest, kwargs, check_id)
                    return
                key = (check_id, _identity(target))
                mode = self._modes.get(key)
                method = "forward" if name == "__call__" else name
                self._bind(f"{getattr(target, 'type_name', '?')}.{method}", rest, kwargs, check_id, mode, key,
                           built=self._built.get(key))
                if name == SETS_TRAINING:
                    self._modes[key] = TRAINING if (rest[0] if rest else kwargs.get("mode", True)) else EVAL
                elif name == SETS_EVAL:
                    self._modes[key] = EVAL

    def _bind(self, name: str, args: Iterable[Any], kwargs: dict, check_id: str, mode: str | None = None,
              instance: Any = None, task: bool = False, built: dict | None = None) -> Call | None:
        contract = self.contracts.get(name)
        if contract is None or contract.task != task:
            return None
        seen = self.observed[name]
        seen.calls += 1
        seen.checks[check_id] += 1
        call = bind(contract, self.signatures[name], args, kwargs, check_id, mode, instance, built)
        if call is None:
            seen.unbound += 1
            return None
        if mode:
            seen.modes[mode] += 1
        for parameter, value in call.arguments.items():
            seen.values[parameter][summary(value)] += 1
            if isinstance(value, torch.Tensor):
                seen.shapes[parameter].add((tuple(value.shape), str(value.dtype)))
        for parameter, default in defaults(self.signatures[name]).items():
            if parameter in call.given and differs_from_default(call.arguments[parameter], default):
                seen.varied.add(parameter)
        if instance is not None and (shape_of := first_tensor(call)) is not None:
            seen.instance_shapes[instance].add(tuple(shape_of.shape))
        for each in contract.situations:
            try:
                held = bool(each.holds(call))
            except Exception:  # noqa: BLE001 - a predicate that cannot read this call: it does not hold
                held = False
            if held:
                seen.situations[each.words][check_id] += 1
        return call


class _Recording(ForwardingStudent):
    def __init__(self, student: Any, recorder: CoverageRecorder, check_id: str) -> None:
        super().__init__(student)
        self.recorder = recorder
        self.check_id = check_id

    def forward(self, op: str, *args: Any, **kwargs: Any) -> Any:
        result = super().forward(op, *args, **kwargs)
        if op in ("construct", "call", "task"):
            self.recorder.record(self.check_id, op, args, kwargs, result)
        return result


# ------------------------------------------------------------------------------ the report


@dataclass(frozen=True)
class Gap:
    contract: str
    what: str  # one line: what was never exercised


def gaps(recorder: CoverageRecorder, registered: Iterable[str], given: dict[str, str] | None = None,
         public: Iterable[str] = ()) -> list[Gap]:
    """Every rule and situation of the contracts that no call met; `registered`: the ids of the
    checks that ran; `public`: the names the manifest says a student writes, each of which needs
    a contract (a method's counts for its class) or a reason in `given`."""
    registered = set(registered)
    found = []
    # a class is declared by its constructor's contract or a method's; "gpt.generate" by "gpt.GPT.generate"
    declared = {".".join(parts) for name in recorder.contracts
                for parts in [name.split(".")[:2], [name.split(".")[0], name.split(".")[-1]]]}
    for name in public:
        if name not in declared and name not in (given or {}):
            found.append(Gap(name, "no contract declares it (the pack's space module)"))
    for name, contract in recorder.contracts.items():
        seen = recorder.observed[name]
        signature = recorder.signatures[name]
        if contract.differential not in registered:
            found.append(Gap(name, f"its differential check {contract.differential} did not run"))
        elif not seen.checks[contract.differential]:
            found.append(Gap(name, f"its differential check {contract.differential} never called it"))
        if not seen.calls:
            found.append(Gap(name, "never called"))
            continue
        for parameter, default in defaults(signature).items():
            if parameter not in seen.varied and parameter not in contract.fixed:
                found.append(Gap(name, f"{parameter} never given a value other than its default {default!r}"))
        for parameter, shapes in seen.shapes.items():
            if len({shape for shape, _ in shapes}) < 2 and parameter not in contract.fixed:
                found.append(Gap(name, f"{parameter} given one shape only"))
        if contract.several_shapes and not any(len(shapes) >= 2 for shapes in seen.instance_shapes.values()):
            found.append(Gap(name, "no object was called on two input shapes"))
        for each in contract.situations:
            if not seen.situations[each.words]:
                found.append(Gap(name, f"never: {each.words}"))
    return found


def report_json(recorder: CoverageRecorder, found: Sequence[Gap]) -> dict[str, Any]:
    """The whole report as data (`grade coverage --json`)."""
    contracts = {}
    for name, contract in recorder.contracts.items():
        seen = recorder.observed[name]
        signature = recorder.signatures[name]
        parameters = {}
        for parameter in signature.parameters:
            values = seen.values.get(parameter, Counter())
            parameters[parameter] = {
                "values": sorted(values),
                "varied": parameter in seen.varied if parameter in defaults(signature) else None,
                "shapes": sorted({str(shape) for shape, _ in seen.shapes.get(parameter, ())}),
                "dtypes": sorted({dtype.removeprefix("torch.") for _, dtype in seen.shapes.get(parameter, ())}),
            }
        contracts[name] = {
            "differential": contract.differential,
            "calls": seen.calls,
            "unbound_calls": seen.unbound,
            "checks": dict(sorted(seen.checks.items())),
            "modes": dict(seen.modes),
            "largest_number_of_shapes_one_object_saw": max((len(s) for s in seen.instance_shapes.values()), default=0),
            "parameters": parameters,
            "situations": {each.words: dict(sorted(seen.situations[each.words].items())) for each in contract.situations},
            "fixed": dict(contract.fixed),
        }
    return {"contracts": contracts, "gaps": [{"contract": g.contract, "what": g.what} for g in found],
            "checks_run": sorted(set(recorder.checks_run))}


def _listing(values: Counter | Sequence[str]) -> str:
    names = sorted(values)
    shown = ", ".join(names[:SHOWN_VALUES])
    return shown + (f", and {len(names) - SHOWN_VALUES} more" if len(names) > SHOWN_VALUES else "")


def report_text(recorder: CoverageRecorder, found: Sequence[Gap], assignment_name: str) -> str:
    """The report as `grade coverage` prints it: a block per callable, then the gaps."""
    lines = [f"Coverage of the {assignment_name} contract by its checks, graded on the reference", ""]
    by_contract = defaultdict(list)
    for gap in found:
        by_contract[gap.contract].append(gap.what)
    for name, contract in recorder.contracts.items():
        seen = recorder.observed[name]
        signature = recorder.signatures[name]
        status = "GAP" if by_contract.get(name) else "ok"
        lines.append(f"{name}  [{status}]  {seen.calls} calls from {len(seen.checks)} checks; "
                     f"differential: {contract.differential}")
        if seen.modes:
            lines.append(f"    modes: {', '.join(f'{mode} {count}' for mode, count in sorted(seen.modes.items()))}")
        if contract.several_shapes:
            most = max((len(s) for s in seen.instance_shapes.values()), default=0)
            lines.append(f"    one object saw up to {most} input shapes")
        default_of = defaults(signature)
        for parameter in signature.parameters:
            shapes = seen.shapes.get(parameter)
            if shapes:
                dtypes = sorted({dtype.removeprefix("torch.") for _, dtype in shapes})
                described = f"{len({s for s, _ in shapes})} shapes, {', '.join(dtypes)}"
                others = [v for v in seen.values.get(parameter, ()) if not v[:1].isalpha() or v == "None"]
                if others:
                    described += f"; also {_listing(others)}"
            else:
                described = _listing(seen.values.get(parameter, Counter())) or "never given"
            if parameter in default_of:
                mark = ("fixed: " + contract.fixed[parameter]) if parameter in contract.fixed else \
                    "varied" if parameter in seen.varied else f"DEFAULT ONLY ({default_of[parameter]!r})"
                described += f"  [{mark}]"
            lines.append(f"    {parameter}: {described}")
        for each in contract.situations:
            hits = seen.situations[each.words]
            where = ", ".join(f"{check} {count}" for check, count in sorted(hits.items())[:3])
            more = f", and {len(hits) - 3} more checks" if len(hits) > 3 else ""
            lines.append(f"    {'+' if hits else 'NEVER'} {each.words}" + (f": {where}{more}" if hits else ""))
        lines.append("")
    if found:
        lines.append(f"{len(found)} gap{'s' if len(found) != 1 else ''}:")
        lines.extend(f"  {gap.contract}: {gap.what}" for gap in found)
    else:
        lines.append("no gaps: every callable, parameter and situation of the contract was exercised")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ grading the reference


def record_reference(assignment: Any, *, parts: Sequence[str] | None = None, without: Iterable[str] = (),
                     unsafe: bool = False, isolation: str = "full", progress: Any = None) -> CoverageRecorder:
    """Grade a copy of the pack's reference as a submission in the sandboxed worker, as `grade`
    does, and record every call its checks send (the checks in `without` left out)."""
    from graders.grading import grade

    contracts = assignment.contracts()
    assignment.import_tasks()  # the contracts of tasks take their signatures from the registry
    recorder = CoverageRecorder(contracts, assignment.reference_module)
    left_out = set(without)
    with tempfile.TemporaryDirectory(prefix="grade-coverage-") as scratch:
        copy = Path(scratch) / "reference"
        shutil.copytree(assignment.reference_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
        grade(copy, assignment=assignment, only_parts=list(parts) if parts else None, unsafe=unsafe,
              isolation=isolation, progress=progress, observe=recorder.observe,
              leave_out=left_out)
    return recorder


def public_names(assignment: Any) -> list[str]:
    """"module.Name" of every public name the manifest says a student's module defines."""
    return [f"{file.removesuffix('.py')}.{name}" for file, names in assignment.modules.items()
            if file.endswith(".py") for name in names]


def cmd_coverage(argv: list[str], given: str | None = None) -> int:
    """`grade coverage`: the pack's contract as its checks exercise it on the reference; exit 1 on a gap."""
    from graders.assignment import PackError, resolve as resolve_pack
    from graders.options import command_parser
    from graders.sandbox.isolation import refuse_unless_isolated

    parser = command_parser("grade coverage", "What an assignment pack's checks exercise of its contract, graded on "
                                              "the reference: exit 1 on a gap.")
    parser.add_argument("--parts", nargs="+", default=None, metavar="PART", help="grade only these parts")
    parser.add_argument("--without", nargs="+", default=(), metavar="CHECK",
                        help="leave these checks out (what would be left uncovered without them)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade without isolation (the reference is your own code)")
    parser.add_argument("--isolation", choices=("full", "container"), default="full",
                        help="the isolation the grade requires (as for `grade`)")
    args = parser.parse_args(argv)
    assignment = resolve_pack(given)
    if assignment.space_module is None:
        print(f"grade coverage: {assignment.name} declares no contract ([assignment] space in its manifest; "
              "docs/authoring.md)", file=sys.stderr)
        return 2
    known = {chk.id for checks in assignment.registry().values() for chk in checks}
    unknown = sorted(set(args.without) - known)
    if unknown:
        print(f"grade coverage: {assignment.name} has no check {', '.join(unknown)}", file=sys.stderr)
        return 2
    part_ids = {part.id for part in assignment.rubric.parts}
    if args.parts and (bad := sorted(set(args.parts) - part_ids)):
        print(f"grade coverage: {assignment.name} has no part {', '.join(bad)} (it has {', '.join(sorted(part_ids))})",
              file=sys.stderr)
        return 2
    refused = refuse_unless_isolated(args.unsafe_no_sandbox, prog="grade coverage", level=args.isolation)
    if refused is not None:
        return refused
    try:
        assignment.contracts()
    except PackError as error:
        print(f"grade coverage: {error}", file=sys.stderr)
        return 2
    print(f"grade coverage: grading the {assignment.name} reference and recording every call ...", file=sys.stderr)
    recorder = record_reference(assignment, parts=args.parts, without=args.without, unsafe=args.unsafe_no_sandbox,
                                isolation=args.isolation)
    selected = [part for part in assignment.rubric.parts if not args.parts or part.id in args.parts]
    ran = {chk.id for part in selected for chk in assignment.registry().get(part.id, []) if chk.id not in args.without}
    found = gaps(recorder, ran, assignment.given_names(), public_names(assignment) if not args.parts else ())
    if args.parts:  # the contracts of other parts were not meant to be exercised
        found = [gap for gap in found if _contract_in_parts(gap.contract, recorder, ran)]
    print(report_text(recorder, found, assignment.name))
    if args.json is not None:
        args.json.write_text(json.dumps(report_json(recorder, found), indent=1, sort_keys=True))
    return 1 if found else 0


def _contract_in_parts(name: str, recorder: CoverageRecorder, ran: set[str]) -> bool:
    return recorder.contracts[name].differential in ran

