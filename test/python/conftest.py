import pytest
import torch

import lazyfuse


@pytest.fixture
def lazy() -> torch.device:
    return lazyfuse.lazy_device()


@pytest.fixture(autouse=True)
def _fresh_step():
    # Each test starts from a clean step: nothing pending, counters at zero.
    lazyfuse.mark_step()
    lazyfuse.metrics.reset()
    yield
    lazyfuse.mark_step()


def graphs_executed() -> int:
    return lazyfuse.metrics.counter_value(lazyfuse.metrics.GRAPHS_EXECUTED)
