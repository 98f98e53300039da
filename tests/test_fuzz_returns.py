"""Every grade completes, whatever the student's code returns.

Every check of graders.checks.REGISTRY is driven with student code whose functions and methods
return arbitrary values (None, wrong types, wrong shapes, NaN/inf tensors, huge ints, deeply
nested lists, objects that stay in the worker), raise, or make the worker fail (garbage on the
reply pipe, a crash, a timeout, a used-up budget, a refused request). Each check must give a
CheckResult with a valid status, never raise, and say something a student can act on; the
results dict of a whole grade must validate against results.schema.json.

The bulk runs in process (tests/checks_inprocess.py, with stub modules in place of a
submission); a few cases go through the real sandbox with `grade()`.

The values are drawn by a seeded `random.Random`, not by hypothesis: the checks run their own
hypothesis properties, and a @given test around them would nest one hypothesis run in another.
"""

import json
import math
import random
import shutil
import tomllib
from pathlib import Path

import jsonschema
import numpy
import pytest
import torch

import graders
from tests.course import HOMEWORK, REFERENCE_DIR, REGISTRY, TEMPLATE_DIR
from graders.checks.framework import (ERROR, FAILED, PASSED, PENDING_MANUAL, SKIPPED, CheckResult, Context,
                                      check_seed, run_check)
from graders.grading import grade, part_json
from graders.oracles import ReferenceOracle
from graders.sandbox import BudgetExhausted, Limits, ProtocolError, RequestError, WorkerCrashed, WorkerTimeout
from tests.checks_inprocess import InProcessStudent, _out, _student

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Using a non-tuple sequence for multidimensional indexing")]

STATUSES = {PASSED, FAILED, ERROR, SKIPPED, PENDING_MANUAL}
SCHEMA = json.loads((Path(graders.__file__).parent / "schemas" / "results.schema.json").read_text())
REFERENCE_ANSWERS = tomllib.loads((REFERENCE_DIR / "answers.toml").read_text())
ALL_CHECKS = [chk for checks in REGISTRY.values() for chk in checks]
CODE_CHECKS = [chk for chk in ALL_CHECKS if chk.part != "answers"]  # answers.toml is data, never run
# Python's own words for a check that tripped over a returned value: never a student's message.
RAW_PYTHON = ("object is not subscriptable", "object is not iterable", "has no attribute", "NoneType",
              "unsupported operand", "Traceback (most recent call last)")


# ---------------------------------------------------------------- arbitrary values


def tensor(rng, *, fill=None):
    dtype = rng.choice([torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                        torch.uint8, torch.bool])
    shape = tuple(rng.choice([0, 1, 2, 3, 5]) for _ in range(rng.randint(0, 4)))
    values = torch.randn(shape, generator=torch.Generator().manual_seed(rng.randrange(2**31))) * 10
    if fill is not None:
        values = torch.full(shape, fill)
    elif values.numel() and rng.random() < 0.3:
        values.view(-1)[0] = rng.choice([math.nan, math.inf, -math.inf])
    return values.to(dtype) if dtype.is_floating_point else values.nan_to_num(0.0).clamp(-100, 100).to(dtype)


def nested_list(depth):
    value = [1]
    for _ in range(depth):
        value = [value]
    return value


def arbitrary(rng, depth=0):
    """One value as the worker could hand it back (plain data, tensors) or keep (an object)."""
    kind = rng.randrange(17 if depth < 2 else 12)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 7, 2**80, -(2**70), 10**30])
    if kind == 3:
        return rng.choice([math.nan, math.inf, -math.inf, 1e308, -0.0, 0.5])
    if kind == 4:
        return rng.choice(["", "tensor", "x" * 10_000, "\0\udcff"])
    if kind in (5, 6, 7):
        return tensor(rng)
    if kind == 8:
        return numpy.arange(rng.randint(0, 6), dtype=rng.choice([numpy.float64, numpy.int64]))
    if kind == 9:
        return rng.choice([torch.Size([2, 3]), torch.float32, torch.device("cpu")])
    if kind == 10:
        return rng.choice([object(), torch.nn.Linear(2, 2), iter([1]), b"bytes"])  # stays a handle
    if kind == 11:
        return nested_list(rng.choice([5, 60, 400]))
    if kind in (12, 13):
        return tuple(arbitrary(rng, depth + 1) for _ in range(rng.randint(0, 4)))
    if kind == 14:
        return [arbitrary(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == 15:
        return {rng.choice(["loss", "logits", "missing_keys", 3, "x"]): arbitrary(rng, depth + 1) for _ in range(3)}
    return tensor(rng, fill=math.nan)


class StudentRaises(Exception):
    pass


def raises(rng):
    error = rng.choice([NotImplementedError("TODO"), ValueError("bad"), RuntimeError("shape mismatch"),
                        RecursionError("deep"), StudentRaises("custom"), ZeroDivisionError()])
    raise error


FAMILIES = {
    # every function and method of the submission ...
    "none": lambda rng: None,                                      # ... is a stub ending in `pass`
    "handle": lambda rng: object(),                                # ... returns an object the grader cannot read
    "nan": lambda rng: rng.choice([tensor(rng, fill=math.nan), (tensor(rng, fill=math.nan),) * 2]),
    "shapes": lambda rng: rng.choice([tensor(rng), (tensor(rng), tensor(rng)), [tensor(rng)] * 3]),
    "raises": raises,                                              # ... raises
    "mixed-1": arbitrary,                                          # ... returns anything at all
    "mixed-2": arbitrary,
    "mixed-3": arbitrary,
}


# ---------------------------------------------------------------- a submission of stubs


class StubObject:
    """An instance of any class of the stub submission: every method answers from the family."""

    def __init__(self, answer):
        self._answer = answer

    def __getattr__(self, name):
        if name.startswith("__") and name not in ("__len__", "__getitem__"):
            raise AttributeError(name)
        if name in ("eval", "train", "to", "requires_grad_"):  # inherited from nn.Module: return self
            return lambda *args, **kwargs: self
        return lambda *args, **kwargs: self._answer()

    def __call__(self, *args, **kwargs):
        return self._answer()


class StubModule:
    """A module of the stub submission: functions answer from the family, classes make StubObjects."""

    def __init__(self, answer):
        self._answer = answer

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            return lambda *args, **kwargs: StubObject(self._answer)
        return lambda *args, **kwargs: self._answer()


class FuzzStudent(InProcessStudent):
    """The in-process stand-in over stub modules. Harness tasks, state_dict, parameters and
    load_state_dict answer as a worker could once the student's code has patched them: tasks and
    state_dict anything, the others anything the client's own validation lets through."""

    def __init__(self, family, seed):
        self.rng = random.Random(seed)
        self.family = FAMILIES[family]
        self.stubs = family == "none"  # classes whose __init__ is `pass` have no parameters at all
        self.tasks = {}

    def answer(self):
        return self.family(self.rng)

    def module(self, name):
        return StubModule(self.answer)

    def getattr(self, target, name):
        return _out(_student(self.answer))

    def state_dict(self, handle):
        return _out(_student(self.answer))

    def task(self, name, *args, **kwargs):
        return _out(_student(self.answer))

    def load_state_dict(self, handle, state_dict, strict=True):
        _student(self.answer)  # the student's load_state_dict may raise
        names = ["weight", "qkv_proj.weight", "bert.x", ""]
        return {"missing_keys": self.rng.sample(names, self.rng.randint(0, 2)),
                "unexpected_keys": self.rng.sample(names, self.rng.randint(0, 2))}

    def parameters(self, handle):
        _student(self.answer)
        if self.stubs:
            return {"parameters": [], "buffers": []}
        rng = self.rng
        names = ["weight", "bias", "qkv_proj.weight", "o_proj.bias", "bert.embeddings.word_embeddings.weight",
                 "rnn.weight_ih_l0", "rnn.weight_hh_l0_reverse", "fc.weight", "fc.bias", "pe", ""]
        sizes = [0, 1, 3, 8, 2**40] if rng.random() < 0.2 else [0, 1, 3, 8]  # a meta-device tensor costs nothing
        entries = [{"name": rng.choice(names), "shape": [rng.choice(sizes) for _ in range(rng.randint(0, 3))],
                    "dtype": rng.choice(["float32", "int64", "bool"]), "requires_grad": rng.choice([True, False])}
                   for _ in range(rng.randint(0, 6))]
        buffers = [{"name": rng.choice(names), "shape": [rng.randint(0, 4)], "dtype": "float32",
                    "persistent": rng.choice([True, False])} for _ in range(rng.randint(0, 2))]
        return {"parameters": entries, "buffers": buffers}


FAULTS = {
    "garbage on the reply pipe": (
        lambda: ProtocolError("the worker sent a malformed reply and was stopped: the header is not JSON"),
        "stopped answering in the expected format"),
    "sleeps past the call timeout": (
        lambda: WorkerTimeout("the call timed out after 2 s; the worker was stopped", timeout_s=2), "timed out"),
    "kills the worker": (lambda: WorkerCrashed("the student's code called sys.exit(3)", exit_status=3), "died"),
    "uses up the budget": (
        lambda: BudgetExhausted("the submission used up its time budget of 600 s", timeout_s=600), "time budget"),
    "makes the grader ask for the impossible": (
        lambda: RequestError("the handle #3 belongs to a worker that has since been restarted"),
        "could not complete this check"),
}


class Faulty:
    """A student (FuzzStudent) whose request number `at` fails in the sandbox the way `fault` says;
    a used-up budget stays used up."""

    REQUESTS = ("construct", "call", "getattr", "task", "state_dict", "load_state_dict", "parameters", "seed",
                "import_module")

    def __init__(self, student, fault, at):
        self.student, self.fault, self.at, self.count = student, fault, at, 0

    def __getattr__(self, name):
        method = getattr(self.student, name)
        if name not in self.REQUESTS:
            return method

        def request(*args, **kwargs):
            self.count += 1
            if self.count == self.at or (self.count > self.at and self.fault == "uses up the budget"):
                raise FAULTS[self.fault][0]()
            return method(*args, **kwargs)

        return request


def run_fuzzed(chk, student, *, answers=None):
    seed = check_seed(0, chk.id)
    ctx = Context(student, ReferenceOracle(HOMEWORK), seed, max_examples=3, answers=answers,
                  reference_answers=REFERENCE_ANSWERS, options={})
    result = run_check(chk, ctx, before=lambda: student.seed(seed))
    assert ctx.student is student  # run_check hands the check a recorder, and gives the student back
    return result


def assert_valid(result, chk):
    assert isinstance(result, CheckResult)
    assert result.check is chk
    assert result.status in STATUSES, result.status
    assert 0.0 <= result.fraction <= 1.0
    assert result.message is None or isinstance(result.message, str)
    if result.status == ERROR:
        assert result.message, chk.id
        assert result.fraction == 0.0
    json.dumps(result.to_json(1.0))  # whatever the check put in details can be written


def assert_results_validate(results_by_part):
    rubric = {part.id: part for part in HOMEWORK.rubric.parts}
    parts = [part_json(rubric[part_id], results, REGISTRY) for part_id, results in results_by_part.items()]
    results = {
        "schema_version": 1, "status": "graded", "reason": None, "mode": "instructor", "seed": 0,
        "score": round(sum(p["score"] for p in parts), 4), "max_score": round(sum(p["max_score"] for p in parts), 4),
        "submission": {"sha256": "0" * 64, "name": "fuzz", "kind": "folder", "notes": []},
        "versions": {"grader": graders.__version__}, "timings": {}, "parts": parts,
    }
    jsonschema.validate(results, SCHEMA)
    json.loads(json.dumps(results))
    return results


# ---------------------------------------------------------------- the tests, in process


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_check_survives_what_stub_code_returns(family, one_torch_thread):
    by_part = {}
    for chk in CODE_CHECKS:
        result = run_fuzzed(chk, FuzzStudent(family, seed=f"{family}:{chk.id}"))
        assert_valid(result, chk)
        by_part.setdefault(chk.part, []).append(result)
        if family in ("none", "handle", "raises"):
            # Nothing sensible came back: no check may pass or give points.
            assert result.status in (FAILED, ERROR), (chk.id, result.status, result.message)
            assert result.fraction == 0.0, chk.id
        if result.status == ERROR and "grader_traceback" in result.details:
            # The catch-all: it names the student's function and what it returned, never Python's words.
            assert result.message.startswith("the grader could not use what your code returned: "), result.message
            assert not any(raw in result.message for raw in RAW_PYTHON), (chk.id, result.message)
        if family == "none" and result.status == ERROR:
            assert "None" in result.message, (chk.id, result.message)
    assert_results_validate(by_part)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_check_reports_a_failing_worker_as_its_error(fault, one_torch_thread):
    by_part = {}
    for index, chk in enumerate(CODE_CHECKS):
        # The seeding before the check, or the check's first request: before any other verdict.
        at = 1 + index % 2
        student = Faulty(FuzzStudent("mixed-1", seed=chk.id), fault, at)
        result = run_fuzzed(chk, student)
        assert_valid(result, chk)
        by_part.setdefault(chk.part, []).append(result)
        assert student.count >= at, chk.id
        assert result.status == ERROR, (chk.id, result.status, result.message)
        assert FAULTS[fault][1] in result.message, (chk.id, result.message)
        assert result.worker_failed == (fault != "makes the grader ask for the impossible"), chk.id
    assert_results_validate(by_part)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_failing_worker_later_in_a_check_still_gives_a_result(fault, one_torch_thread):
    """The worker fails in the middle of a check, perhaps while hypothesis replays a failure."""
    for index, chk in enumerate(CODE_CHECKS):
        result = run_fuzzed(chk, Faulty(FuzzStudent("shapes", seed=chk.id), fault, 3 + index % 4))
        assert_valid(result, chk)
        assert result.status in (ERROR, FAILED), (chk.id, result.status, result.message)


ODD_ANSWERS = [
    {},
    {"numeric": "ten", "written": 5},
    {"numeric": {"causal_lm_base_parameters": [1, 2], "causal_lm_lm_head_parameters": 2**80,
                 "causal_lm_classification_head_parameters": math.nan}},
    {"numeric": {"causal_lm_base_parameters": {"a": 1}, "causal_lm_lm_head_parameters": "1,0,0"},
     "written": {"residual_connection": ["a"], "layer_norm": {"x": 1}, "scaling_factor": "\0" * 10_000}},
    {"numeric": [], "written": []},
]


@pytest.mark.parametrize("answers", ODD_ANSWERS, ids=range(len(ODD_ANSWERS)))
def test_answer_checks_survive_odd_answers_toml(answers):
    results = []
    for chk in REGISTRY["answers"]:
        result = run_fuzzed(chk, None, answers=answers)
        assert_valid(result, chk)
        assert result.status != PASSED, (chk.id, answers)
        results.append(result)
    assert_results_validate({"answers": results})


def test_a_stub_returning_none_is_an_error_that_says_so():
    """The catch-all and the validation helpers both tell a student what came back."""
    results = {chk.id: run_fuzzed(chk, FuzzStudent("none", seed=0)) for chk in REGISTRY["attention"]}
    dropout = results["attention.dropout"]  # indexes the result: validated by expect_tuple
    assert dropout.status == ERROR
    assert dropout.message == ("scaled_dot_product returned None, but a tuple (values, attention) of tensors "
                               "was expected")
    assert dropout.diagnosis == "returns_wrong_type"
    assert all(r.status == ERROR and "returned None" in r.message for r in results.values()), \
        {cid: r.message for cid, r in results.items()}


def test_an_unexpected_exception_of_a_check_is_reported_from_the_returned_value():
    """A check that does not validate what it gets (here a made-up one indexing the result)."""
    from graders.checks.framework import Check

    def indexes_the_result(ctx):
        values = ctx.student.call("attention", "scaled_dot_product", torch.ones(1), None)
        return values[0] + 1

    chk = Check("attention.made_up", "attention", "made up", indexes_the_result)
    result = run_fuzzed(chk, FuzzStudent("none", seed=0))
    assert result.status == ERROR and result.fraction == 0.0
    assert result.message.startswith("the grader could not use what your code returned: "
                                     "attention.scaled_dot_product(...) returned None")
    assert "pass" in result.message  # the hint: a stub, or a missing return
    assert "TypeError" in result.details["grader_error"]  # for developers, not the headline
    assert "indexes_the_result" in result.details["grader_traceback"]

    handle_result = run_fuzzed(chk, FuzzStudent("handle", seed=0))
    assert "returned an object of type builtins.object that stays in the worker" in handle_result.message

    def grader_bug(ctx):
        return {}["no such key"]

    bug = run_fuzzed(Check("attention.bug", "attention", "bug", grader_bug), FuzzStudent("none", seed=0))
    assert bug.status == ERROR and "internal error of the check, not of your code" in bug.message


# ---------------------------------------------------------------- the real sandbox

FAST = Limits(call_timeout_s=3, start_timeout_s=60, submission_budget_s=120)


def _stubbed_template(folder):
    """The student template with every TODO body (the `raise NotImplementedError(...)`) replaced by `pass`."""
    shutil.copytree(TEMPLATE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for path in folder.glob("*.py"):
        lines = [line[: len(line) - len(line.lstrip())] + "pass\n" if line.lstrip().startswith("raise NotImplementedError(")
                 else line for line in path.read_text().splitlines(keepends=True)]
        path.write_text("".join(lines))
    assert "NotImplementedError" not in (folder / "attention.py").read_text()
    return folder


def _checks(results):
    return {c["id"]: c for part in results["parts"] for c in part["checks"]}


def test_sandbox_template_with_pass_bodies_grades_to_zero(tmp_path):
    results = grade(_stubbed_template(tmp_path / "stubs"), only_parts=["attention", "mha"], limits=FAST)
    jsonschema.validate(results, SCHEMA)
    assert results["status"] == "graded" and results["score"] == 0
    checks = _checks(results)
    assert checks["attention.dropout"]["status"] == ERROR
    assert checks["attention.dropout"]["message"].startswith("scaled_dot_product returned None, but a tuple")
    for cid, c in checks.items():
        assert c["status"] in (ERROR, FAILED), (cid, c["status"], c["message"])
        if not c["message"].startswith("your code raised "):  # the student's own exception is shown as is
            assert not any(raw in c["message"] for raw in RAW_PYTHON), (cid, c["message"])


GARBAGE = '''
import json, os, sys
# The worker's configuration is its last argument; a student could also scan /proc/self/fd.
os.write(json.loads(sys.argv[-1])["reply_fd"], b"\\xff" * 64)
'''


def test_sandbox_garbage_on_the_reply_pipe_fails_only_the_affected_part(tmp_path):
    folder = tmp_path / "garbage"
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    bert = folder / "bert.py"
    bert.write_text(GARBAGE + bert.read_text())
    results = grade(folder, only_parts=["bert", "mha"], limits=FAST)
    jsonschema.validate(results, SCHEMA)
    parts = {p["id"]: p for p in results["parts"]}
    assert parts["bert"]["score"] == 0
    for c in parts["bert"]["checks"]:
        assert c["status"] == ERROR, (c["id"], c["status"])
        assert c["message"].startswith("importing bert.py made the worker send a malformed reply"), c["message"]
    assert parts["mha"]["score"] == parts["mha"]["max_score"]  # a new worker took over


SLEEPER = '''

def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):
    import time
    time.sleep(30)
'''


def test_sandbox_a_call_sleeping_past_the_timeout_fails_its_check(tmp_path):
    folder = tmp_path / "sleeper"
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    attention = folder / "attention.py"
    attention.write_text(attention.read_text() + SLEEPER)
    limits = Limits(call_timeout_s=1, start_timeout_s=60, submission_budget_s=120)
    results = grade(folder, only_parts=["attention"], limits=limits)
    jsonschema.validate(results, SCHEMA)
    checks = list(_checks(results).values())
    timed_out = [c for c in checks if c["status"] == ERROR and "timed out after 1 s" in c["message"]]
    assert len(timed_out) == 2, [(c["id"], c["status"], c["message"]) for c in checks]
    assert all(c["diagnosis"]["id"] == "hangs" for c in timed_out)
    not_run = [c for c in checks if c not in timed_out]
    assert not_run and all("not run: your code killed or hung the worker" in c["message"] for c in not_run)
    assert results["score"] == 0


def test_sandbox_a_worker_that_cannot_start_gives_an_error_result(tmp_path):
    """No worker starts (here: the start may take 1 ms): every check says so, and the grade is an
    infrastructure error (a batch grades it again), not a crash and not a student's zero."""
    limits = Limits(call_timeout_s=1, start_timeout_s=0.001, submission_budget_s=60)
    results = grade(REFERENCE_DIR, only_parts=["attention", "answers"], limits=limits)
    jsonschema.validate(results, SCHEMA)
    assert results["status"] == "error"
    assert results["reason"].startswith("the sandbox worker could not start: starting the worker timed out")
    checks = _checks(results)
    attention = [c for cid, c in checks.items() if cid.startswith("attention.")]
    assert attention and all(c["status"] == ERROR and c["message"].startswith("your code was not run: the worker")
                             for c in attention)
    assert checks["answers.layer_norm"]["status"] == "pending_manual"  # answers.toml needs no worker


def test_cli_writes_an_error_result_when_grade_itself_fails(tmp_path, monkeypatch, capsys):
    from graders import grading
    from graders.cli import main

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the grader")

    monkeypatch.setattr(grading, "grade", broken)
    out = tmp_path / "out"
    assert main([str(REFERENCE_DIR), "--out", str(out), "--parts", "attention"]) == 0
    results = json.loads((out / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    assert results["status"] == "error" and results["score"] == 0
    assert results["reason"] == "the grader failed: RuntimeError: a bug in the grader"
    assert (out / "report.html").exists()
    assert "RuntimeError: a bug in the grader" in capsys.readouterr().err  # the traceback, for us


def test_batch_records_a_grade_without_a_worker_as_an_error(monkeypatch):
    """`grade batch` publishes what grade() returns; a grade whose worker never started is an
    error outcome there too (graded again with --redo-errors), not a graded zero."""
    from graders import grading
    from graders.batch import run_one, store

    monkeypatch.setattr(grading, "grade", lambda source, *, assignment, **kwargs:
                        grading.error_result(source, "no worker", assignment=assignment))
    spec = {"source": str(REFERENCE_DIR), "limits": Limits().to_json(), "student_id": "s1", "input_sha256": "0" * 64,
            "assignment": str(HOMEWORK.folder)}
    results = run_one.grade_spec(spec)
    jsonschema.validate(results, SCHEMA)
    assert results["batch"]["outcome"] == "error" and store.outcome_of(results) == store.ERROR
    assert results["batch"]["reason"] == "no worker"
