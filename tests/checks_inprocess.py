"""An in-process stand-in for the sandboxed worker, to exercise checks fast in tests.

`InProcessStudent(folder)` loads a submission folder (e.g. a copy of reference/, maybe mutated)
as a package in this process and answers the same calls a check makes through `ctx.student`:
construct, call, getattr, state_dict, load_state_dict, parameters, seed, task.
Results cross a pretend boundary: tensors come back as detached copies, containers as plain
containers, anything else as a handle. Student exceptions become `StudentError`.

This trusts the code it loads: only for the reference and its mutants, never for submissions.
"""

import importlib
import importlib.util
import itertools
import random
import sys
import traceback
import uuid
from pathlib import Path

import numpy
import torch

try:  # the sandbox package may still be half-built: take the error types from where they live
    from graders.sandbox import StudentError
except ImportError:  # pragma: no cover - until graders/sandbox/__init__.py exports them
    import graders.sandbox
    from graders.sandbox import errors as _errors

    for _name in ("StudentError", "WorkerCrashed", "WorkerTimeout", "SandboxError"):
        setattr(graders.sandbox, _name, getattr(_errors, _name))
    StudentError = _errors.StudentError

_PACKAGES = itertools.count()


class Handle:
    """An object that stays on the student's side."""

    def __init__(self, obj):
        self.obj = obj
        kind = type(obj)  # named as the worker names it: "attention.MultiHeadAttention"
        self.type_name = f"{kind.__module__}.{kind.__qualname__}".split(".", 1)[-1] \
            if kind.__module__.startswith("_student_") else f"{kind.__module__}.{kind.__qualname__}"

    def __repr__(self):
        return f"<Handle {self.type_name}>"


def _out(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (bool, int, float, str)):
        return type(value).__mro__[-2](value)
    if isinstance(value, tuple):
        return tuple(_out(v) for v in value)
    if isinstance(value, list):
        return [_out(v) for v in value]
    if isinstance(value, dict):
        return {k: _out(v) for k, v in value.items()}
    return Handle(value)


def _in(value):
    if isinstance(value, Handle):
        return value.obj
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(_in(v) for v in value)
    if isinstance(value, list):
        return [_in(v) for v in value]
    if isinstance(value, dict):
        return {k: _in(v) for k, v in value.items()}
    return value


def _student(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - every student fault becomes a StudentError
        raise StudentError(type(error).__name__, str(error), traceback.format_exc()) from None


def worker_tasks():
    """Harness tasks by name: the general ones (graders/sandbox/tasks.py) and the pack's, which
    register on import."""
    import graders.sandbox.tasks  # noqa: F401  (registration by import)
    from graders.sandbox.harness import TASKS
    from tests.course import PACKS

    for pack in PACKS:
        pack.import_tasks()

    return TASKS


class _TaskContext:
    """What a harness task gets as its first argument (see graders.sandbox.harness.TaskContext)."""

    def __init__(self, student):
        self.student_module = student.module


class InProcessStudent:
    def __init__(self, folder):
        folder = Path(folder)
        # unique per process, even if this module is imported twice (as tests.checks_inprocess and
        # as checks_inprocess): a reused name would hand back another folder's cached modules
        self.package = f"_student_{next(_PACKAGES)}_{uuid.uuid4().hex[:8]}"
        spec = importlib.util.spec_from_file_location(
            self.package, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.package] = module
        spec.loader.exec_module(module)
        self.tasks = worker_tasks()

    def module(self, name):
        return _student(importlib.import_module, f"{self.package}.{name}")

    def import_module(self, name):
        self.module(name)

    def _target(self, target):
        return target.obj if isinstance(target, Handle) else self.module(target)

    def construct(self, module, class_name, *args, **kwargs):
        cls = _student(getattr, self.module(module), class_name)
        return Handle(_student(cls, *_in(args), **_in(kwargs)))

    def call(self, target, name, *args, **kwargs):
        fn = _student(getattr, self._target(target), name)  # in the worker, a missing name is the student's
        return _out(_student(fn, *_in(args), **_in(kwargs)))

    def getattr(self, target, name):
        return _out(_student(getattr, self._target(target), name))

    def state_dict(self, handle):
        return {k: v.detach().clone() for k, v in _student(handle.obj.state_dict).items()}

    def load_state_dict(self, handle, state_dict, strict=True):
        result = _student(handle.obj.load_state_dict, _in(state_dict), strict=strict)
        return {"missing_keys": list(result.missing_keys), "unexpected_keys": list(result.unexpected_keys)}

    def parameters(self, handle):
        """The worker's answer: {"parameters": [{name, shape, dtype, requires_grad}], "buffers": [...]}."""
        module = handle.obj
        persistent = set(module.state_dict())
        return {
            "parameters": [
                {"name": n, "shape": list(p.shape), "dtype": str(p.dtype).replace("torch.", ""), "requires_grad": p.requires_grad}
                for n, p in module.named_parameters()
            ],
            "buffers": [
                {"name": n, "shape": list(b.shape), "dtype": str(b.dtype).replace("torch.", ""), "persistent": n in persistent}
                for n, b in module.named_buffers()
            ],
        }

    def seed(self, n):
        """As the worker's op_seed: torch, random and numpy."""
        torch.manual_seed(n)
        random.seed(n)
        numpy.random.seed(n % 2**32)

    def task(self, name, /, *args, timeout=None, **kwargs):  # no limit in-process: trusted code only
        return _out(_student(self.tasks[name], _TaskContext(self), *_in(args), **_in(kwargs)))


def run_part(folder, part, *, seed=0, max_examples=None, only=None, pack=None):
    """Run every check of `part` of the pack (by default, the first with such a part) against the
    folder in-process; {check id: CheckResult}."""
    from tests.course import pack_of
    from graders.checks.framework import Context, check_seed, run_check
    from graders.oracles import ReferenceOracle

    pack = pack or pack_of(part)
    student = InProcessStudent(folder)
    results = {}
    for chk in pack.registry().get(part, []):
        if only and chk.id not in only:
            continue
        cseed = check_seed(seed, chk.id)
        student.seed(cseed)
        kwargs = {} if max_examples is None else {"max_examples": max_examples}
        ctx = Context(student, ReferenceOracle(pack), cseed, **kwargs)
        results[chk.id] = run_check(chk, ctx)
    return results
