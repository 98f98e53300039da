"""Harness tasks: trusted grader code that runs inside the worker, next to the student's objects.

A task is what one request cannot do: a training loop that calls the student's `train()` a few
hundred times, a forward pass in a given mode, many calls in one round trip. Register one with

    from graders.sandbox.harness import task

    @task("train_epochs")
    def train_epochs(ctx, model, data, *, epochs):
        ...
        return losses  # values, tensors, or objects (which come back as handles)

and run it from the grader with `worker.task("train_epochs", model_handle, data, epochs=2)`.
Handles among the arguments arrive as the objects they name; `ctx.student_module("sentiment")`
imports a module of the submission.

A task's module must be imported by the worker before student code can run, which the worker
does for every module named in `Worker(task_modules=...)` (`graders.sandbox.tasks`, the general ones, always).

Whatever a task returns is as untrusted as anything else from the worker: the student's code
ran in the same process and could have changed the task's functions. Return data to score in
the grader, never a verdict.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Protocol

TASKS: dict[str, Callable[..., Any]] = {}


class TaskContext(Protocol):
    """What a task gets besides its arguments."""

    submission_dir: Path  # the worker's copy of the submission (also the current directory)
    workdir: Path  # the worker's private, writable directory

    def student_module(self, name: str) -> ModuleType:
        """Import a module of the submission by its name in the submission (`"attention"`)."""


def task(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `function(ctx, *args, **kwargs)` as the harness task `name`."""

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        if TASKS.get(name, function) is not function:
            raise ValueError(f"two harness tasks are named {name!r}")
        TASKS[name] = function
        return function

    return register
