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


# ---------------------------------------------------------------- tracing
#
# What localises a wrong output (graders/checks/localise.py): the input and output of every
# sub-module as one forward pass runs, run alike on the student's module (here, in the worker)
# and on the reference (in the grader). What comes back describes, it never scores.

TRACED_CALLS = 400  # a forward pass of the homework's small models makes a few dozen
TRACED_ELEMENTS = 2**20  # per tensor: a larger one is left out of the trace
TRACED_ARGUMENTS = 3  # besides the first: a padding mask, a causal mask


def first_tensor(value: Any, depth: int = 0) -> torch.Tensor | None:
    """The first tensor in a value (an argument tuple, an `(embedding, mask)` pair, `(logits, loss)`)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone() if value.numel() <= TRACED_ELEMENTS else None
    if isinstance(value, (tuple, list)) and depth < 3:
        for item in value:
            found = first_tensor(item, depth + 1)
            if found is not None:
                return found
    return None


def trace_calls(model: torch.nn.Module, inputs: tuple, kwargs: dict, method: str = "__call__") -> dict:
    """Run `model.<method>(*inputs, **kwargs)` in evaluation mode without gradients, recording each
    sub-module call as it returns: `{"calls": [{name, kind, input, output, others}], "modules": {name:
    kind}}`, `others` the tensors of its further arguments (None for an argument that is None).
    Calls are in the order they return (inner before outer); the module itself is the name ""."""
    calls: list[dict] = []
    names = {id(module): name for name, module in model.named_modules()}

    def record(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if len(calls) < TRACED_CALLS and id(module) in names:
            packed = list(args[0][1:]) if args and isinstance(args[0], (tuple, list)) else []  # forward((x, mask))
            given = [*packed, *args[1:], *kwargs.values()][:TRACED_ARGUMENTS]
            calls.append({"name": names[id(module)], "kind": type(module).__name__,
                          "input": first_tensor(args), "output": first_tensor(output),
                          "others": [first_tensor(value) if value is not None else None for value in given]})

    hooks = [module.register_forward_hook(record, with_kwargs=True) for module in model.modules()]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = getattr(model, method)(*inputs, **kwargs)
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    if method != "__call__":  # the method itself is no module call: record it as the module's
        calls.append({"name": "", "kind": type(model).__name__, "input": first_tensor(inputs),
                      "output": first_tensor(output)})
    return {"calls": calls, "modules": {name: type(module).__name__ for name, module in model.named_modules()}}


@task("trace")
def trace(ctx: TaskContext, model: Any, *inputs: Any, method: str = "__call__", **kwargs: Any) -> dict:
    """`trace_calls` on the student's module."""
    return trace_calls(model, inputs, kwargs, method)
