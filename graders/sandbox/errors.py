"""What can go wrong when the grader runs student code in the worker.

Every failure reaches the grader as one of these exceptions, never as a crash of the grading
process. A check turns them into an `error` status with `str(exc)` as its message.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class. `output` is the tail of what the student's code printed during the request."""

    def __init__(self, message: str, *, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class StudentError(SandboxError):
    """The student's code raised an exception (the worker is still alive and usable).

    `traceback` only shows frames from files of the submission, with paths relative to it,
    so it can be shown to the student as is. `debug_traceback` is the full traceback, for
    whoever writes harness tasks; it names grader files and is not meant for students.
    """

    def __init__(
        self,
        exc_type: str,
        message: str,
        traceback: str,
        *,
        output: str = "",
        debug_traceback: str = "",
    ) -> None:
        super().__init__(f"{exc_type}: {message}" if message else exc_type, output=output)
        self.exc_type = exc_type
        self.message = message
        self.traceback = traceback
        self.debug_traceback = debug_traceback


class WorkerCrashed(SandboxError):
    """The worker died (sys.exit, os._exit, a signal, a failed start). The next request restarts it."""

    def __init__(self, reason: str, *, exit_status: int | None = None, output: str = "") -> None:
        super().__init__(reason, output=output)
        self.reason = reason
        self.exit_status = exit_status


class WorkerTimeout(SandboxError):
    """A request ran past its wall-clock limit; the worker was killed. The next request restarts it."""

    def __init__(self, message: str, *, timeout_s: float, output: str = "") -> None:
        super().__init__(message, output=output)
        self.timeout_s = timeout_s


class BudgetExhausted(WorkerTimeout):
    """The submission used up its total wall-clock budget; no further request is started."""


class ProtocolError(SandboxError):
    """The worker sent something that is not a well-formed reply. Treated as a worker fault:
    the worker is killed, since whatever runs in it can no longer be trusted to answer."""


class RequestError(SandboxError):
    """The grader asked for something the worker cannot do: a freed or stale handle, an unknown
    task, a value that cannot be sent. A bug in the grader, not in the submission."""


class MissingDependency(SandboxError):
    """The worker could not import a module the grader depends on (transformers, safetensors,
    ...), whoever asked for it: a problem of the grader's environment, never of the student's
    code. The message says what to install (graders/dependencies.py)."""

    def __init__(self, message: str, *, module: str, output: str = "") -> None:
        super().__init__(message, output=output)
        self.module = module
