"""Oracles: where a check gets the expected behaviour.

- `ReferenceOracle` (instructor mode) runs the reference solution in the grading process, which
  is trusted, on the inputs a check draws at grading time.
- `GoldenOracle` (student self-check) answers from outputs that `grade build` recorded from the
  reference on the same seeded inputs; an input it has no record of is skipped, not guessed.
- `RecordingOracle` is the reference oracle that also records every answer, for `grade build`.

Every oracle answers `call(name, *args, **kwargs)` where name is "module.function" of the
reference, or one of the computations of the assignment's pack (`oracle` in its manifest:
reference behaviour under weights the check chooses).
"""

import functools
import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


class OracleUnavailable(Exception):
    """The golden oracle has no recorded answer for this input."""


def trace_reference(assignment, build, state, inputs, kwargs=None, method="__call__"):
    """The reference's sub-module calls (graders/sandbox/tasks.py `trace_calls`) for the module
    `build = (name, args, kwargs)` makes (a reference class, "attention.MultiHeadAttention", or a
    computation of the pack that returns a module), under the weights `state`; "not_loaded" lists
    the reference's parameters `state` has no value for (a student's layout of other names)."""
    from graders.sandbox.tasks import trace_calls

    target, args, build_kwargs = build
    module = _resolve(assignment, target)(*args, **build_kwargs)
    loaded = module.load_state_dict(state, strict=False)
    parameters = {name for name, _ in module.named_parameters()}
    trace = trace_calls(module, tuple(inputs), dict(kwargs or {}), method)
    return {**trace, "not_loaded": sorted(set(loaded.missing_keys) & parameters)}


# Computations every assignment has, besides its pack's own.
ENGINE_COMPUTATIONS = {"trace_reference": trace_reference}


def _resolve(assignment, name):
    if name in ENGINE_COMPUTATIONS:
        return functools.partial(ENGINE_COMPUTATIONS[name], assignment)
    computations = assignment.computations()
    if name in computations:
        return functools.partial(computations[name], assignment.reference_module)
    module, function = name.rsplit(".", 1)
    return getattr(assignment.reference_module(module), function)


class ReferenceOracle:
    kind = "reference"

    def __init__(self, assignment):
        self.assignment = assignment

    def call(self, name, *args, **kwargs):
        with torch.no_grad():
            return _resolve(self.assignment, name)(*args, **kwargs)


def call_key(name, args, kwargs):
    """A content hash of a call: the same name and inputs give the same key on every machine."""
    digest = hashlib.sha256(name.encode())

    def feed(value):
        if isinstance(value, torch.Tensor):
            digest.update(f"T{tuple(value.shape)}{value.dtype}".encode())
            digest.update(value.detach().contiguous().cpu().numpy().tobytes())
        elif isinstance(value, dict):
            digest.update(b"{")
            for key in sorted(value):
                digest.update(repr(key).encode())
                feed(value[key])
            digest.update(b"}")
        elif isinstance(value, (list, tuple)):
            digest.update(b"(")
            for item in value:
                feed(item)
            digest.update(b")")
        else:
            digest.update(repr(value).encode())

    feed(args)
    feed(kwargs)
    return digest.hexdigest()[:32]


def _flatten(value, prefix, tensors):
    """Tensors of a result go into `tensors`; the structure comes back as JSON-able data."""
    if isinstance(value, torch.Tensor):
        tensors[prefix] = value.detach().contiguous().cpu()
        return {"$tensor": prefix}
    if isinstance(value, (list, tuple)):
        return {"$seq": [_flatten(v, f"{prefix}.{i}", tensors) for i, v in enumerate(value)], "tuple": isinstance(value, tuple)}
    if isinstance(value, dict):
        return {"$dict": {k: _flatten(v, f"{prefix}.{k}", tensors) for k, v in value.items()}}
    return {"$value": value}


def _unflatten(node, tensors):
    if "$tensor" in node:
        return tensors[node["$tensor"]]
    if "$seq" in node:
        items = [_unflatten(v, tensors) for v in node["$seq"]]
        return tuple(items) if node["tuple"] else items
    if "$dict" in node:
        return {k: _unflatten(v, tensors) for k, v in node["$dict"].items()}
    return node["$value"]


class RecordingOracle(ReferenceOracle):
    kind = "reference"

    def __init__(self, assignment):
        super().__init__(assignment)
        self.records = {}

    def call(self, name, *args, **kwargs):
        result = super().call(name, *args, **kwargs)
        self.records[call_key(name, args, kwargs)] = result
        return result

    def save(self, directory):
        """Write the records as golden.safetensors (tensors) and golden.json (structure)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors, structure = {}, {}
        for key, result in sorted(self.records.items()):
            structure[key] = _flatten(result, key, tensors)
        save_file(tensors, str(directory / "golden.safetensors"))
        (directory / "golden.json").write_text(json.dumps(structure, sort_keys=True, indent=0))


class GoldenOracle:
    kind = "golden"

    def __init__(self, directory):
        directory = Path(directory)
        self.structure = json.loads((directory / "golden.json").read_text())
        self.tensors = load_file(str(directory / "golden.safetensors"))

    def call(self, name, *args, **kwargs):
        key = call_key(name, args, kwargs)
        if key not in self.structure:
            raise OracleUnavailable(name)
        return _unflatten(self.structure[key], self.tensors)
