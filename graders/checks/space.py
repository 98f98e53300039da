"""The argument space of a pack's contract: what its docstrings allow, declared once per callable.

A pack lists, in the module its manifest names under `space`, a `Contract` for every callable a
student writes: a function ("attention.scaled_dot_product"), a class's constructor
("attention.MultiHeadAttention") or one of its methods ("attention.MultiHeadAttention.forward").
Each names the check that compares it with the reference by value (`differential`) and the
situations its docstring allows that the grader must produce (`Situation`: a batch of one, an
odd width, a boolean mask, another dtype, several layers). Besides those, every contract is held
to rules that follow from its signature alone: each parameter with a default is given another
value, each tensor parameter is given two shapes, and a method of a module is called on two input
shapes by one instance. `grade coverage` grades the reference, binds each call the grader sent to
the student's code to its callable's signature (a `Call`) and reports what was exercised
(graders/coverage.py); a rule or situation no call met is a gap.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

TRAINING, EVAL = "training", "eval"


@dataclass(frozen=True)
class Call:
    """One call the grader sent to the student's code, bound to the contract's signature."""

    callable: str
    arguments: Mapping[str, Any]  # every parameter by name, defaults filled in
    given: frozenset[str]  # the parameters the call passed
    check: str = ""  # the check that sent it
    mode: str | None = None  # a module's method: TRAINING or EVAL, when known
    instance: Any = None  # a method: which object it ran on (a key unique within the grade)
    built: Mapping[str, Any] | None = None  # a method: its object's constructor arguments, where it was built so


    def __getitem__(self, name: str) -> Any:
        return self.arguments[name]


@dataclass(frozen=True)
class Situation:
    """Something the docstring allows that one call at least must show: `holds` says whether a call does."""

    words: str  # "a batch of one", as the coverage report prints it
    holds: Callable[[Call], bool]


@dataclass(frozen=True)
class Contract:
    name: str  # "module.function", "module.Class" (its constructor) or "module.Class.method"
    differential: str  # the id of the check that compares it with the reference by value
    situations: tuple[Situation, ...] = ()
    # parameter -> why the grader gives it one value only (the signature's rules skip it)
    fixed: Mapping[str, str] = field(default_factory=dict)
    several_shapes: bool = False  # a method: one object must be called on two input shapes
    # `name` is a harness task of the pack's (graders/sandbox/harness.py), not the student's code: what
    # the grader builds for a callable whose argument stays in the worker (the batches an iterator
    # yields), so that the situations of that argument are proved on the task's inputs
    task: bool = False

    @property
    def module(self) -> str:
        return "tasks" if self.task else self.name.split(".", 1)[0]

    @property
    def path(self) -> list[str]:
        """The attribute path inside the module: ["function"], or ["Class", "method"]."""
        return self.name.split(".")[1:]


def situation(words: str) -> Callable[[Callable[[Call], bool]], Situation]:
    """Decorator form: `@situation("a batch of one")` over a predicate of a Call."""

    def make(holds: Callable[[Call], bool]) -> Situation:
        return Situation(words, holds)

    return make


# ------------------------------------------------------------------ predicates the packs share


def tensor(value: Any) -> torch.Tensor | None:
    """The value if it is a tensor, else None (a predicate reads a parameter with this)."""
    return value if isinstance(value, torch.Tensor) else None


def size(value: Any, dim: int) -> int | None:
    """`value.size(dim)` of a tensor with that many dimensions, else None."""
    t = tensor(value)
    if t is None or not -t.dim() <= dim < max(t.dim(), 1):
        return None
    return int(t.size(dim))


def first_tensor(call: Call) -> torch.Tensor | None:
    """The first tensor among a call's arguments, looking one level into tuples and lists (a
    block's `(embedding, mask)`): what "the input's shape" of a method means."""
    for value in call.arguments.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, torch.Tensor):
                return item
    return None


# ------------------------------------------------------------------ the signature of a contract


def signature_of(target: Any, is_class: bool) -> inspect.Signature:
    """The parameters a caller gives: a class's constructor's, a function's or a method's, without `self`."""
    function = target.__init__ if is_class else target
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if parameters and parameters[0].name == "self" and (is_class or inspect.isfunction(function)):
        parameters = parameters[1:]
    return signature.replace(parameters=parameters)


def resolve(contract: Contract, module_of: Callable[[str], Any]) -> tuple[Any, bool]:
    """(the reference object a contract names, whether it is a class) from a module loader; a
    task's function (its first parameter, the task's context, is not the caller's)."""
    if contract.task:
        from graders.sandbox.harness import TASKS

        function = TASKS[contract.name]
        signature = inspect.signature(function)
        return _TaskFunction(function, signature.replace(parameters=list(signature.parameters.values())[1:])), False
    target = module_of(contract.module)
    for name in contract.path:
        target = getattr(target, name)
    return target, inspect.isclass(target)


class _TaskFunction:
    """A task's function, with the signature its callers see (`inspect.signature` reads `__signature__`)."""

    def __init__(self, function: Callable[..., Any], signature: inspect.Signature) -> None:
        self.function = function
        self.__signature__ = signature

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


def bind(contract: Contract, signature: inspect.Signature, args: Iterable[Any], kwargs: Mapping[str, Any],
         check: str = "", mode: str | None = None, instance: Any = None,
         built: Mapping[str, Any] | None = None) -> Call | None:
    """The Call that `args` and `kwargs` make under `signature`; None where they do not fit it
    (a call the contract does not allow: no situation can read it)."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    given = frozenset(bound.arguments)
    bound.apply_defaults()
    return Call(contract.name, dict(bound.arguments), given, check, mode, instance, built)


def defaults(signature: inspect.Signature) -> dict[str, Any]:
    return {name: p.default for name, p in signature.parameters.items()
            if p.default is not inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def differs_from_default(value: Any, default: Any) -> bool:
    if isinstance(value, torch.Tensor) or isinstance(default, torch.Tensor):
        return value is not default
    try:
        return bool(value != default) or type(value) is not type(default)
    except Exception:  # noqa: BLE001 - a value whose comparison raises is some other value
        return True
