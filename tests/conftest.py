"""Fixtures shared by several test modules, and how the suite is shared out among processes.

The README's test command runs on every core (pyproject.toml's addopts: `-n auto --dist loadgroup`,
pytest-xdist). A test of no `xdist_group` goes to whichever process is free; the tests of one group
run in one process, in file order. A module whose tests share a module-scoped fixture is a group,
so that the fixture is set up once; so is each module that uses something beyond its process.
"""

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
    config.addinivalue_line("markers", "slurm: needs a real Slurm (sinfo answers; .ci/run starts scripts/slurm-cluster.sh)")


# What a module's tests use beyond their process, which two processes must not use at once.
SHARED_BEYOND_THE_PROCESS = {
    "test_batch_slurm.py": "the test Slurm cluster, which its tests switch between accounting and none",
    "test_hostile.py": "the machine's process table: an attack's leftover `sleep 1000` is looked for wherever it went",
}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (
                item.path.name in SHARED_BEYOND_THE_PROCESS or _shares_a_module_fixture(item)):
            item.add_marker(pytest.mark.xdist_group(item.path.name))


def _shares_a_module_fixture(item):
    return any(definitions[-1].scope == "module" for definitions in item._fixtureinfo.name2fixturedefs.values())
