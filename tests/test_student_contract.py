"""One contract, three implementations: the worker client, the tracked proxy the grading hands
to a check, and the in-process stand-in the check tests use answer the same requests the same
way (graders/checks/contract.py). mypy checks this file's claim that each is a `StudentCode`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from test_sandbox import STUDENT_FILES, TEST_LIMITS, write_package

from graders.checks.contract import StudentCode
from graders.grading import TrackedStudent
from graders.sandbox import StudentError, Worker
from tests.checks_inprocess import InProcessStudent


def as_student_code(worker: Worker, tracked: TrackedStudent, in_process: InProcessStudent) -> list[StudentCode]:
    """Type-checked by mypy: each implementation is accepted where a check expects StudentCode."""
    return [worker, tracked, in_process]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_package(tmp_path_factory.mktemp("contract") / "dana hw", STUDENT_FILES)
    (root / "__init__.py").write_text("")  # the stand-in imports the folder as a package
    return root


@pytest.fixture(scope="module")
def worker(folder: Path) -> Iterator[Worker]:
    with Worker(folder, limits=TEST_LIMITS, require_isolation=False, containment_only=True) as started:
        yield started


IMPLEMENTATIONS: dict[str, Callable[[Path, Worker], StudentCode]] = {
    "worker client": lambda folder, worker: worker,
    "tracked proxy": lambda folder, worker: TrackedStudent(worker),
    "in-process stand-in": lambda folder, worker: InProcessStudent(folder),
}


@pytest.fixture(params=list(IMPLEMENTATIONS))
def student(request: pytest.FixtureRequest, folder: Path, worker: Worker) -> StudentCode:
    return IMPLEMENTATIONS[request.param](folder, worker)


X = torch.arange(12.0).reshape(1, 3, 4) / 10


def outputs_under_seed(student: StudentCode) -> tuple[torch.Tensor, torch.Tensor]:
    """A module built and run under one seed: its output, and the dropout of a function."""
    student.seed(7)
    handle = student.construct("attention", "MultiHeadAttention", 4, 2)
    output = student.call(handle, "__call__", X)
    _, weights = student.call("attention", "scaled_dot_product", torch.ones(1, 1, 8, 2), torch.ones(1, 1, 8, 2),
                              torch.ones(1, 1, 8, 2), 0.5)
    return output, weights


def test_is_a_student_code(student: StudentCode) -> None:
    assert isinstance(student, StudentCode)


def test_objects_stay_and_values_cross(student: StudentCode) -> None:
    student.import_module("attention")
    handle = student.construct("attention", "MultiHeadAttention", 4, 2)
    assert handle.type_name == "attention.MultiHeadAttention"
    assert student.call("values", "echo", 1, "two", key=[3.0, None]) == ((1, "two"), {"key": [3.0, None]})
    assert student.getattr(handle, "training") is True

    state = student.state_dict(handle)
    assert sorted(state) == ["o_proj.bias", "o_proj.weight", "qkv_proj.bias", "qkv_proj.weight"]
    output = student.call(handle, "__call__", X)
    expected = X @ state["o_proj.weight"].T + state["o_proj.bias"]
    assert torch.allclose(output, expected)

    zeros = {name: torch.zeros_like(value) for name, value in state.items()}
    assert student.load_state_dict(handle, zeros) == {"missing_keys": [], "unexpected_keys": []}
    assert torch.equal(student.call(handle, "__call__", X), torch.zeros(1, 3, 4))
    assert student.task("forward", handle, X).requires_grad is False


def test_parameters_list_names_shapes_and_buffers(student: StudentCode) -> None:
    listing = student.parameters(student.construct("attention", "MultiHeadAttention", 4, 2))
    assert [(p["name"], p["shape"], p["requires_grad"]) for p in listing["parameters"]] == [
        ("qkv_proj.weight", [12, 4], True), ("qkv_proj.bias", [12], True),
        ("o_proj.weight", [4, 4], True), ("o_proj.bias", [4], True)]
    assert [(b["name"], b["persistent"]) for b in listing["buffers"]] == [("scale", False)]


def test_the_student_raising_is_a_student_error(student: StudentCode) -> None:
    with pytest.raises(StudentError) as caught:
        student.call("values", "fails")
    assert caught.value.exc_type == "ValueError"


def test_one_seed_gives_the_same_draws_everywhere(student: StudentCode, folder: Path) -> None:
    output, weights = outputs_under_seed(student)
    again_output, again_weights = outputs_under_seed(student)
    assert torch.equal(output, again_output) and torch.equal(weights, again_weights)
    assert (weights == 0).any() and (weights == 0.25).any()  # dropout at 0.5 over 8 keys: 0 or 2 x 1/8
    reference: Any = outputs_under_seed(InProcessStudent(folder))
    assert torch.equal(output, reference[0]) and torch.equal(weights, reference[1])
