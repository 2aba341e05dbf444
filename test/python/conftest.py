import os
from collections.abc import Iterator

# Before lazyfuse reads its settings: in tests a fused kernel that fails to
# compile, load or launch is an error, not a silent fallback to ATen.
os.environ.setdefault("LAZYFUSE_STRICT_KERNELS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import lazyfuse  # noqa: E402


@pytest.fixture
def lazy() -> torch.device:
    return lazyfuse.lazy_device()


@pytest.fixture(autouse=True)
def _fresh_step():
    # Each test starts from a clean step: nothing pending, counters at zero,
    # and no kernel structure seen, as in a new process. Otherwise a kernel
    # an earlier test rendered at another shape comes back shape-generic
    # (LAZYFUSE_DYNAMIC=auto), and what a test sees depends on test order.
    lazyfuse.mark_step()
    lazyfuse.metrics.reset()
    lazyfuse.debug.clear_generic_kernels()
    yield
    lazyfuse.mark_step()


ON_CUDA = lazyfuse.config.backing_device().type == "cuda"

# For tests whose failing step is an out-of-range index.
FAILS_ON_VALUES_ON_THE_CPU_ONLY = pytest.mark.skipif(
    ON_CUDA,
    reason="an out-of-range index is a device-side assert on CUDA, which ends the process's "
    "CUDA context: there is no failing step to recover from",
)
# Eager runs where lazyfuse runs: on a GPU, CUDA eager is the reference, since
# CPU and CUDA eager differ by more than parity tolerances for some ops.
REFERENCE_DEVICE = lazyfuse.config.backing_device().type
# The torch the README's test command installs; generated docs and OpInfo
# claims are written against its op_db, which older releases only partly have.
REFERENCE_TORCH = "2.13.0"
ON_REFERENCE_TORCH = torch.__version__.split("+")[0] == REFERENCE_TORCH
HOST_COMPILER = "host_compiler" in lazyfuse.debug.emulation()
NO_FUSED_KERNELS = "needs a CUDA GPU, or a host C++ compiler to emulate one"


def assert_row_moments_as_accurate_as_eager(
    x: torch.Tensor, var: torch.Tensor, norm: torch.Tensor
) -> None:
    """`var` and `norm`, lazyfuse's var(-1) and layer norm over the rows of
    `x`, err from float64 by at most twice eager's error, plus 1e-9."""
    cols = x.shape[-1]
    for got, eager, exact in (
        (var, x.var(-1), x.double().var(-1)),
        (
            norm,
            torch.nn.functional.layer_norm(x, (cols,)),
            torch.nn.functional.layer_norm(x.double(), (cols,)),
        ),
    ):
        eager_error = (eager.double() - exact).abs().max().item()
        error = (got.cpu().double() - exact).abs().max().item()
        assert error <= 2 * eager_error + 1e-9, (error, eager_error)


@pytest.fixture
def fused_kernels() -> Iterator[None]:
    """Fused kernels natively on a GPU; elsewhere under CUDA emulation. Strict,
    so a kernel failure fails the test instead of falling back to ATen."""
    if ON_CUDA:
        with lazyfuse.config.kernel_settings_as(strict=True):
            yield
    else:
        with lazyfuse.config.kernel_settings_as(emulate_cuda=True, strict=True):
            yield


NO_CPU_KERNELS = "CPU kernels run on the CPU backing device, with a host C++ compiler"


@pytest.fixture
def cpu_kernels() -> Iterator[None]:
    """Fused kernels as native CPU code (the default on the CPU backing
    device), strict."""
    if ON_CUDA or not HOST_COMPILER:
        pytest.skip(NO_CPU_KERNELS)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=True, strict=True):
        yield


@pytest.fixture
def synchronous_steps() -> Iterator[None]:
    """Every step's graph run in its mark_step, on the caller's threads. For
    tests whose oracle is a replay's bits against its traced step's: with
    asynchronous execution the traced step runs on the CPU stream, one
    thread fewer, and ATen's convolution and batch-norm sums split by thread
    count, while a replay runs on the caller."""
    with lazyfuse.config.async_execution_as(False):
        yield


@pytest.fixture
def donation_on() -> Iterator[None]:
    """Buffer donation on, whatever LAZYFUSE_DONATE says: for tests of what
    a run writes over."""
    before = lazyfuse.config.donation()
    lazyfuse.config.set_donation(True)
    try:
        yield
    finally:
        lazyfuse.config.set_donation(before)


@pytest.fixture(params=["aten", "fused", "cpu"])
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """A test three times: ATen steps only; fused kernels (natively on a
    GPU, else emulated CUDA), strict; and CPU kernels, strict. On a GPU the
    first two both run fused kernels: the CUDA backing device always fuses."""
    if request.param == "aten":
        with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=False):
            yield request.param
        return
    if request.param == "cpu":
        if ON_CUDA or not HOST_COMPILER:
            pytest.skip(NO_CPU_KERNELS)
        with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=True, strict=True):
            yield request.param
        return
    if not (ON_CUDA or HOST_COMPILER):
        pytest.skip(NO_FUSED_KERNELS)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=not ON_CUDA, strict=True):
        yield request.param


def graphs_executed() -> int:
    return lazyfuse.metrics.counter_value(lazyfuse.metrics.GRAPHS_EXECUTED)


def pytest_collection_finish(session: pytest.Session) -> None:
    # A lazy tensor made when a test module is imported joins the first graph
    # of whichever test runs first, and its data outlive every test: what a
    # test sees would depend on which modules were collected with it.
    import gc

    made = [
        tuple(o.shape)
        for o in gc.get_objects()
        if isinstance(o, torch.Tensor) and o.device.type == "lazy"
    ]
    if made:
        raise pytest.UsageError(
            f"test modules made lazy tensors at import (shapes {made}); make them in the test"
        )


# The suite's closing lines: each module's tally, and the function that
# words it. Under pytest-xdist the workers fill the tallies and the
# controller, which imports no test module, prints the lines: each worker
# sends its tallies, which the controller adds to its own import of the module.
SUMMARIES = (("test_opinfo", "TALLY", "opinfo_summary"), ("test_fuzz", "_results", "fuzz_summary"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    import sys

    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is None:
        return
    for name, tally, _ in SUMMARIES:
        if name in sys.modules:
            # Plain lists: tuple keys do not survive xdist's channel.
            worker_output[name] = [
                [key, value] for key, value in getattr(sys.modules[name], tally).items()
            ]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    import importlib

    sent = getattr(node, "workeroutput", {})
    for name, tally, _ in SUMMARIES:
        if sent.get(name):
            # A Counter's update adds the worker's counts; a dict's takes its results.
            getattr(importlib.import_module(name), tally).update(
                {tuple(key) if isinstance(key, list) else key: value for key, value in sent[name]}
            )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    import sys

    for name, _, summary in SUMMARIES:
        module = sys.modules.get(name)
        line = getattr(module, summary)() if module else None
        if line:
            terminalreporter.write_line(line)
