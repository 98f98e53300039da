"""The causal-LM homework's harness task (graders/sandbox/harness.py): a module with frozen layers,
a buffer and, if asked, a tied weight, built in the worker for the student's `count_parameters`."""

from __future__ import annotations

from typing import Any

import torch

from graders.sandbox.harness import TaskContext, task


def probe_module(sizes: list, frozen: int, tied: bool = False) -> torch.nn.Module:
    """Sequential(Linear(a, b), Linear(b, c)) with the first `frozen` layers frozen and a (100,)
    buffer registered; with `tied`, a third Linear(a, b) sharing the first one's weight (a
    parameter of two sub-modules, counted once)."""
    a, b, c = sizes
    layers = [torch.nn.Linear(a, b), torch.nn.Linear(b, c)]
    if tied:
        layers.append(torch.nn.Linear(a, b))
        layers[2].weight = layers[0].weight
    module = torch.nn.Sequential(*layers)
    module.register_buffer("table", torch.zeros(100))
    for layer in layers[:frozen]:
        layer.requires_grad_(False)
    return module


@task("causal_lm.probe_module")
def causal_lm_probe_module(ctx: TaskContext, sizes: list, frozen: int, tied: bool = False) -> Any:
    """The probe module (above), for the student's count_parameters."""
    return probe_module(sizes, frozen, tied)
