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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    import sys

    module = sys.modules.get("test_opinfo")
    line = module.opinfo_summary() if module else None
    if line:
        terminalreporter.write_line(line)
