"""The check contract: what a check may ask of the student's code, and the words of its result.

A check talks to the student's code only through `ctx.student`, an object with the methods of
`StudentCode`. Three implement it:

- the worker client (`graders.sandbox.Worker`): the student's code in another process, what
  instructor grading and `grade check` use;
- the tracked proxies (`ForwardingStudent` subclasses: the grading's handle tracker and the
  check framework's recorder of returned values), which wrap another `StudentCode`;
- the in-process stand-in of the tests (`tests/checks_inprocess.py`), which imports a folder
  into the test's own process, so a check's own tests run in milliseconds.

`tests/test_student_contract.py` runs one sequence of requests through all three and expects the
same answers; mypy checks that each has the methods with these signatures.

Values cross as plain data: tensors (their values only), numbers, strings, None, and lists,
tuples and dicts of them. Any other object stays with the student's code and comes back as a
`Handle`, which later requests name. The student's code raising is `StudentError` (its type,
message and traceback); a worker that dies, hangs or sends garbage is another `SandboxError`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from graders.sandbox.protocol import Handle


class Status(StrEnum):
    """A check's result. The values are what results.json says (docs/results.md)."""

    PASSED = "passed"
    FAILED = "failed"  # the code ran and behaved wrongly: partial credit possible
    ERROR = "error"  # the code raised, returned something unusable, died or hung: no credit
    SKIPPED = "skipped"  # a prerequisite is missing (a module, a golden answer, a package)
    PENDING_MANUAL = "pending_manual"  # a written answer, graded by hand


class Visibility(StrEnum):
    PUBLIC = "public"  # in the student's self-check
    HIDDEN = "hidden"  # instructor grading only


Target = str | Handle  # a submission module by name, or an object the student's code made


@runtime_checkable
class StudentCode(Protocol):
    """The student's code as a check reaches it (`ctx.student`)."""

    def import_module(self, module: str) -> None:
        """Import a module of the submission ("attention"); StudentError if it raises."""

    def construct(self, module: str, cls: str, /, *args: Any, **kwargs: Any) -> Handle:
        """`module.cls(*args, **kwargs)`; the object stays with the student's code."""

    def call(self, target: Target, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call a module's function, or an object's method (`name="__call__"`: the object itself)."""

    def getattr(self, target: Target, name: str) -> Any:
        """An attribute of a module or of an object."""

    def state_dict(self, handle: Handle) -> dict[str, Any]:
        """What the object's `state_dict()` returns: normally names to tensors."""

    def load_state_dict(self, handle: Handle, state_dict: dict[str, Any], strict: bool = True) -> dict[str, list[str]]:
        """Load weights; returns `{"missing_keys": [...], "unexpected_keys": [...]}`."""

    def parameters(self, handle: Handle) -> dict[str, list[dict[str, Any]]]:
        """`{"parameters": [{name, shape, dtype, requires_grad}], "buffers": [{name, shape, dtype,
        persistent}]}` of a `torch.nn.Module`."""

    def seed(self, seed: int) -> None:
        """Seed torch, random and numpy where the student's code runs."""

    def task(self, name: str, /, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Run a harness task of the assignment (graders/sandbox/harness.py) next to the student's
        code, with its own wall-clock limit."""


class Oracle(Protocol):
    """The expected answers: the reference solution (instructor grading) or the golden answers
    recorded from it (a self-check). `call` raises `OracleUnavailable` for an input without one."""

    kind: str

    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Any: ...


class ForwardingStudent:
    """A `StudentCode` that passes every request to another one through `forward`: subclasses
    look at what comes back (handles to free, values to explain a failure with)."""

    def __init__(self, student: StudentCode) -> None:
        self.student = student

    def forward(self, op: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.student, op)(*args, **kwargs)

    def import_module(self, module: str) -> None:
        self.forward("import_module", module)

    def construct(self, module: str, cls: str, /, *args: Any, **kwargs: Any) -> Handle:
        return self.forward("construct", module, cls, *args, **kwargs)

    def call(self, target: Target, name: str, /, *args: Any, **kwargs: Any) -> Any:
        return self.forward("call", target, name, *args, **kwargs)

    def getattr(self, target: Target, name: str) -> Any:
        return self.forward("getattr", target, name)

    def state_dict(self, handle: Handle) -> dict[str, Any]:
        return self.forward("state_dict", handle)

    def load_state_dict(self, handle: Handle, state_dict: dict[str, Any], strict: bool = True) -> dict[str, list[str]]:
        return self.forward("load_state_dict", handle, state_dict, strict=strict)

    def parameters(self, handle: Handle) -> dict[str, list[dict[str, Any]]]:
        return self.forward("parameters", handle)

    def seed(self, seed: int) -> None:
        self.forward("seed", seed)

    def task(self, name: str, /, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        return self.forward("task", name, *args, timeout=timeout, **kwargs)
