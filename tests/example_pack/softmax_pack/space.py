"""The argument space of the softmax: what its docstring allows, which `grade coverage` proves the
checks exercise."""

from graders.checks.space import Contract, Situation, size

CONTRACTS = [
    Contract("softmax.softmax", "softmax.matches_reference", (
        Situation("a single row", lambda call: size(call["x"], 0) == 1),
        Situation("dim along the rows", lambda call: call["dim"] in (0, -2)),
    )),
]
