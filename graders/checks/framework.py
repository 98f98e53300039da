"""Checks: small functions with metadata, run against the student's code through the worker.

A check raises `CheckFailed` (wrong behaviour, with numbers and maybe a diagnosis), lets a
`StudentError` escape (the student's code raised), or returns normally (passed). Properties over
many inputs use `ctx.given(strategy)`: hypothesis draws the inputs from the grading seed, so a
regrade draws the same ones, and shrinks a failure to the smallest input that shows it.

Whatever a check raises becomes its result: `run_check` never lets an exception out. A value the
student's code returned that cannot be used at all (None from a stub ending in `pass`, a list
where a tensor belongs, an object kept in the worker) is an `error`, not a crash of the grade:
checks validate such values with `expect_tensor` / `expect_tuple` (graders/checks/compare.py),
which raise `UnusableReturn`, and any other exception of the check's own code is caught here and
reported from what the student's code last returned (`describe_returned`), with the grader's
traceback kept in `details["grader_traceback"]` for whoever maintains the check.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import inspect
import math
import re
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, HypothesisException, Unsatisfiable

from graders.checks.contract import ForwardingStudent, Oracle, Status, StudentCode, Visibility
from graders.diagnoses import DIAGNOSES
from graders.oracles import OracleUnavailable
from graders.sandbox import (
    BudgetExhausted,
    Handle,
    MissingDependency,
    ProtocolError,
    RequestError,
    SandboxError,
    StudentError,
    WorkerCrashed,
    WorkerTimeout,
)


def draw_without_local_constants() -> bool:
    """Make hypothesis's draws depend on the seed alone, not on what this process imported.

    hypothesis (6.13x and later) mixes literals found in every *local* module loaded in the
    process (code outside site-packages and the standard library) into its draws. Which
    modules are loaded (the CLI imports the report renderers early, pytest imports the
    homework's conftest.py) and where the grader lives (a checkout, or site-packages once
    installed from the bundle) then change the inputs drawn from the same seed, and the golden
    answers recorded for `grade build` are not found for them. With this, only hypothesis's
    own constants are used, the same everywhere for one hypothesis version (pinned by the
    bundle). Returns whether the switch was applied (False on a hypothesis without it)."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a hypothesis without that module
        return False
    if not (hasattr(providers, "_get_local_constants") and hasattr(providers, "Constants")):
        return False
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    return True


draw_without_local_constants()

PASSED, FAILED, ERROR, SKIPPED, PENDING_MANUAL = (Status.PASSED, Status.FAILED, Status.ERROR, Status.SKIPPED,
                                                   Status.PENDING_MANUAL)
PUBLIC, HIDDEN = Visibility.PUBLIC, Visibility.HIDDEN


class CheckFailed(Exception):
    """The student's code ran but behaved wrongly."""

    def __init__(self, message: str, *, diagnosis: str | None = None, details: dict[str, Any] | None = None,
                 fraction: float = 0.0, locate: Callable[[], str | None] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.diagnosis = diagnosis
        self.details = dict(details or {})
        self.fraction = fraction  # partial credit in [0, 1), for graded-by-degree checks
        self.counterexample: str | None = None
        # says where in the student's module the failure arises (graders/checks/localise.py):
        # asked once, for the final (shrunk) failure, never to score
        self.locate = locate


class UnusableReturn(CheckFailed):
    """The student's code returned something the check cannot use at all (None, a wrong type, an
    object that stayed in the worker): the check reports an `error`, with no partial credit."""

    def __init__(self, message: str, *, diagnosis: str = "returns_wrong_type",
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message, diagnosis=diagnosis, details=details)


def is_unusable(failure: CheckFailed) -> bool:
    """A failure that means "could not use the returned value" (also the checks' own
    `CheckFailed(..., diagnosis="returns_wrong_type")`) is an error, not a wrong answer."""
    return isinstance(failure, UnusableReturn) or failure.diagnosis == "returns_wrong_type"


class CheckSkipped(Exception):
    """The check cannot run (a prerequisite is missing); no points, no blame beyond the message."""


@dataclass
class CheckOutcome:
    """What a check may return to grade by degree (a fraction) or to attach numbers to a pass."""

    fraction: float | None = 1.0  # None: a written answer, graded by hand
    message: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    id: str
    part: str
    title: str
    func: Callable[[Context], CheckOutcome | None]
    visibility: Visibility = PUBLIC
    manual: bool = False
    # The score rests (in part) on something the worker measured about the student's own code
    # (a requires_grad flag, a gradient reaching a module, the grad mode during a call): values the
    # student's code can forge, since it shares the worker's process. Reports say so.
    worker_measured: bool = False
    # options -> why its score is provisional under them (it stands in for a check that cannot
    # run there: smoke-mode fine-tuning), or None. Whatever the outcome, the student's code
    # raising or not being importable included.
    provisional: Callable[[dict[str, Any]], str | None] | None = None


REGISTRY: dict[str, list[Check]] = {}
# {package of a pack's checks: the pack's diagnoses}, filled when a pack's checks are imported
# (graders/assignment.py). Packs graded in one process keep their own texts, even for one id.
CATALOGUES: dict[str, dict[str, str]] = {}


def diagnosis_text(chk: Check, diagnosis: str) -> str:
    """What a diagnosis says, from the catalogue of the pack `chk` belongs to, else the engine's."""
    module = chk.func.__module__
    for package, catalogue in CATALOGUES.items():
        if module.startswith(package + ".") and diagnosis in catalogue:
            return catalogue[diagnosis]
    return DIAGNOSES[diagnosis]


CheckFunction = Callable[["Context"], "CheckOutcome | None"]


def check(id: str, title: str, *, visibility: Visibility = PUBLIC, manual: bool = False, worker_measured: bool = False,
          provisional: Callable[[dict[str, Any]], str | None] | None = None) -> Callable[[CheckFunction], CheckFunction]:
    """Register a check. Its part is the first component of its id ("layer.output_shape").
    `worker_measured`: its score rests on a measurement the worker makes about the student's code
    rather than on outputs the grader checks against its own answer (see docs/checks.md).
    `provisional`: see `Check.provisional`."""

    def register(func: CheckFunction) -> CheckFunction:
        part = id.split(".", 1)[0]
        REGISTRY.setdefault(part, []).append(Check(id, part, title, func, visibility, manual, worker_measured,
                                                   provisional))
        return func

    return register


def check_seed(seed: int, check_id: str) -> int:
    """A per-check seed, so a check's inputs do not depend on which checks ran before it."""
    digest = hashlib.sha256(f"{seed}:{check_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


class _StopShrinking(Exception):
    """A failure not worth shrinking (the worker died or hung, or a TODO is not done)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Context:
    """What a check sees: the student (through the worker), the oracle, and the grading seed."""

    def __init__(self, student: StudentCode, oracle: Oracle, seed: int, *, max_examples: int = 20,
                 answers: dict[str, Any] | None = None, reference_answers: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None, note: Callable[[str], None] | None = None) -> None:
        self.student = student
        self.oracle = oracle
        self.seed = seed
        self.max_examples = max_examples
        self.answers = answers  # the submission's questions file, parsed in the grader
        self.reference_answers = reference_answers or {}
        self.options = options or {}  # e.g. the fine-tuning data and encoder
        self._note = note

    def note(self, text: str) -> None:
        """Say how a long check is getting on (`grade` prints it on stderr); nothing otherwise."""
        if self._note is not None:
            self._note(text)

    def given(self, *strategies: st.SearchStrategy[Any],
              max_examples: int | None = None) -> Callable[[Callable[..., None]], None]:
        """Decorator: run the property on hypothesis-drawn inputs now; raise the minimal failure."""

        def run(prop: Callable[..., None]) -> None:
            names = list(inspect.signature(prop).parameters)  # to name the parts of a counterexample
            failures: list[CheckFailed | StudentError] = []
            stop: list[_StopShrinking] = []

            def recorded(examples: tuple[Any, ...]) -> None:
                if stop:  # after a crash or a TODO, every further example fails at once
                    raise stop[0]
                try:
                    prop(*examples)
                except OracleUnavailable:
                    hypothesis.reject()  # self-check mode: no golden answer recorded for this input
                except CheckFailed as failure:
                    failure.counterexample = _describe(examples, names)
                    failures.append(failure)
                    raise
                except StudentError as error:
                    if error.exc_type == "NotImplementedError":
                        stop.append(_StopShrinking(error))
                        raise stop[0] from None
                    error.counterexample = _describe(examples, names)
                    failures.append(error)
                    raise
                except SandboxError as error:  # the worker died, hung, or sent garbage
                    error.counterexample = _describe(examples, names)
                    stop.append(_StopShrinking(error))
                    raise stop[0] from None
                except (HypothesisException, CheckSkipped):
                    raise
                except Exception as error:  # noqa: BLE001 - the check could not use a returned value
                    # Not worth shrinking (each step would call the student's code again, to the
                    # same end): run_check reports it from what the student's code returned.
                    _attach_counterexample(error, examples, names)
                    stop.append(_StopShrinking(error))
                    raise stop[0] from None

            test = hypothesis.given(st.tuples(*strategies))(recorded)
            test = settings(
                max_examples=max_examples or self.max_examples,
                deadline=None,
                database=None,
                derandomize=False,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
                print_blob=False,
                verbosity=hypothesis.Verbosity.quiet,
            )(test)
            test = hypothesis.seed(self.seed)(test)
            try:
                test()
            except _StopShrinking as stopped:
                raise stopped.cause from None
            except Flaky:
                # The student's code gave different answers for the same input: report the failure
                # hypothesis saw first, and say why it could not be replayed.
                if not failures:
                    raise
                first = failures[0]
                if isinstance(first, CheckFailed):
                    first.message += " (not reproducible on a second run with the same input: the code is nondeterministic)"
                    if first.diagnosis is None:
                        first.diagnosis = "nondeterministic"
                raise first from None

        return run


def _attach_counterexample(error: BaseException, examples: Sequence[Any], names: Sequence[str]) -> None:
    try:
        setattr(error, "counterexample", _describe(examples, names))  # noqa: B010 - any exception type
    except Exception:  # noqa: BLE001 - an exception type that takes no attributes
        pass


def _describe(examples: Sequence[Any], names: Sequence[str] = ()) -> str:
    """The input of a failing property, each part named: by its own fields (a named tuple), by
    its own words (an input class's repr), or else by the property's parameter name."""
    described = []
    for index, example in enumerate(examples):
        if _fields(example) or _has_own_repr(example):
            described.append(describe_value(example, top=True))
        elif index < len(names):
            described.append(f"{names[index]}={describe_value(example)}")
        else:
            described.append(describe_value(example))
    return "; ".join(described)


def _fields(value: Any) -> tuple[str, ...] | None:
    return getattr(value, "_fields", None) if isinstance(value, tuple) else None


def _has_own_repr(value: Any) -> bool:
    """An input class that words itself ("q, k, v of shape (B=1, ...)"), not a generated repr."""
    return dataclasses.is_dataclass(value) and not hasattr(type(value).__repr__, "__wrapped__")


def describe_value(value: Any, limit: int = 600, top: bool = False) -> str:
    """A short, readable rendering of an input: fields by name, small tensors in full with their
    numbers rounded to 4 decimals, large ones by dtype and shape. `top`: no parentheses around
    a named tuple's fields."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        if value.numel() > 48:
            return f"{dtype} tensor of shape {tuple(value.shape)}"
        numbers = value.detach().cpu()
        if numbers.is_floating_point():
            numbers = numbers.double().round(decimals=4)
        return f"{numbers.tolist()} ({dtype}, shape {tuple(value.shape)})"
    if isinstance(value, float):
        return f"{value:.4g}"
    fields = _fields(value)
    if fields:
        text = ", ".join(f"{name}={describe_value(item)}" for name, item in zip(fields, value))
        return text if top else f"({text})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={describe_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(describe_value(v) for v in value) + ")"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n[ \t]+([^\n]+)')


def student_line(error: StudentError) -> str:
    """" (in <function>, <file> line <n>: <code>)" of the last frame of the student's code in the
    traceback of their exception, or "" (for a failure that says where the student's code raised)."""
    frames = [f for f in _FRAME.findall(error.traceback or "")
              if "site-packages" not in f[0] and "/torch/" not in f[0] and "/graders/" not in f[0]]
    if not frames:
        return ""
    path, line, function, code = frames[-1]
    return f" (in {function}, {path.rsplit('/', 1)[-1]} line {line}: {code.strip()})"


def describe_returned(value: Any, depth: int = 0) -> str:
    """What the student's code returned, in words a student reads: "None", "a list of 3 values",
    "a tensor of shape (2, 4) and dtype float32 holding NaN", "an object of type MyModel that
    stays in the worker (not a tensor or a plain value)". Bounded in size and depth."""
    if value is None:
        return "None"
    if isinstance(value, Handle) or type(value).__name__ == "Handle":
        type_name = getattr(value, "type_name", "?")
        return f"an object of type {type_name} that stays in the worker (not a tensor or a plain value)"
    if isinstance(value, torch.Tensor):
        text = f"a tensor of shape {tuple(value.shape)} and dtype {str(value.dtype).replace('torch.', '')}"
        if value.device.type != "cpu":
            text += f" on {value.device}"
        try:
            if value.is_floating_point() and value.numel():
                if torch.isnan(value).any():
                    text += " holding NaN"
                elif torch.isinf(value).any():
                    text += " holding inf"
        except Exception:  # noqa: BLE001 - a tensor that cannot be inspected (meta device)
            pass
        return text
    if isinstance(value, bool):
        return f"the bool {value}"
    if isinstance(value, (int, float)):
        text = repr(value)
        return f"the {type(value).__name__} {text if len(text) <= 40 else text[:40] + '...'}"
    if isinstance(value, str):
        return f"the string {value[:60]!r}" + ("..." if len(value) > 60 else "")
    if isinstance(value, (tuple, list)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        if not value:
            return f"an empty {kind}"
        if depth >= 1:
            return f"a {kind} of {len(value)} values"
        items = ", ".join(describe_returned(item, depth + 1) for item in value[:3])
        more = f", ... ({len(value)} in all)" if len(value) > 3 else ""
        return f"a {kind} of {len(value)} value{'s' if len(value) != 1 else ''} ({items}{more})"
    if isinstance(value, dict):
        keys = ", ".join(repr(k)[:30] for k in list(value)[:5]) + (", ..." if len(value) > 5 else "")
        return f"a dict with {len(value)} key{'s' if len(value) != 1 else ''}" + (f" ({keys})" if value else "")
    return f"a value of type {type(value).__name__}"


class _Recorder(ForwardingStudent):
    """`ctx.student` as run_check hands it to a check: the same requests, and a note of the last
    values the student's code returned, to explain a check that could not use one of them."""

    RECORDED = frozenset({"construct", "call", "getattr", "task", "state_dict", "load_state_dict", "parameters"})

    def __init__(self, student: StudentCode) -> None:
        super().__init__(student)
        self.returned: collections.deque[tuple[str, Any]] = collections.deque(maxlen=8)  # (what was called, value)

    def forward(self, op: str, *args: Any, **kwargs: Any) -> Any:
        value = super().forward(op, *args, **kwargs)
        if op in self.RECORDED:
            label = _call_label(op, args)
            self.returned.append((label, value))
            if op == "parameters":
                _expect_buildable(value, label)
        return value

    def culprit(self) -> tuple[str, Any] | None:
        """The returned value most likely to have stopped the check: the latest None (a stub
        ending in `pass`, a missing `return`), else the latest value."""
        for label, value in reversed(self.returned):
            if value is None:
                return label, value
        return self.returned[-1] if self.returned else None


# Checks build tensors in the grader from the shapes a model reports (grader-chosen weights):
# a model in the worker may report any shape (a parameter on the meta device costs it nothing).
MAX_REPORTED_ELEMENTS = 2**28


def _expect_buildable(listing: Any, label: str) -> None:
    """The shapes a `parameters` answer lists are sizes, and not more values than the grader builds."""
    if not isinstance(listing, dict):
        return  # the client checked the listing's structure; a stand-in may not have
    total = 0
    for entry in [*listing.get("parameters", ()), *listing.get("buffers", ())]:
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, (list, tuple)) or not all(type(size) is int and size >= 0 for size in shape):
            raise UnusableReturn(f"{label} lists {entry.get('name')!r} with the shape {shape!r}:"[:300]
                                 + " not a list of sizes")
        total += math.prod(shape)
    if total > MAX_REPORTED_ELEMENTS:
        raise UnusableReturn(f"{label} lists {total:,} parameter and buffer values, more than the grader builds "
                             f"({MAX_REPORTED_ELEMENTS:,}); is a size wrong?")


def _call_label(op: str, args: Sequence[Any]) -> str:
    def owner(target: Any) -> str:
        if isinstance(target, str):
            return target
        return getattr(target, "type_name", type(target).__name__)

    try:
        if op == "construct":
            return f"{args[0]}.{args[1]}(...)"
        if op in ("call", "getattr"):
            name = "forward" if args[1] == "__call__" else args[1]
            return f"{owner(args[0])}.{name}" + ("" if op == "getattr" else "(...)")
        if op == "task":
            return f"your code, run by the grader's {args[0]!r} step,"
        return f"{owner(args[0])}.{op}()"
    except (IndexError, TypeError):
        return f"a {op} request"


def unusable_return_result(chk: Check, error: BaseException, recorder: _Recorder | None) -> CheckResult:
    """ERROR for an exception of the check's own code: the student's code most likely returned
    something the check could not use. The grader's traceback goes to details, for developers."""
    details = {
        "grader_error": f"{type(error).__name__}: {error}"[:2000],
        "grader_traceback": "".join(traceback.format_exception(error))[-8000:],
    }
    culprit = recorder.culprit() if recorder is not None else None
    if culprit is None:
        message = ("the grader could not complete this check (an internal error of the check, not of your code: "
                   f"{type(error).__name__}); please tell the course staff")
        return CheckResult(chk, ERROR, 0.0, message, None, getattr(error, "counterexample", None), details)
    label, value = culprit
    described = describe_returned(value)
    details["got"] = described
    message = f"the grader could not use what your code returned: {label} returned {described}"
    if value is None and not label.startswith("your code, run by"):
        message += " (is its body still a stub such as `pass`, or is a `return` missing?)"
    return CheckResult(chk, ERROR, 0.0, message, "returns_wrong_type", getattr(error, "counterexample", None), details)


@dataclass
class CheckResult:
    check: Check
    status: Status
    fraction: float
    message: str | None = None
    diagnosis: str | None = None
    counterexample: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    provisional_note: str | None = None
    worker_failed: bool = False  # the worker died or hung during this check (not serialised)

    def to_json(self, max_score: float) -> dict[str, Any]:
        diagnosis = None
        if self.diagnosis:
            diagnosis = {"id": self.diagnosis, "text": diagnosis_text(self.check, self.diagnosis)}
        return {
            "id": self.check.id,
            "title": self.check.title,
            "status": self.status,
            "score": round(max_score * self.fraction, 4),
            "max_score": max_score,
            "visibility": self.check.visibility,
            "message": self.message,
            "diagnosis": diagnosis,
            "counterexample": self.counterexample,
            "details": self.details,
            "worker_measured": self.check.worker_measured,
            "graded_by_hand": self.check.manual,
        }


def run_check(chk: Check, ctx: Context, before: Callable[[], None] | None = None) -> CheckResult:
    """Run one check and turn whatever happens into a CheckResult; never raises (but for
    KeyboardInterrupt and the like). `before` runs first inside the same protection (seeding the
    worker may meet a dead worker)."""
    started = time.perf_counter()
    student = ctx.student
    recorder = ctx.student = _Recorder(student) if student is not None else None
    try:
        result = _run(chk, ctx, before, recorder)
    finally:
        ctx.student = student
    result.elapsed_s = time.perf_counter() - started
    return result


def _run(chk: Check, ctx: Context, before: Callable[[], None] | None, recorder: _Recorder | None) -> CheckResult:
    try:
        if before:
            before()
        outcome = chk.func(ctx)
        if not isinstance(outcome, CheckOutcome):
            return CheckResult(chk, PASSED, 1.0)
        if outcome.fraction is None:
            if not chk.manual:
                raise TypeError(f"{chk.id} returned no fraction, which only a check graded by hand may")
            return CheckResult(chk, PENDING_MANUAL, 0.0, outcome.message, details=outcome.details)
        status = PASSED if outcome.fraction >= 1.0 else FAILED
        return CheckResult(chk, status, outcome.fraction, outcome.message, details=outcome.details)
    except CheckFailed as failure:
        unusable = is_unusable(failure)
        message = failure.message
        if (unusable and not isinstance(failure, UnusableReturn) and recorder is not None
                and (culprit := recorder.culprit())):
            label, value = culprit  # a check's own "must return ...": say what came back
            if describe_returned(value) not in message:
                message = f"{message}; {label} returned {describe_returned(value)}"
        where = _where(failure)
        if where:
            message = f"{message}; where: {where}"
            failure.details["where"] = where
        return CheckResult(
            chk, ERROR if unusable else FAILED, 0.0 if unusable else failure.fraction, message,
            failure.diagnosis, failure.counterexample, failure.details,
        )
    except CheckSkipped as skipped:
        return CheckResult(chk, SKIPPED, 0.0, str(skipped))
    except OracleUnavailable as missing:
        return CheckResult(chk, SKIPPED, 0.0, f"no golden answer recorded for {missing}: run `grade build`")
    except Unsatisfiable:
        return CheckResult(chk, SKIPPED, 0.0, "no golden answer recorded for the inputs of this check: run `grade build`")
    except StudentError as error:
        return student_error_result(chk, error)
    except MissingDependency as error:
        return environment_result(chk, error)
    except BudgetExhausted as error:
        return CheckResult(chk, ERROR, 0.0,
                           f"not run to the end: {error} (the total time all calls into your code may take)", "hangs",
                           getattr(error, "counterexample", None), _output_details(error), worker_failed=True)
    except WorkerTimeout as error:
        return CheckResult(chk, ERROR, 0.0, f"timed out: {error}", "hangs", getattr(error, "counterexample", None),
                           worker_failed=True)
    except WorkerCrashed as error:
        return CheckResult(chk, ERROR, 0.0, f"the worker running your code died: {error}", None,
                           getattr(error, "counterexample", None), worker_failed=True)
    except ProtocolError as error:
        message = (f"the worker running your code stopped answering in the expected format ({error}); "
                   "does your code write to files or pipes it did not open itself?")
        return CheckResult(chk, ERROR, 0.0, message, None, getattr(error, "counterexample", None),
                           _output_details(error), worker_failed=True)
    except RequestError as error:
        message = f"the grader could not complete this check: {error}"
        details = {**_output_details(error), "grader_error": f"RequestError: {error}"}
        return CheckResult(chk, ERROR, 0.0, message, None, getattr(error, "counterexample", None), details)
    except SandboxError as error:
        return CheckResult(chk, ERROR, 0.0, f"running your code failed: {error}", None,
                           getattr(error, "counterexample", None), _output_details(error), worker_failed=True)
    except Exception as error:  # noqa: BLE001 - the check's own code failed on what the student returned
        return unusable_return_result(chk, error, recorder)


def _where(failure: CheckFailed) -> str | None:
    """What `failure.locate` says; nothing when it fails (it only ever adds words to a failure)."""
    if failure.locate is None:
        return None
    try:
        return failure.locate()
    except Exception:  # noqa: BLE001 - the student's code may break a second run in any way
        return None


def _output_details(error: BaseException) -> dict[str, str]:
    output = getattr(error, "output", "")
    return {"output": output} if output else {}


def environment_result(chk: Check, error: MissingDependency) -> CheckResult:
    """SKIPPED for a check that could not run because the grader's environment lacks one of its
    dependencies: the message names it and the command that installs it, and blames nobody's code."""
    return CheckResult(chk, SKIPPED, 0.0, f"not run: {error}",
                       details={"environment": {"missing": error.module, "fix": str(error)}})


def student_error_result(chk: Check, error: StudentError) -> CheckResult:
    details = {}
    if error.traceback:
        details["traceback"] = error.traceback
    if error.output:
        details["output"] = error.output
    if error.exc_type == "NotImplementedError":
        return CheckResult(chk, ERROR, 0.0, f"not implemented: {error.message}", details=details)
    message = f"your code raised {error.exc_type}: {error.message}"
    where = student_line(error)
    if where and where.strip(" ()") not in message:  # a check's own explanation may have said it already
        message += where
    return CheckResult(chk, ERROR, 0.0, message, None, getattr(error, "counterexample", None), details)
