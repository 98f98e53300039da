"""Fixtures shared by several test modules, and how the suite is shared out among processes.

The README's test command runs on every core (pyproject.toml's addopts: `-n auto --dist loadgroup`,
pytest-xdist). A test of no `xdist_group` goes to whichever process is free; the tests of one group
run in one process, in file order. A module whose tests share a module-scoped fixture is a group,
so that the fixture is set up once; so is each module that uses something beyond its process.
"""

import os

import pytest
import torch


@pytest.fixture(scope="module")
def one_torch_thread():
    """One CPU thread, as in the sandbox worker: small models gain nothing from more, and on a busy
    machine OpenMP threads spinning on each other made the GRU 30 times slower."""
    from graders.grading import torch_threads

    with torch_threads(1):
        yield


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one process a usable core (a container's CPU quota counted: its affinity may
    list every core of the host), and none beyond what memory holds at 3 GiB a process."""
    from graders.batch.concurrency import usable_cores

    try:
        memory_gib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gib = 3.0
    return max(1, min(usable_cores(), int(memory_gib // 3)))


def pytest_configure(config):
    _share_the_cores_among_the_processes()
    config.addinivalue_line("markers", "slurm: needs a real Slurm (sinfo answers; .ci/run starts scripts/slurm-cluster.sh)")
    # xdist's own marker, for a run without xdist (`-p no:xdist`) too
    config.addinivalue_line("markers", "xdist_group(name): tests that run in one process, in file order")


def _share_the_cores_among_the_processes():
    """Each xdist process gets its share of the cores for torch's own threads. By default every
    process takes them all: on 2 cores, two processes grading in-process spun 4 OpenMP threads on
    each other, and the alternatives of tests/test_mutation.py took 884 s instead of 144 s."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        from graders.batch.concurrency import usable_cores

        torch.set_num_threads(max(1, usable_cores() // workers))


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
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        _name_the_groups_in_the_node_ids(items)


def _name_the_groups_in_the_node_ids(items):
    """What xdist's scheduler groups by: `<node id>@<group>`. pytest-xdist 3.8 writes it into
    `item._nodeid`, which pytest 9 no longer reads (a node's id is `item._id`), so every group
    would be shared out test by test; written here where pytest 9 reads it."""
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        if groups:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


def _shares_a_module_fixture(item):
    return any(definitions[-1].scope == "module" for definitions in item._fixtureinfo.name2fixturedefs.values())
