"""lazyfuse's pytest plugin, registered through the ``pytest11`` entry point,
so installing lazyfuse is enough. Needs pytest 8 or later.

A top-level module, not part of the lazyfuse package: pytest loads every
installed plugin in every run, and importing anything inside ``lazyfuse``
initialises its backend, which a project that never uses lazyfuse (or uses
torch._lazy's TorchScript backend, which cannot share a process with it)
must not pay for.

- Fixtures: ``lazy_device`` (``lazyfuse.lazy_device()``) and
  ``lazyfuse_metrics`` (what the test has compiled, run and sent to eager).
- ``@pytest.mark.lazyfuse_no_fallback`` fails a test in which any op falls
  back to eager on the lazy device.
- ``pytest --lazyfuse-emulate`` runs fused kernels under CUDA emulation on a
  machine without a GPU, strictly: a kernel that fails fails the test.
- At the end of the run: graphs compiled and run, kernel launches, and the
  eager fallbacks per op, summed over pytest-xdist's workers.

Nothing here imports lazyfuse until a test uses it, so projects that never
do pay nothing.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

NO_FALLBACK = "lazyfuse_no_fallback"


@dataclass
class Snapshot:
    """lazyfuse's counters at one moment."""

    fallbacks: dict[str, int]
    compiled: int
    executed: int
    launches: int

    @staticmethod
    def take() -> Snapshot:
        import lazyfuse

        metrics = lazyfuse.metrics
        return Snapshot(
            dict(metrics.fallback_counts()),
            metrics.counter_value("UncachedCompile"),
            metrics.counter_value(metrics.GRAPHS_EXECUTED),
            metrics.counter_value("LazyFuseKernelLaunches"),
        )

    def since(self, earlier: Snapshot) -> Snapshot:
        """What happened after `earlier`; a counter reset in between counts
        from the reset."""

        def grown(now: int, before: int) -> int:
            return now - before if now >= before else now

        fallbacks = {op: grown(n, earlier.fallbacks.get(op, 0)) for op, n in self.fallbacks.items()}
        return Snapshot(
            {op: n for op, n in fallbacks.items() if n > 0},
            grown(self.compiled, earlier.compiled),
            grown(self.executed, earlier.executed),
            grown(self.launches, earlier.launches),
        )


@dataclass
class RunTotals:
    fallbacks: Counter[str] = field(default_factory=Counter)
    compiled: int = 0
    executed: int = 0
    launches: int = 0
    tests: int = 0

    def add(self, change: Snapshot) -> None:
        self.fallbacks.update(change.fallbacks)
        self.compiled += change.compiled
        self.executed += change.executed
        self.launches += change.launches
        self.tests += 1

    def as_dict(self) -> dict[str, Any]:
        """Plain values, which pytest-xdist can send from a worker."""
        return {
            "fallbacks": dict(self.fallbacks),
            "compiled": self.compiled,
            "executed": self.executed,
            "launches": self.launches,
            "tests": self.tests,
        }

    def merge(self, worker: dict[str, Any]) -> None:
        self.fallbacks.update(worker["fallbacks"])
        self.compiled += worker["compiled"]
        self.executed += worker["executed"]
        self.launches += worker["launches"]
        self.tests += worker["tests"]


TOTALS = pytest.StashKey[RunTotals]()


class LazyfuseMetrics:
    """The ``lazyfuse_metrics`` fixture: counts since the test began."""

    def __init__(self) -> None:
        self._start = Snapshot.take()

    def _now(self) -> Snapshot:
        return Snapshot.take().since(self._start)

    def fallbacks(self) -> dict[str, int]:
        """Eager fallbacks per op ("aten::nonzero": 2)."""
        return self._now().fallbacks

    def graphs_compiled(self) -> int:
        return self._now().compiled

    def graphs_executed(self) -> int:
        return self._now().executed

    def kernel_launches(self) -> int:
        """Fused kernel launches (0 when every step ran as an ATen call)."""
        return self._now().launches


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lazyfuse")
    group.addoption(
        "--lazyfuse-emulate",
        action="store_true",
        help="run lazyfuse's fused kernels under CUDA emulation on the CPU, strictly",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{NO_FALLBACK}: fail the test if an op falls back to eager on the lazy device"
    )
    config.stash[TOTALS] = RunTotals()
    if config.getoption("lazyfuse_emulate"):
        os.environ["LAZYFUSE_EMULATE_CUDA"] = "1"
        os.environ["LAZYFUSE_STRICT_KERNELS"] = "1"
        lazyfuse = sys.modules.get("lazyfuse")
        if lazyfuse is not None:  # imported by a conftest: its settings are read
            settings = lazyfuse.config.kernel_settings()
            lazyfuse.config.set_kernel_settings(
                dataclasses.replace(settings, emulate_cuda=True, strict=True)
            )


@pytest.fixture
def lazy_device() -> Any:
    import lazyfuse

    return lazyfuse.lazy_device()


@pytest.fixture
def lazyfuse_metrics() -> LazyfuseMetrics:
    return LazyfuseMetrics()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    marked = item.get_closest_marker(NO_FALLBACK) is not None
    if marked:
        import lazyfuse  # noqa: F401
    if "lazyfuse" not in sys.modules:
        return (yield)
    before = Snapshot.take()
    try:
        result = yield
    finally:
        change = Snapshot.take().since(before)
        item.config.stash[TOTALS].add(change)
    if marked and change.fallbacks:
        ops = ", ".join(f"{op} ({n}x)" for op, n in sorted(change.fallbacks.items()))
        pytest.fail(
            f"lazyfuse: ops fell back to eager in a test marked {NO_FALLBACK}: {ops}. "
            "docs/ops.md lists the ops with lazy lowerings.",
            pytrace=False,
        )
    return result


WORKER_TOTALS = "lazyfuse_totals"


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist the tests ran in workers, and the controller prints
    # the summary: each worker sends it its totals.
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output[WORKER_TOTALS] = session.config.stash[TOTALS].as_dict()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's hook in the controller: a worker has finished."""
    sent = getattr(node, "workeroutput", {}).get(WORKER_TOTALS)
    if sent:
        node.config.stash[TOTALS].merge(sent)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    totals = terminalreporter.config.stash.get(TOTALS, None)
    if totals is None or totals.tests == 0:
        return
    terminalreporter.section("lazyfuse")
    terminalreporter.write_line(
        f"{totals.tests} tests ran with lazyfuse loaded: {totals.compiled} graphs compiled, "
        f"{totals.executed} run, {totals.launches} fused kernel launches"
    )
    if totals.fallbacks:
        ops = ", ".join(f"{op} {n}" for op, n in totals.fallbacks.most_common())
        terminalreporter.write_line(f"eager fallbacks per op: {ops}")
    else:
        terminalreporter.write_line("eager fallbacks: none")
