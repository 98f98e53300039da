"""The causal-LM homework's harness task (graders/sandbox/harness.py): a module with frozen layers
and a buffer, built in the worker for the student's `count_parameters`."""

from __future__ import annotations

from typing import Any

import torch

from graders.sandbox.harness import TaskContext, task


@task("causal_lm.probe_module")
def causal_lm_probe_module(ctx: TaskContext, sizes: list, frozen: int) -> Any:
    """Sequential(Linear(a, b), Linear(b, c)) with the first `frozen` layers frozen and a (100,)
    buffer registered, for the student's count_parameters."""
    a, b, c = sizes
    module = torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Linear(b, c))
    module.register_buffer("table", torch.zeros(100))
    for layer in list(module)[:frozen]:
        layer.requires_grad_(False)
    return module
