"""Checks: small functions with metadata, run against the student's code through the worker.

A check raises `CheckFailed` (wrong behaviour, with numbers and maybe a diagnosis), lets a
`StudentError` escape (the student's code raised), or returns normally (passed). Properties over
many inputs use `ctx.given(strategy)`: hypothesis draws the inputs from the grading seed, so a
regrade draws the same ones, and shrinks a failure to the smallest input that shows it.
"""

import hashlib
import time
from dataclasses import dataclass, field

import hypothesis
import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from graders.diagnoses import DIAGNOSES
from graders.oracles import OracleUnavailable
from graders.sandbox import StudentError, WorkerCrashed, WorkerTimeout

def draw_without_local_constants():
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

PASSED, FAILED, ERROR, SKIPPED, PENDING_MANUAL = "passed", "failed", "error", "skipped", "pending_manual"
PUBLIC, HIDDEN = "public", "hidden"


class CheckFailed(Exception):
    """The student's code ran but behaved wrongly."""

    def __init__(self, message, *, diagnosis=None, details=None, fraction=0.0, provisional_note=None):
        super().__init__(message)
        self.message = message
        self.diagnosis = diagnosis
        self.details = dict(details or {})
        self.fraction = fraction  # partial credit in [0, 1), for graded-by-degree checks
        self.provisional_note = provisional_note  # the score stands in for a check that could not run fully
        self.counterexample = None


class CheckSkipped(Exception):
    """The check cannot run (a prerequisite is missing); no points, no blame beyond the message."""


@dataclass
class CheckOutcome:
    """What a check may return to grade by degree (a fraction) or to attach numbers to a pass."""

    fraction: float = 1.0
    message: str | None = None
    details: dict = field(default_factory=dict)
    provisional_note: str | None = None


@dataclass(frozen=True)
class Check:
    id: str
    part: str
    title: str
    func: object
    visibility: str = PUBLIC
    manual: bool = False
    # The score rests (in part) on something the worker measured about the student's own code
    # (a requires_grad flag, a gradient reaching a module, the grad mode during a call): values the
    # student's code can forge, since it shares the worker's process. Reports say so.
    worker_measured: bool = False


REGISTRY: dict[str, list[Check]] = {}


def check(id, title, *, visibility=PUBLIC, manual=False, worker_measured=False):
    """Register a check. Its part is the first component of its id ("attention.rows_sum_to_one").
    `worker_measured`: its score rests on a measurement the worker makes about the student's code
    rather than on outputs the grader checks against its own answer (see docs/checks.md)."""

    def register(func):
        part = id.split(".", 1)[0]
        REGISTRY.setdefault(part, []).append(Check(id, part, title, func, visibility, manual, worker_measured))
        return func

    return register


def check_seed(seed, check_id):
    """A per-check seed, so a check's inputs do not depend on which checks ran before it."""
    digest = hashlib.sha256(f"{seed}:{check_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


class _StopShrinking(Exception):
    """A failure not worth shrinking (the worker died or hung, or a TODO is not done)."""

    def __init__(self, cause):
        super().__init__(str(cause))
        self.cause = cause


class Context:
    """What a check sees: the student (through the worker), the oracle, and the grading seed."""

    def __init__(self, student, oracle, seed, *, max_examples=20, answers=None, reference_answers=None, options=None):
        self.student = student
        self.oracle = oracle
        self.seed = seed
        self.max_examples = max_examples
        self.answers = answers  # the submission's answers.toml, parsed in the grader
        self.reference_answers = reference_answers or {}
        self.options = options or {}  # e.g. the fine-tuning data and encoder

    def given(self, *strategies, max_examples=None):
        """Decorator: run the property on hypothesis-drawn inputs now; raise the minimal failure."""

        def run(prop):
            failures = []
            stop = []

            def recorded(examples):
                if stop:  # after a crash or a TODO, every further example fails at once
                    raise stop[0]
                try:
                    prop(*examples)
                except OracleUnavailable:
                    hypothesis.reject()  # self-check mode: no golden answer recorded for this input
                except CheckFailed as failure:
                    failure.counterexample = _describe(examples)
                    failures.append(failure)
                    raise
                except StudentError as error:
                    if error.exc_type == "NotImplementedError":
                        stop.append(_StopShrinking(error))
                        raise stop[0] from None
                    error.counterexample = _describe(examples)
                    failures.append(error)
                    raise
                except (WorkerCrashed, WorkerTimeout) as error:
                    error.counterexample = _describe(examples)
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
                first = failures[0]
                if isinstance(first, CheckFailed):
                    first.message += " (not reproducible on a second run with the same input: the code is nondeterministic)"
                    if first.diagnosis is None:
                        first.diagnosis = "nondeterministic"
                raise first from None

        return run


def _describe(examples):
    return "; ".join(describe_value(example) for example in examples)


def describe_value(value, limit=600):
    """A short, readable rendering of an input: small tensors in full, large ones by shape."""
    if isinstance(value, torch.Tensor):
        if value.numel() <= 48:
            body = str(value.tolist())
        else:
            body = f"<{value.numel()} values>"
        return f"tensor{tuple(value.shape)} {str(value.dtype).replace('torch.', '')} {body}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={describe_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(describe_value(v) for v in value) + ")"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class CheckResult:
    check: Check
    status: str
    fraction: float
    message: str | None = None
    diagnosis: str | None = None
    counterexample: str | None = None
    details: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    provisional_note: str | None = None
    worker_failed: bool = False  # the worker died or hung during this check (not serialised)

    def to_json(self, max_score):
        diagnosis = None
        if self.diagnosis:
            diagnosis = {"id": self.diagnosis, "text": DIAGNOSES[self.diagnosis]}
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
        }


def run_check(chk, ctx, before=None):
    """Run one check and turn whatever happens into a CheckResult; never raises for student faults.
    `before` runs first inside the same protection (seeding the worker may meet a dead worker)."""
    started = time.perf_counter()
    try:
        if before:
            before()
        outcome = chk.func(ctx)
        if chk.manual and isinstance(outcome, CheckOutcome) and outcome.fraction is None:
            result = CheckResult(chk, PENDING_MANUAL, 0.0, outcome.message, details=outcome.details)
        elif isinstance(outcome, CheckOutcome):
            status = PASSED if outcome.fraction >= 1.0 else FAILED
            result = CheckResult(
                chk, status, outcome.fraction, outcome.message, details=outcome.details,
                provisional_note=outcome.provisional_note,
            )
        else:
            result = CheckResult(chk, PASSED, 1.0)
    except CheckFailed as failure:
        result = CheckResult(
            chk, FAILED, failure.fraction, failure.message, failure.diagnosis, failure.counterexample, failure.details,
            provisional_note=failure.provisional_note,
        )
    except CheckSkipped as skipped:
        result = CheckResult(chk, SKIPPED, 0.0, str(skipped))
    except OracleUnavailable as missing:
        result = CheckResult(chk, SKIPPED, 0.0, f"no golden answer recorded for {missing}: run `grade build`")
    except StudentError as error:
        result = student_error_result(chk, error)
    except WorkerTimeout as error:
        result = CheckResult(chk, ERROR, 0.0, f"timed out: {error}", "hangs", getattr(error, "counterexample", None),
                             worker_failed=True)
    except WorkerCrashed as error:
        result = CheckResult(chk, ERROR, 0.0, f"the worker running your code died: {error}", None,
                             getattr(error, "counterexample", None), worker_failed=True)
    result.elapsed_s = time.perf_counter() - started
    return result


def student_error_result(chk, error):
    details = {}
    if error.traceback:
        details["traceback"] = error.traceback
    if error.output:
        details["output"] = error.output
    if error.exc_type == "NotImplementedError":
        return CheckResult(chk, ERROR, 0.0, f"not implemented: {error.message}", details=details)
    message = f"your code raised {error.exc_type}: {error.message}"
    return CheckResult(chk, ERROR, 0.0, message, None, getattr(error, "counterexample", None), details)
