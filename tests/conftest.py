"""Fixtures shared by several test modules."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_torch_thread():
    """One CPU thread, as in the sandbox worker: small models gain nothing from more, and on a busy
    machine OpenMP threads spinning on each other made the GRU 30 times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_configure(config):
    """Module-scoped fixtures grade too, before any test's own fixtures run."""
    config.addinivalue_line("markers", "slurm: needs a real Slurm (sinfo answers; .ci/run starts scripts/slurm-cluster.sh)")
    from graders import assignment
    from tests.course import HOMEWORK

    assignment._remember(HOMEWORK)


@pytest.fixture(autouse=True)
def the_homework_unless_chosen(monkeypatch):
    """Engine calls made in this process without an assignment grade the suite's HOMEWORK (three
    packs are installed, so nothing would be the default); a test that grades another pack says
    so (`select` or an explicit `assignment=`). Whatever a test selects, and the GRADE_ASSIGNMENT
    it exports, ends with it."""
    from graders import assignment
    from tests.course import HOMEWORK

    monkeypatch.setattr(assignment, "_selected", [HOMEWORK])
    monkeypatch.delenv(assignment.ENVIRONMENT_VARIABLE, raising=False)
