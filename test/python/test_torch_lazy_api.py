"""torch._lazy, LTC's public Python API, on lazyfuse tensors: what PyTorch's
own test/lazy checks of any LTC backend. Every call works, or raises a clear
error; none may crash the process."""

from __future__ import annotations

import threading

import pytest
import torch
import torch._lazy
import torch._lazy.computation
import torch._lazy.config
import torch._lazy.debug
import torch._lazy.extract_compiled_graph
import torch._lazy.ir_cache
import torch._lazy.metrics
import torch._lazy.ts_backend

import lazyfuse


@pytest.fixture
def pair(lazy: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, y = torch.randn(3, 4).to(lazy), torch.randn(3, 4).to(lazy)
    torch._lazy.mark_step()
    torch._lazy.metrics.reset()
    return x, y


def test_mark_step_and_wait_device_ops(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = pair
    z = x * y + 1
    torch._lazy.mark_step(wait=True)
    torch._lazy.wait_device_ops()
    assert torch._lazy.metrics.counter_value("MarkStep") == 1
    assert torch._lazy.metrics.counter_value(lazyfuse.metrics.GRAPHS_EXECUTED) == 1
    torch.testing.assert_close(z.cpu(), x.cpu() * y.cpu() + 1)


def test_metrics_names_values_and_report(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    assert torch._lazy.metrics.counter_names() == []
    assert torch._lazy.metrics.counter_value("NoSuchCounter") is None
    x, y = pair
    (x + y).cpu()
    # Every op that reached lazyfuse's kernel is counted as lazy::<kernel>.
    assert torch._lazy.metrics.counter_value("lazy::add") == 1
    report = torch._lazy.metrics.metrics_report()
    assert "LazyFuseGraphsExecuted" in report and "LazyFuseExecute" in report


def test_force_fallback_runs_an_op_eagerly(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = pair
    torch._lazy.config.set_force_fallback("aten::sub")
    try:
        assert torch._lazy.config.get_force_fallback() == "aten::sub"
        with pytest.warns(UserWarning, match="set_force_fallback"):
            forced = (x - y).cpu()
        assert torch._lazy.metrics.counter_value("aten::sub.Tensor") == 1
        assert torch._lazy.metrics.counter_value("lazy::sub") is None
    finally:
        torch._lazy.config.set_force_fallback("")
    torch.testing.assert_close(forced, x.cpu() - y.cpu())
    (x - y).cpu()
    assert torch._lazy.metrics.counter_value("lazy::sub") == 1
    assert torch._lazy.metrics.counter_value("aten::sub.Tensor") == 1


def test_ir_reuse_counters(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = pair
    before = lazyfuse.config.reuse_ir()
    torch._lazy.config.set_reuse_ir(True)
    try:
        torch._lazy.ir_cache.reset()
        z = torch.zeros(3, 4).to(x.device)
        for _ in range(10):
            z += x + y
            z = z - y
            torch._lazy.mark_step()
    finally:
        torch._lazy.config.set_reuse_ir(before)
    reused = {
        name: torch._lazy.metrics.counter_value(name)
        for name in torch._lazy.metrics.counter_names()
        if name.startswith("IrNodeReused_")
    }
    assert reused.get("IrNodeReused_lazyfuse::AddTensor", 0) >= 14, reused
    assert reused.get("IrNodeReused_lazyfuse::SubTensor", 0) >= 8, reused
    torch.testing.assert_close(z.cpu(), 10 * x.cpu(), rtol=1e-5, atol=1e-5)


def test_step_closures(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, _ = pair
    seen: list[float] = []
    done = threading.Event()
    y = x.sum()
    torch._lazy.add_step_closure(lambda: seen.append(y.item()))
    torch._lazy.add_step_closure(lambda: done.set(), run_async=True)
    torch._lazy.mark_step()
    assert seen == [pytest.approx(x.cpu().sum().item())]
    assert done.wait(timeout=30)

    def fail() -> None:
        raise ValueError("closure failed")

    torch._lazy.add_step_closure(fail)
    with pytest.raises(ValueError, match="closure failed"):
        torch._lazy.mark_step()


def test_debug_dumps_hashes_and_ids(pair: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = pair
    z = x * y + 2
    assert "aten::mul" in torch._lazy.debug.dump_ir([z], "text")
    assert "aten::mul" in torch._lazy.debug.dump_ir([z], "backend")
    assert torch._lazy.debug.render_ir_graph([z]).startswith("digraph")
    first = torch._lazy.computation.get_graph_hash([z])
    again = torch._lazy.computation.get_graph_hash([x * y + 2])
    assert first == again and isinstance(first, bytes)
    assert torch._C._lazy._get_tensor_id(x) != torch._C._lazy._get_tensor_id(y)
    (cpu,) = torch._lazy.to_cpu([z])
    torch.testing.assert_close(cpu, x.cpu() * y.cpu() + 2)
    w = z * 3
    torch._lazy.sync_multi([w], [])
    torch.testing.assert_close(w.cpu(), cpu * 3)


def test_ir_cache_dump_and_reset(pair: tuple[torch.Tensor, torch.Tensor], tmp_path) -> None:
    x, y = pair
    (x + y).cpu()
    torch._lazy.ir_cache.dump(str(tmp_path / "ir_cache.dot"))
    assert (tmp_path / "ir_cache.dot").read_text().startswith("digraph")
    torch._lazy.ir_cache.reset()


def test_a_view_keeps_aliasing_its_base_across_mark_step(lazy: torch.device) -> None:
    base = torch.zeros(4, 4).to(lazy)
    row = base[1]
    torch._lazy.mark_step()
    row.add_(1)
    torch._lazy.mark_step()
    assert base.cpu()[1].tolist() == [1.0] * 4 and base.cpu().sum().item() == 4


def test_mark_step_syncs_only_tensors_with_ir(lazy: torch.device) -> None:
    with torch.device(lazy):
        linear = torch.nn.Linear(4, 2)  # initialised in place: pending IR
    torch._lazy.metrics.reset()
    torch._lazy.mark_step()
    assert torch._lazy.metrics.counter_value("SyncedTensorsWithIR") >= 2  # weight, bias
    torch._lazy.metrics.reset()
    torch._lazy.mark_step()
    assert torch._lazy.metrics.counter_value("SyncedTensorsWithIR") is None
    assert torch._lazy.metrics.counter_value(lazyfuse.metrics.GRAPHS_EXECUTED) is None
    assert linear.weight.device == lazy


TORCHSCRIPT_ONLY = {
    "get_tensors_ts_device_data_node": lambda t: (
        torch._lazy.computation.get_tensors_ts_device_data_node([t + 1])
    ),
    "run_cached_graph": lambda t: torch._lazy.computation.run_cached_graph("0" * 32, [t]),
    "extract_compiled_graph": lambda t: torch._lazy.extract_compiled_graph.extract_compiled_graph(
        torch.fx.symbolic_trace(torch.nn.ReLU()), [t]
    ),
    "ts_backend_init": lambda t: torch._lazy.ts_backend.init(),
}


@pytest.mark.parametrize("call", sorted(TORCHSCRIPT_ONLY))
def test_torchscript_only_bindings_refuse_cleanly(lazy: torch.device, call: str) -> None:
    t = torch.randn(2, 3).to(lazy)
    with pytest.raises(RuntimeError, match="TorchScript lazy backend.*lazyfuse"):
        TORCHSCRIPT_ONLY[call](t)
    torch.testing.assert_close((t * 2).cpu(), t.cpu() * 2)  # still usable


def test_latest_computation_graph_refuses_cleanly(lazy: torch.device) -> None:
    (torch.ones(2).to(lazy) * 2).cpu()
    with pytest.raises(RuntimeError, match="non-TSComputation"):
        torch._C._lazy_ts_backend._get_latest_computation_graph()


READS_LAZY_TENSORS = {
    "get_tensor_id": lambda t: torch._C._lazy._get_tensor_id(t),
    "dump_ir_text": lambda t: torch._lazy.debug.dump_ir([t], "text"),
    "dump_ir_backend": lambda t: torch._lazy.debug.dump_ir([t], "backend"),
    "render_ir_graph": lambda t: torch._lazy.debug.render_ir_graph([t]),
    "get_graph_hash": lambda t: torch._lazy.computation.get_graph_hash([t]),
}


@pytest.mark.parametrize("call", sorted(READS_LAZY_TENSORS))
def test_bindings_refuse_tensors_off_the_lazy_device(call: str) -> None:
    with pytest.raises(RuntimeError, match="expected tensors on the lazy device, got one on cpu"):
        READS_LAZY_TENSORS[call](torch.ones(2))
