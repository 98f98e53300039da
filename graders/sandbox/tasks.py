"""General-purpose harness tasks, available to every assignment (see `graders.sandbox.harness`
for how tasks work; a pack registers its own in the modules its manifest lists under `tasks`)."""

from __future__ import annotations

from typing import Any

import torch

from .harness import TaskContext, task


@task("forward")
def forward(ctx: TaskContext, model: Any, *inputs: Any, training: bool = False,
            seed: int | None = None, **kwargs: Any) -> Any:
    """`model(*inputs, **kwargs)` without gradients, in training or evaluation mode (dropout),
    seeded if asked; the model's own mode is restored afterwards."""
    was_training = model.training
    model.train(training)
    if seed is not None:
        torch.manual_seed(seed)
    try:
        with torch.no_grad():
            return model(*inputs, **kwargs)
    finally:
        model.train(was_training)


@task("call_many")
def call_many(ctx: TaskContext, target: Any, name: str,
              calls: list[tuple[tuple, dict]]) -> list[Any]:
    """Many calls of one function in a single round trip: `target` is a module name of the
    submission or an object, `calls` a list of `(args, kwargs)`; returns the list of results."""
    owner = ctx.student_module(target) if isinstance(target, str) else target
    function = getattr(owner, name)
    return [function(*args, **kwargs) for args, kwargs in calls]


# ---------------------------------------------------------------- builders
#
# What the checks' plain calls need and cannot construct themselves, such as an optimizer. The
# checks score what the student's code does with them by reading back its return values and the
# weights (`state_dict`), compared with what the grader computes itself; a builder reports
# nothing about the student's code.


@task("optimizer")
def optimizer(ctx: TaskContext, model: Any, kind: str, lr: float, names: list | None = None,
              **options: Any) -> Any:
    """A torch optimizer (`Adam`, `AdamW` or `SGD`) over the parameters of `model` named in `names`,
    or over every parameter that requires a gradient."""
    kinds = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW, "SGD": torch.optim.SGD}
    if names is None:
        params = [p for p in model.parameters() if p.requires_grad]
    else:
        named = dict(model.named_parameters())
        params = [named[name] for name in names]
    return kinds[kind](params, lr=lr, **options)
