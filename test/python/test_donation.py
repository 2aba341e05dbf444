"""Buffer donation: at mark_step, a fused kernel or a pointwise ATen step
writes a result over the memory of a parameter that nothing else will read,
so optimizer steps update in place. Values must match eager and the same run
with donation off, and memory that anything can still read must never be
written. Tests parametrized on `steps` run on both."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from conftest import FAILS_ON_VALUES_ON_THE_CPU_ONLY, HOST_COMPILER, NO_FUSED_KERNELS, ON_CUDA

pytestmark = pytest.mark.skipif(not (ON_CUDA or HOST_COMPILER), reason=NO_FUSED_KERNELS)

DONATED = "LazyFuseDonatedParameters"


# On a GPU both run fused kernels: the CUDA backing device always fuses.
BOTH_STEPS = pytest.mark.parametrize("steps", ["fused", "aten"])


@pytest.fixture(autouse=True)
def kernels(fused_kernels: None, request: pytest.FixtureRequest) -> Iterator[None]:
    callspec = getattr(request.node, "callspec", None)
    aten = callspec is not None and callspec.params.get("steps") == "aten"
    before = lazyfuse.config.donation()
    lazyfuse.config.set_donation(True)
    try:
        if aten:
            with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=False):
                yield
        else:
            yield
    finally:
        lazyfuse.config.set_donation(before)


def donated() -> int:
    return lazyfuse.metrics.counter_value(DONATED)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )


OPTIMIZERS: dict[str, Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]] = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
}


def train(device: torch.device, optimizer: str, steps: int = 3) -> list[torch.Tensor]:
    net = model().to(device)
    opt = OPTIMIZERS[optimizer](list(net.parameters()))
    torch.manual_seed(1)
    x = torch.randn(8, 16).to(device)
    y = torch.randn(8, 4).to(device)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(net(x), y).backward()
        opt.step()
        if device.type == "lazy":
            lazyfuse.mark_step()
    state = [t for s in opt.state.values() for t in s.values() if t.dim() > 0]
    return [p.detach().cpu() for p in net.parameters()] + [t.cpu() for t in state]


@BOTH_STEPS
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_optimizer_updates_in_place_and_matches_eager(optimizer: str, steps: str) -> None:
    eager = train(torch.device("cpu"), optimizer)
    lazyfuse.config.set_donation(False)
    kept = train(lazyfuse.lazy_device(), optimizer)
    assert donated() == 0
    lazyfuse.config.set_donation(True)
    in_place = train(lazyfuse.lazy_device(), optimizer)
    # Every step writes all 6 parameters and their state in place (momentum's
    # buffers exist from the first step's end). SGD updates each bias in its
    # gradient's reduction kernel, whose epilogue takes the bias's memory;
    # Adam's kernels write the weight and both moments over their inputs.
    expected = {"sgd": 3 * 6, "momentum": 6 + 2 * 12, "adam": 3 * 18, "adamw": 3 * 18}
    assert donated() >= expected[optimizer]
    for a, b, c in zip(eager, kept, in_place, strict=True):
        torch.testing.assert_close(c, b, rtol=0, atol=0)
        torch.testing.assert_close(c, a, rtol=1e-4, atol=1e-5)


def lazy_pair(size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    p = torch.randn(size).to(lazyfuse.lazy_device())
    g = torch.randn(size).to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    return p, g


@BOTH_STEPS
def test_memory_is_reused(steps: str) -> None:
    p, g = lazy_pair()
    address = lazyfuse.debug.data_address(p)
    p.sub_(g * 0.5)
    lazyfuse.mark_step()
    assert donated() == 1
    assert lazyfuse.debug.data_address(p) == address


@BOTH_STEPS
def test_an_update_chain_stays_in_its_parameters_memory(steps: str) -> None:
    # On ATen steps each op of the chain writes over the one before it.
    p, g = lazy_pair()
    expected = (p.cpu() * 0.9 + 0.1 * g.cpu()).exp()
    address = lazyfuse.debug.data_address(p)
    p.mul_(0.9).add_(g, alpha=0.1).exp_()
    lazyfuse.mark_step()
    assert lazyfuse.debug.data_address(p) == address
    assert donated() == 1
    in_place = lazyfuse.metrics.counter_value("LazyFuseInPlaceOutputs")
    assert in_place == (3 if steps == "aten" and not ON_CUDA else 1)
    torch.testing.assert_close(p.cpu(), expected)


@pytest.mark.parametrize("keepdim", [False, True])
def test_a_reduction_epilogue_updates_in_place(keepdim: bool) -> None:
    # A bias's SGD step runs in its gradient's sum kernel, at the row just
    # reduced; a keepdim sum's [1, n] row and the [n] bias share a layout.
    torch.manual_seed(0)
    g, b = torch.randn(8, 32), torch.randn(32)
    lazy_g, lazy_b = g.to(lazyfuse.lazy_device()), b.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    address = lazyfuse.debug.data_address(lazy_b)
    lazy_b.add_(lazy_g.sum(0, keepdim=keepdim).view(32), alpha=-0.1)
    lazyfuse.mark_step()
    assert donated() == 1
    assert lazyfuse.debug.data_address(lazy_b) == address
    torch.testing.assert_close(lazy_b.cpu(), b - 0.1 * g.sum(0))
    # The prologue reads every row: an input read there keeps its memory.
    b = b - 0.1 * g.sum(0)
    lazy_b.add_((lazy_g * lazy_b).sum(0), alpha=-0.1)
    lazyfuse.mark_step()
    assert donated() == 1
    torch.testing.assert_close(lazy_b.cpu(), b - 0.1 * (g * b).sum(0))


def test_a_reduction_writes_several_outputs_in_place() -> None:
    # A bias's momentum step in its gradient's sum kernel (the buffer's
    # scaling joins the epilogue): the buffer reaches both the new buffer and
    # the new bias. The row's results are computed before either is stored,
    # so both take their inputs' memory; so do two outputs of softmax's
    # elements.
    torch.manual_seed(0)
    g, b, buf = torch.randn(8, 32), torch.randn(32), torch.randn(32)
    lazy = [t.to(lazyfuse.lazy_device()) for t in (g, b, buf)]
    lazy_g, lazy_b, lazy_buf = lazy
    lazyfuse.mark_step()
    addresses = [lazyfuse.debug.data_address(t) for t in (lazy_b, lazy_buf)]
    lazy_buf.mul_(0.9).add_(lazy_g.sum(0))
    lazy_b.sub_(lazy_buf, alpha=0.1)
    lazyfuse.mark_step()
    assert donated() == 2
    assert [lazyfuse.debug.data_address(t) for t in (lazy_b, lazy_buf)] == addresses
    buf = buf * 0.9 + g.sum(0)
    torch.testing.assert_close(lazy_buf.cpu(), buf)
    torch.testing.assert_close(lazy_b.cpu(), b - 0.1 * buf)

    x, r, s = torch.randn(4, 64), torch.randn(4, 64), torch.randn(4, 64)
    lazy_x, lazy_r, lazy_s = (t.to(lazyfuse.lazy_device()) for t in (x, r, s))
    lazyfuse.mark_step()
    lazy_r.add_(torch.softmax(lazy_x, -1))
    lazy_s.mul_(lazy_r)
    lazyfuse.mark_step()
    assert donated() == 2 + 2
    r = r + torch.softmax(x, -1)
    torch.testing.assert_close(lazy_r.cpu(), r)
    torch.testing.assert_close(lazy_s.cpu(), s * r)


@BOTH_STEPS
def test_a_host_copy_keeps_the_old_value(steps: str) -> None:
    p, g = lazy_pair()
    old = p.cpu()
    before = old.clone()
    p.add_(g)
    lazyfuse.mark_step()
    torch.testing.assert_close(old, before, rtol=0, atol=0)
    torch.testing.assert_close(p.cpu(), before + g.cpu())


@BOTH_STEPS
def test_a_saved_alias_sees_the_update_as_in_eager(steps: str) -> None:
    p, g = lazy_pair()
    alias = p.view(8, 8)
    detached = p.detach()
    expected = p.cpu() + g.cpu()
    p.add_(g)
    lazyfuse.mark_step()
    torch.testing.assert_close(alias.cpu(), expected.view(8, 8))
    torch.testing.assert_close(detached.cpu(), expected)


@BOTH_STEPS
def test_a_value_read_before_mark_step_is_not_overwritten(steps: str) -> None:
    p, g = lazy_pair()
    old = p * 1  # IR that reads the old value, synced below by a read of its own
    q = p + 0
    p.add_(g)
    total = q.sum().item()  # syncs every live tensor, old's IR included
    lazyfuse.mark_step()
    expected_old = q.cpu()
    torch.testing.assert_close(old.cpu(), expected_old)
    torch.testing.assert_close(expected_old.sum().item(), total)
    torch.testing.assert_close(p.cpu(), expected_old + g.cpu())


@BOTH_STEPS
def test_an_input_read_by_two_kernels_is_taken_by_neither_before_its_last_read(steps: str) -> None:
    p, g = lazy_pair(48)
    host_p, host_g = p.cpu().clone(), g.cpu()
    total = p.sum()  # a reduction kernel reads the old p as well as the update
    scaled = p * 3  # and a pointwise kernel that is not the update
    p.mul_(0.5).add_(g)
    lazyfuse.mark_step()
    torch.testing.assert_close(total.cpu(), host_p.sum())
    torch.testing.assert_close(scaled.cpu(), host_p * 3)
    torch.testing.assert_close(p.cpu(), host_p * 0.5 + host_g)


@BOTH_STEPS
def test_no_donation_for_partial_syncs(steps: str) -> None:
    p, g = lazy_pair()
    expected = p.cpu() + g.cpu()
    old = p * 1  # IR that still reads p's old data after the sync below
    p.add_(g)
    torch._lazy.sync_multi([p], [])  # syncs p alone
    assert donated() == 0
    torch.testing.assert_close(p.cpu(), expected)
    torch.testing.assert_close(old.cpu(), expected - g.cpu())


@BOTH_STEPS
def test_a_read_syncs_every_live_tensor_so_may_donate(steps: str) -> None:
    p, g = lazy_pair()
    expected = p.cpu() + g.cpu()
    p.add_(g)
    # Reading another value syncs p too, as mark_step would, so nothing is
    # left to read p's old data: the update may take its memory.
    assert g.sum().item() == pytest.approx(g.cpu().sum().item(), rel=1e-5)
    assert donated() == 1
    torch.testing.assert_close(p.cpu(), expected)


@pytest.fixture
def fault_after_first_launch() -> Iterator[None]:
    lazyfuse._C._inject_kernel_faults(True, after_launches=1)
    try:
        yield
    finally:
        lazyfuse._C._inject_kernel_faults(False)


def test_failure_after_an_in_place_write_keeps_every_value(
    fault_after_first_launch: None,
) -> None:
    torch.manual_seed(0)
    host_p, host_r = torch.randn(24), torch.randn(5, 7)
    p, r = host_p.to(lazyfuse.lazy_device()), host_r.to(lazyfuse.lazy_device())
    lazyfuse._C._inject_kernel_faults(False)
    lazyfuse.mark_step()
    lazyfuse._C._inject_kernel_faults(True, after_launches=1)
    p.mul_(3).add_(1)
    r.mul_(2).sub_(1)
    with pytest.raises(RuntimeError, match="buffer donation.*Nothing is lost"):
        lazyfuse.mark_step(wait=True)
    # The graph wrote one update in place before the second kernel failed.
    assert donated() == 1
    # p's kernel ran: it reads without the failing one...
    torch.testing.assert_close(p.cpu(), host_p * 3 + 1)
    # ...and r, whose update needs it, is undone: its failure was raised, and
    # no step wrote over its memory. As in eager, the update that raised did
    # not happen, and the one before it did.
    torch.testing.assert_close(r.cpu(), host_r)
    lazyfuse._C._inject_kernel_faults(False)
    torch.testing.assert_close(p.cpu(), host_p * 3 + 1)
    torch.testing.assert_close(r.cpu(), host_r)
    assert lazyfuse.metrics.counter_value("LazyFuseValuesUndone") == 1
    p.add_(1)
    lazyfuse.mark_step()
    torch.testing.assert_close(p.cpu(), host_p * 3 + 2)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "fallback"])
def test_failure_after_a_kernel_began_writing_over_its_input(strict: bool) -> None:
    """A kernel that fails once it may have written over an input (a CUDA
    error reported late) must not be rerun, nor replaced by its ATen steps:
    they would read the half-overwritten input. The values are lost, and said
    to be; the process goes on."""
    torch.manual_seed(0)
    host_p = torch.randn(64)
    p = host_p.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    with lazyfuse.config.kernel_settings_as(strict=strict):
        p.mul_(3).add_(1)
        lazyfuse._C._inject_kernel_faults(True, after_writing=True)
        try:
            with pytest.raises(RuntimeError, match="values this graph computes are lost"):
                lazyfuse.mark_step(wait=True)
        finally:
            lazyfuse._C._inject_kernel_faults(False)
        assert donated() == 1
        assert lazyfuse.metrics.counter_value("LazyFuseKernelFallbacks") == 0
        for _ in range(2):
            with pytest.raises(RuntimeError, match="this value was lost.*began writing"):
                p.cpu()
        # The process stays usable, and so does the same graph.
        p = host_p.to(lazyfuse.lazy_device())
        p.mul_(3).add_(1)
        lazyfuse.mark_step()
        torch.testing.assert_close(p.cpu(), host_p * 3 + 1)
        # Without strict kernels, the kernel that failed that way no longer runs.
        fallbacks = lazyfuse.metrics.counter_value("LazyFuseKernelFallbacks")
        assert fallbacks == (0 if strict else 1)


def test_failure_before_any_in_place_write_rolls_back() -> None:
    p, g = lazy_pair()
    before = p.cpu()
    p.add_(g)
    lazyfuse._C._inject_kernel_faults(True)
    try:
        with pytest.raises(RuntimeError, match="injected kernel fault") as raised:
            lazyfuse.mark_step(wait=True)
        assert "buffer donation" not in str(raised.value)
    finally:
        lazyfuse._C._inject_kernel_faults(False)
    # The update raised, so as in eager it did not happen.
    lazyfuse.mark_step()
    torch.testing.assert_close(p.cpu(), before)
    p.add_(g)
    lazyfuse.mark_step()
    torch.testing.assert_close(p.cpu(), before + g.cpu())


@pytest.mark.skipif(ON_CUDA, reason="the emulator's own check; a GPU cannot see the race")
def test_emulator_reports_a_read_after_an_in_place_write() -> None:
    x = torch.arange(384.0)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=True, strict=True):
        lazy = x.to(lazyfuse.lazy_device())
        lazyfuse.mark_step()
        torch.neg(lazy).cpu()
        (record,) = lazyfuse.debug.last_kernels()
    source, name = str(record["source"]), str(record["name"])
    load = "lf_vload<lf_v16>(in0 + base)"
    assert load in source
    # 3 blocks of 32 threads, one 4-float vector per thread.
    in_place = x.clone()
    lazyfuse.debug.launch_emulated_source(source, name, [in_place], [in_place], grid=3, block=32)
    torch.testing.assert_close(in_place, -x)
    # The last block reads the vectors the first block wrote: a race on a GPU.
    reversed_read = source.replace(load, "lf_vload<lf_v16>(in0 + (n - 4 - base))")
    with pytest.raises(RuntimeError, match="after this launch wrote its output there in place"):
        lazyfuse.debug.launch_emulated_source(
            reversed_read, name, [in_place], [in_place], grid=3, block=32
        )


@BOTH_STEPS
def test_a_parameter_updates_in_place_though_its_view_shares_its_memory(steps: str) -> None:
    # nn.Parameter is functionalization's view of its base; the graph returns
    # both, as one tensor, and the next update may still write over it.
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(64).to(lazyfuse.lazy_device()))
    g = torch.randn(64)
    expected = p.detach().cpu().clone()
    addresses = set()
    for _ in range(3):
        with torch.no_grad():
            p.mul_(0.5).add_(g.to(p.device))
        lazyfuse.mark_step()
        expected = expected * 0.5 + g
        addresses.add(lazyfuse.debug.data_address(p))
    assert donated() >= 2
    assert len(addresses) == 1
    torch.testing.assert_close(p.detach().cpu(), expected)


@BOTH_STEPS
@pytest.mark.parametrize("asynchronous", [True, False], ids=["cpu_stream", "synchronous"])
def test_a_gradient_is_donated_once_the_views_of_it_are_gone(
    steps: str, asynchronous: bool
) -> None:
    # Found from outside as a flaky count in the optimizer test above. A
    # weight's gradient is computed transposed, and the graph returns a view
    # of it; a run on the CPU stream kept the gradient for as long as any of
    # its results stayed unread, so a momentum buffer could not be updated in
    # place.
    torch.manual_seed(0)
    eager, host_x = torch.nn.Linear(8, 4, bias=False), torch.randn(3, 8)
    eager(host_x).sum().backward()
    linear = torch.nn.Linear(8, 4, bias=False).to(lazyfuse.lazy_device())
    with torch.no_grad():
        linear.weight.copy_(eager.weight)
    x = host_x.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    with lazyfuse.config.async_execution_as(asynchronous):
        linear(x).sum().backward()
        unread = x + 1
        lazyfuse.mark_step()
        buffer = linear.weight.grad.clone()
        linear.weight.grad = None
        before = donated()
        buffer.mul_(0.9)
        lazyfuse.mark_step()
        assert donated() == before + 1
    torch.testing.assert_close(buffer.cpu(), eager.weight.grad * 0.9)
    torch.testing.assert_close(unread.cpu(), host_x + 1)


@BOTH_STEPS
def test_a_shared_parameter_is_overwritten_after_every_read_of_it(steps: str) -> None:
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(48).to(lazyfuse.lazy_device()))
    g = torch.randn(48)
    lazyfuse.mark_step()
    for _ in range(2):
        host_p = p.detach().cpu().clone()
        total = p.sum()  # reads the view
        scaled = p * 3
        with torch.no_grad():
            p.mul_(0.5).add_(g.to(p.device))  # updates the base
        after = p * 2
        lazyfuse.mark_step()
        torch.testing.assert_close(total.cpu(), host_p.sum())
        torch.testing.assert_close(scaled.detach().cpu(), host_p * 3)
        torch.testing.assert_close(after.detach().cpu(), (host_p * 0.5 + g) * 2)
        torch.testing.assert_close(p.detach().cpu(), host_p * 0.5 + g)


@FAILS_ON_VALUES_ON_THE_CPU_ONLY
@pytest.mark.parametrize("steps", ["aten"])
def test_a_step_failing_after_an_input_was_let_go_of_loses_nothing(steps: str, lazy) -> None:
    # An int64 count's += 1 cannot run over the old count (ATen steps write
    # over floating inputs only), so the run lets go of the old count after
    # that step, its last reader; then a step fails on its values.
    count = torch.arange(8).to(lazy)
    lazyfuse.mark_step()
    count += 1
    bad = count.index_select(0, torch.tensor([0, 99]).to(lazy))
    with pytest.raises(IndexError, match=r"(?s)index_select.*index out of range.*let go of"):
        lazyfuse.mark_step(wait=True)
    del bad
    torch.testing.assert_close(count.cpu(), torch.arange(8) + 1)
    count += 1
    lazyfuse.mark_step()
    torch.testing.assert_close(count.cpu(), torch.arange(8) + 2)


@FAILS_ON_VALUES_ON_THE_CPU_ONLY
@pytest.mark.parametrize("steps", ["aten"])
def test_a_step_failing_after_aten_steps_wrote_in_place_loses_nothing(steps: str) -> None:
    # p's update runs as ATen steps over p's own memory; then a step that
    # reads the new p fails on its values, so the graph cannot start over.
    p, _ = lazy_pair()
    host_p = p.cpu().clone()
    p.mul_(3).add_(1)
    bad = p.index_select(0, torch.tensor([0, 99]).to(p.device))
    with pytest.raises(
        IndexError, match=r"(?s)aten::index_select.*index out of range.*Nothing is lost"
    ):
        lazyfuse.mark_step(wait=True)
    assert donated() == 1
    # p does not need the failing step, so it reads while bad lives...
    torch.testing.assert_close(p.cpu(), host_p * 3 + 1)
    with pytest.raises(IndexError, match="index out of range"):
        bad.cpu()  # ...and bad, which does, raises again
    del bad
    torch.testing.assert_close(p.cpu(), host_p * 3 + 1)
    p.add_(1)
    lazyfuse.mark_step()
    torch.testing.assert_close(p.cpu(), host_p * 3 + 2)
