"""Asynchronous execution on the CPU backing device (the default; off with
LAZYFUSE_ASYNC=0):
mark_step hands its graph to the CPU stream and returns, so the next step
traces while the graph runs. Values must be eager's; a read waits for the
graph; a failure surfaces at the next read, mark_step(wait=True) or
wait_device_ops, and loses nothing."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from multiprocessing.queues import Queue

import pytest
import torch
import torch._lazy
import torch.nn.functional as F

import lazyfuse
from conftest import HOST_COMPILER, NO_CPU_KERNELS, ON_CUDA
from lazyfuse.demo import LeNet5

pytestmark = pytest.mark.skipif(
    ON_CUDA, reason="asynchronous execution is the CPU backing device's; CUDA streams are already"
)

STREAM_RUNS = "LazyFuseStreamRuns"
STREAM_FAILURES = "LazyFuseStreamRunFailures"


@pytest.fixture(autouse=True)
def asynchronous() -> Iterator[None]:
    with lazyfuse.config.async_execution_as(True):
        yield


@pytest.fixture(params=["aten", "cpu"])
def steps(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "aten":
        with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=False):
            yield request.param
        return
    if not HOST_COMPILER:
        pytest.skip(NO_CPU_KERNELS)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=True, strict=True):
        yield request.param


def counter(name: str) -> int:
    return lazyfuse.metrics.counter_value(name)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )


def test_training_matches_eager_with_every_graph_on_the_stream(steps: str, lazy) -> None:
    eager, ours = model(), model().to(lazy)
    eager_opt = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    our_opt = torch.optim.AdamW(ours.parameters(), lr=1e-2)
    torch.manual_seed(1)
    batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(6)]
    eager_losses, our_losses = [], []
    for x, y in batches:
        for net, opt, losses, device in (
            (eager, eager_opt, eager_losses, "cpu"),
            (ours, our_opt, our_losses, lazy),
        ):
            opt.zero_grad()
            loss = F.cross_entropy(net(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            losses.append(loss)
        lazyfuse.mark_step()
    assert counter(STREAM_RUNS) == len(batches)
    # Read after later steps ran: each loss keeps its own step's value.
    torch.testing.assert_close([loss.cpu() for loss in our_losses], eager_losses)
    for mine, theirs in zip(ours.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(mine.cpu(), theirs)


def test_parameters_are_still_updated_in_place(lazy) -> None:
    # Donation decides once the previous step's values exist: a step whose
    # parameters are still in flight waits for them, then donates them.
    before = lazyfuse.config.donation()
    lazyfuse.config.set_donation(True)
    try:
        net = model().to(lazy)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            net(torch.randn(4, 16).to(lazy)).square().mean().backward()
            opt.step()
            lazyfuse.mark_step()
        assert counter(STREAM_RUNS) == 3
        assert counter("LazyFuseDonatedParameters") > 0
    finally:
        lazyfuse.config.set_donation(before)


def test_reads_and_partial_syncs_see_the_latest_values(lazy) -> None:
    x = torch.arange(6.0).to(lazy)
    for k in range(4):
        x = x * 2 + 1
        lazyfuse.mark_step()
        expected = torch.arange(6.0)
        for _ in range(k + 1):
            expected = expected * 2 + 1
        # .cpu() and .item() sync only what they read, synchronously, from
        # values a stream graph is still computing.
        torch.testing.assert_close(x.cpu(), expected)
        assert (x.sum() + 0).item() == expected.sum().item()


def test_a_failing_graph_raises_at_the_next_read_and_loses_nothing(steps: str, lazy) -> None:
    base = torch.arange(4.0).to(lazy)
    good = base * 3
    bad = base.index_select(0, torch.tensor([0, 99]).to(lazy))
    lazyfuse.mark_step()  # returns before the graph has run, so cannot raise its failure
    with pytest.raises(IndexError, match=r"(?s)index_select.*index out of range.*CPU stream"):
        bad.cpu()
    assert counter(STREAM_FAILURES) == 1
    # Every value the graph computes stays pending: with the tensor whose
    # step fails gone, the rest of the graph runs on the next read.
    del bad
    torch.testing.assert_close(good.cpu(), torch.arange(4.0) * 3)
    torch.testing.assert_close(base.cpu(), torch.arange(4.0))
    lazyfuse.mark_step(wait=True)  # the failure was read and resolved: nothing to report
    torch.testing.assert_close((good + 1).cpu(), torch.arange(4.0) * 3 + 1)


@pytest.mark.parametrize("wait", ["mark_step", "lazyfuse", "torch._lazy"])
def test_a_wait_raises_the_failure_of_an_earlier_graph(wait: str, lazy) -> None:
    base = torch.arange(4.0).to(lazy)
    bad = base.index_select(0, torch.tensor([5]).to(lazy))
    lazyfuse.mark_step()
    message = r"(?s)failed when it ran.*Nothing is lost"
    with pytest.raises(RuntimeError, match=message):
        if wait == "mark_step":
            lazyfuse.mark_step(wait=True)
        elif wait == "lazyfuse":
            lazyfuse.wait_device_ops()
        else:
            torch._lazy.wait_device_ops()
    with pytest.raises(IndexError, match="index out of range"):
        bad.cpu()  # the same failure again: its input has not changed
    del bad
    torch.testing.assert_close(base.cpu(), torch.arange(4.0))
    lazyfuse.wait_device_ops()  # the failed graph's results are gone: nothing left to report


def test_the_next_step_that_reads_a_failed_result_fails_and_keeps_its_own(lazy) -> None:
    base = torch.arange(4.0).to(lazy)
    bad = base.index_select(0, torch.tensor([7]).to(lazy))
    lazyfuse.mark_step()
    after = bad + 1
    # The next graph reads `bad`, so it first runs the failed graph's rest
    # again, on this thread: that fails, and this mark_step raises it.
    with pytest.raises(IndexError, match=r"(?s)index out of range.*CPU stream"):
        lazyfuse.mark_step()
    with pytest.raises(IndexError, match="index out of range"):
        after.cpu()  # its IR was kept: nothing of the step is lost
    bad = base.index_select(0, torch.tensor([1]).to(lazy))  # the user repairs the input
    after = bad + 1
    lazyfuse.mark_step()
    torch.testing.assert_close(after.cpu(), torch.tensor([2.0]))


def test_off_runs_each_graph_in_mark_step(lazy) -> None:
    lazyfuse.config.set_async_execution(False)
    x = torch.ones(3).to(lazy) * 2
    lazyfuse.mark_step()
    assert counter(STREAM_RUNS) == 0
    torch.testing.assert_close(x.cpu(), torch.full((3,), 2.0))


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("read", ["cpu", "item", "sync_multi"])
def test_a_failed_read_does_not_fail_the_next_unrelated_one(mode: str, read: str, lazy) -> None:
    # LTC keeps a graph's failure on the device, to raise at the next sync of
    # anything; lazyfuse raised it already, so an unrelated read must not
    # fail with it (it did, before ClearKeptFailure).
    lazyfuse.config.set_async_execution(mode == "async")
    bad = (torch.arange(4.0).to(lazy).index_select(0, torch.tensor([9]).to(lazy)) + 1).sum()
    with pytest.raises(IndexError, match="index out of range"):
        if read == "cpu":
            bad.cpu()
        elif read == "item":
            bad.item()
        else:
            torch._lazy.sync_multi([bad], [])
    del bad
    other = torch.ones(2).to(lazy) * 3
    torch.testing.assert_close(other.cpu(), torch.full((2,), 3.0))
    lazyfuse.mark_step(wait=True)


def lenet() -> torch.nn.Module:
    torch.manual_seed(0)
    return LeNet5()


def transformer_layer() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 32, 4),
    )


@pytest.mark.parametrize(
    "build, shape",
    [(lenet, (4, 1, 28, 28)), (transformer_layer, (4, 8, 32))],
    ids=["lenet5", "transformer_layer"],
)
def test_models_train_like_eager(steps: str, build, shape, lazy) -> None:
    eager, ours = build(), build().to(lazy)
    # SGD: Adam turns the rounding noise of a gradient that is zero in exact
    # arithmetic (attention's key bias) into full-size steps, in sync mode too.
    eager_opt = torch.optim.SGD(eager.parameters(), lr=1e-2, momentum=0.9)
    our_opt = torch.optim.SGD(ours.parameters(), lr=1e-2, momentum=0.9)
    torch.manual_seed(2)
    for _ in range(4):
        x, y = torch.randn(shape), torch.randint(0, 4, (shape[0],))
        for net, opt, device in ((eager, eager_opt, "cpu"), (ours, our_opt, lazy)):
            opt.zero_grad()
            F.cross_entropy(net(x.to(device))[:, :4], y.to(device)).backward()
            opt.step()
        lazyfuse.mark_step()
    assert counter(STREAM_RUNS) == 4
    for mine, theirs in zip(ours.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(mine.cpu(), theirs, rtol=1e-4, atol=1e-5)


def test_emulated_cuda_kernels_run_on_the_stream(lazy) -> None:
    if not HOST_COMPILER:
        pytest.skip(NO_CPU_KERNELS)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=True, strict=True):
        x = torch.randn(64, 33)
        y = (x.to(lazy) * 2).softmax(-1) + 1
        lazyfuse.mark_step()
        torch.testing.assert_close(y.cpu(), (x * 2).softmax(-1) + 1)
        assert counter(STREAM_RUNS) == 1
        assert counter("LazyFuseKernelLaunches") > 0


def test_a_base_read_after_its_view_is_gone_is_made_from_the_view(lazy) -> None:
    # The graph returns `base` as a function of its view `view`
    # (runtime/result_aliases.h). With the view dropped, the rest of the
    # failed graph must still compute the view, which the base is made from.
    x = torch.randn(3, 4)
    lazy_x = x.to(lazy)
    bad = lazy_x.index_select(0, torch.tensor([11]).to(lazy))  # fails before the view runs
    base = lazy_x * 2
    view = base.t()
    lazyfuse.mark_step()
    assert "derived: result" in lazyfuse.debug.last_program()
    del view, bad
    torch.testing.assert_close(base.cpu(), x * 2)


def _child_reads_a_lazy_value(queue: Queue) -> None:
    y = torch.arange(4.0).to(lazyfuse.lazy_device()) * 3
    lazyfuse.mark_step()
    queue.put(y.cpu().tolist())


def test_a_process_forked_while_a_graph_runs_can_run_graphs(lazy) -> None:
    # A fork (a DataLoader's workers) copies no stream thread: the stream is
    # idle first, so the child inherits no lock that thread held.
    context = multiprocessing.get_context("fork")
    x = torch.randn(512, 4096).to(lazy)
    for _ in range(4):
        big = (x * 2).exp().sum(1)  # allocates while the child forks
        lazyfuse.mark_step()
        queue = context.Queue()
        child = context.Process(target=_child_reads_a_lazy_value, args=(queue,))
        child.start()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
        assert child.exitcode == 0, "the forked child hung or failed"
        assert queue.get(timeout=5) == [0.0, 3.0, 6.0, 9.0]
        del big


def test_a_result_dropped_after_its_run_frees_its_memory(lazy) -> None:
    # The run keeps each result until its data takes it. A result whose last
    # tensor goes after the run must go too: kept, it counted as a second
    # reader, and the next step did not donate it (a training step held a
    # second copy of some parameters, depending on which thread was first).
    if not HOST_COMPILER:
        pytest.skip(NO_CPU_KERNELS)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=True, strict=True):
        x = torch.randn(1 << 20)
        lazy_x = x.to(lazy)
        lazyfuse.mark_step(wait=True)
        keep, drop = lazy_x + 1, lazy_x * 3
        lazyfuse.mark_step()
        lazyfuse.wait_device_ops()
        before = lazyfuse.metrics.cpu_output_cache()["in_use_bytes"]
        del drop
        after = lazyfuse.metrics.cpu_output_cache()["in_use_bytes"]
        assert before - after == 4 << 20
        torch.testing.assert_close(keep.cpu(), x + 1)


@pytest.mark.parametrize("env, expected", [(None, "on"), ("0", "off"), ("1", "on")])
def test_on_by_default_with_two_cores_and_off_with_the_switch(
    env: str | None, expected: str
) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "LAZYFUSE_ASYNC"}
    if env is not None:
        environ["LAZYFUSE_ASYNC"] = env
    elif (os.cpu_count() or 1) < 2:
        expected = "off"  # one core: the trace would only take turns with the graph
    out = subprocess.run(
        [sys.executable, "-c", "import lazyfuse; print(lazyfuse.config.async_execution())"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == {"on": "True", "off": "False"}[expected]


def test_a_wait_says_when_a_failed_graph_lost_its_values(lazy) -> None:
    # A kernel that failed once it may have written over its input cannot
    # run again: the wait must say the values are lost, not that nothing is.
    if not HOST_COMPILER:
        pytest.skip(NO_CPU_KERNELS)
    host_p = torch.randn(64)
    p = host_p.to(lazy)
    lazyfuse.mark_step(wait=True)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=True, strict=True):
        p.mul_(3).add_(1)
        lazyfuse._C._inject_kernel_faults(True, after_writing=True)
        try:
            lazyfuse.mark_step()
            with pytest.raises(RuntimeError, match=r"(?s)cannot be made again.*began writing"):
                lazyfuse.wait_device_ops()
        finally:
            lazyfuse._C._inject_kernel_faults(False)
        assert counter(STREAM_FAILURES) == 1
        # Raised once, by that wait: a second wait, and a read of another
        # value (which syncs every live tensor, p still among them), go on.
        lazyfuse.wait_device_ops()
        other = torch.arange(3.0).to(lazy) + 1
        torch.testing.assert_close(other.cpu(), torch.arange(3.0) + 1)
        for _ in range(2):
            with pytest.raises(RuntimeError, match="this value was lost.*began writing") as raised:
                p.cpu()
            assert "ran its rest again" not in str(raised.value)
        p = host_p.to(lazy)
        p.mul_(3).add_(1)
        lazyfuse.mark_step()
        torch.testing.assert_close(p.cpu(), host_p * 3 + 1)


# Each wait below follows a graph handed to the stream under a saved-tensors
# hook, which the run's thread-local state holds: the run needs the GIL to
# drop it. A wait that held the GIL hung there (a Gloo worker freeing an
# eager collective's tensors did the same in a 2-rank DDP test).
WAITS_HOLDING_NO_GIL = """
import faulthandler, os, torch, lazyfuse
lazyfuse.config.set_async_execution(True)
lazy = lazyfuse.lazy_device()

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0

def track_memory():
    with lazyfuse.metrics.track_memory():
        pass

WAITS = {
    "metrics.counter_value": lambda t: lazyfuse.metrics.counter_value("LazyFuseStreamRuns"),
    "metrics.counters": lambda t: lazyfuse.metrics.counters(),
    "metrics.metric_names": lambda t: lazyfuse.metrics.metric_names(),
    "metrics.steps_per_graph": lambda t: lazyfuse.metrics.steps_per_graph(),
    "metrics.report": lambda t: lazyfuse.metrics.report(),
    "metrics.cpu_output_cache": lambda t: lazyfuse.metrics.cpu_output_cache(),
    "metrics.track_memory": lambda t: track_memory(),
    "metrics.clear_all": lambda t: lazyfuse.metrics.clear_all(),
    "debug.data_address": lambda t: lazyfuse.debug.data_address(t),
    "wait_device_ops": lambda t: lazyfuse.wait_device_ops(),
    "mark_step(wait=True)": lambda t: lazyfuse.mark_step(wait=True),
    "os.fork": lambda t: fork(),
    "Tensor.cpu": lambda t: t.cpu(),
    "Tensor.tolist": lambda t: t.tolist(),
    "Tensor.item": lambda t: t[0, 0].item(),
    "float": lambda t: float(t.sum()),
    "a tensor in an if": lambda t: 1 if t.sum() > 0 else 0,
    "print": lambda t: print(t),
}
with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
    for name, wait in WAITS.items():
        t = torch.randn(96, 96).to(lazy)
        for _ in range(6):
            t = (t @ t).tanh()
        lazyfuse.mark_step()
        print("waiting in", name, flush=True)
        faulthandler.dump_traceback_later(30, exit=True)
        wait(t)
        faulthandler.cancel_dump_traceback_later()
print("every wait returned")
"""


def test_waits_from_python_let_go_of_the_gil() -> None:
    environ = {k: v for k, v in os.environ.items() if k != "LAZYFUSE_ASYNC"}
    out = subprocess.run(
        [sys.executable, "-c", WAITS_HOLDING_NO_GIL],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    waits = [line for line in out.stdout.splitlines() if line.startswith("waiting in")]
    assert out.returncode == 0 and "every wait returned" in out.stdout, (
        f"hung or failed {waits[-1] if waits else 'before the first wait'}:\n{out.stderr[-3000:]}"
    )
