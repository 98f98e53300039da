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
