"""The Python API: device, config, metrics and debug views."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lazyfuse
import lazyfuse.testing
from conftest import (
    HOST_COMPILER,
    NO_FUSED_KERNELS,
    ON_REFERENCE_TORCH,
    REFERENCE_TORCH,
    graphs_executed,
)


def test_lazy_device() -> None:
    assert lazyfuse.lazy_device() == torch.device("lazy", 0)


def test_backing_device_defaults_to_what_the_machine_has() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert lazyfuse.config.backing_device().type == expected


def test_reuse_ir_toggle() -> None:
    before = lazyfuse.config.reuse_ir()
    lazyfuse.config.set_reuse_ir(not before)
    assert lazyfuse.config.reuse_ir() is (not before)
    lazyfuse.config.set_reuse_ir(before)


def test_ir_text_and_dot(lazy: torch.device) -> None:
    y = torch.relu(torch.randn(3).to(lazy) + 1)
    text = lazyfuse.debug.ir_text(y)
    assert "aten::relu" in text and "aten::add" in text
    dot = lazyfuse.debug.ir_dot([y])
    assert dot.startswith("digraph") and "aten::relu" in dot


def test_metrics_report_and_reset(lazy: torch.device) -> None:
    (torch.ones(2).to(lazy) * 3).sum().item()
    assert lazyfuse.metrics.counter_value(lazyfuse.metrics.GRAPHS_EXECUTED) == 1
    assert "UncachedCompile" in lazyfuse.metrics.counter_names() or "CachedCompile" in (
        lazyfuse.metrics.counter_names()
    )
    report = lazyfuse.metrics.report()
    assert "lazyfuse fallbacks: none" in report and "LazyFuseGraphsExecuted" in report
    lazyfuse.metrics.reset()
    assert lazyfuse.metrics.counter_value(lazyfuse.metrics.GRAPHS_EXECUTED) == 0


def test_wait_device_ops(lazy: torch.device) -> None:
    y = torch.ones(4).to(lazy) * 2
    lazyfuse.mark_step(wait=True)
    lazyfuse.wait_device_ops()
    torch.testing.assert_close(y.cpu(), torch.full((4,), 2.0))


def test_public_functions_have_docstrings() -> None:
    modules = (
        lazyfuse,
        lazyfuse.config,
        lazyfuse.metrics,
        lazyfuse.debug,
        lazyfuse.distributed,
        lazyfuse.testing,
    )
    for module in modules:
        for name in dir(module):
            obj = getattr(module, name)
            if (
                callable(obj)
                and not name.startswith("_")
                and getattr(obj, "__module__", "").startswith("lazyfuse")
            ):
                assert obj.__doc__, f"{module.__name__}.{name} has no docstring"


@pytest.mark.skipif(
    not ON_REFERENCE_TORCH,
    reason=f"docs/ops.md lists op_db entries of torch {REFERENCE_TORCH}; other releases lack some",
)
def test_ops_doc_is_generated_from_the_yaml() -> None:
    script = Path(__file__).resolve().parents[2] / "codegen" / "gen_ops_doc.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr


def recompile_reason(lazy: torch.device, shape: tuple[int, ...], dtype: torch.dtype) -> str:
    x = torch.ones(shape, dtype=dtype).to(lazy)
    y = (x * 2).sum()
    lazyfuse.mark_step()  # the call site the log compares against
    assert y.device.type == "lazy"
    return lazyfuse.debug.last_compile_reason()


def test_compile_log_says_why_a_graph_compiled_again(lazy: torch.device) -> None:
    lazyfuse.debug.clear_compile_log()
    assert recompile_reason(lazy, (3, 4), torch.float32) == "first compile at this call site"
    shape_cause = recompile_reason(lazy, (5, 4), torch.float32)
    assert "input shape changed" in shape_cause and "Float[3,4]" in shape_cause
    assert "Float[5,4]" in shape_cause
    dtype_cause = recompile_reason(lazy, (5, 4), torch.float64)
    assert "input dtype changed" in dtype_cause and "Double[5,4]" in dtype_cause
    log = lazyfuse.debug.compile_log()
    assert len(log) == 3
    assert all("test_api.py" in entry["call_site"] for entry in log)
    assert all(entry["nodes"] > 0 and entry["hash"] for entry in log)


def test_compile_log_call_site_may_live_in_a_folder_named_torch_or_lazyfuse(
    lazy: torch.device,
) -> None:
    # Library frames are recognised by torch's and lazyfuse's own folders, not
    # by a folder name anywhere in the path: a checkout under
    # ~/.cache/lazyfuse/ lost every call site before.
    lazyfuse.debug.clear_compile_log()
    user_file = "/home/user/lazyfuse/torch/train_step.py"
    source = "x = torch.ones(6, 7).to(lazy)\ny = (x * 3).sum()\nlazyfuse.mark_step()\n"
    exec(compile(source, user_file, "exec"), {"torch": torch, "lazyfuse": lazyfuse, "lazy": lazy})
    (entry,) = lazyfuse.debug.compile_log()
    assert entry["call_site"].startswith(f"{user_file}:3")


def test_compile_log_names_a_changed_node(lazy: torch.device) -> None:
    lazyfuse.debug.clear_compile_log()
    x = torch.ones(4).to(lazy)
    for op in (torch.exp, torch.sin):
        y = op(x)
        lazyfuse.mark_step()
    cause = lazyfuse.debug.last_compile_reason()
    assert "node" in cause and "aten::exp" in cause and "aten::sin" in cause
    del y


def debug_stderr(level: str, code: str) -> list[str]:
    """The lines a fresh process running `code` under LAZYFUSE_DEBUG=`level`
    writes to stderr."""
    result = subprocess.run(
        [sys.executable, "-c", "import torch, lazyfuse\n" + code],
        capture_output=True,
        text=True,
        env={**os.environ, "LAZYFUSE_DEBUG": level},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr.splitlines()


def test_debug_env_prints_every_compile() -> None:
    stderr = debug_stderr(
        "1",
        "x = torch.ones(3).to(lazyfuse.lazy_device())\ny = (x + 1).sum()\nlazyfuse.mark_step()\n",
    )
    line = next(line for line in stderr if line.startswith("[lazyfuse] compile"))
    assert "hash=" in line and "nodes=" in line and "cause: first compile" in line
    assert "<string>:4" in line


@pytest.mark.skipif(not HOST_COMPILER, reason=NO_FUSED_KERNELS)
def test_debug_level_3_prints_each_kernel_with_its_bandwidth() -> None:
    stderr = debug_stderr(
        "3",
        "x = torch.ones(64, 256).to(lazyfuse.lazy_device())\n"
        "for _ in range(3):\n"
        "    y = (x * 2).sin().sum(1)\n"
        "    lazyfuse.mark_step()\n",
    )
    lines = [line for line in stderr if line.startswith("[lazyfuse] kernel")]
    assert len(lines) == 3, stderr  # a launch each step
    # The input, 64 KiB, is read whole; the row sums, 256 bytes, written.
    assert "0.066 MB read, 0.000 MB written" in lines[0], lines[0]
    assert lines[0].endswith(" GB/s") and " us, " in lines[0], lines[0]


def test_torch_lazy_and_the_device_module_work_after_import_lazyfuse_alone() -> None:
    """PyTorch's own helpers (wrapper_set_seed) call torch._lazy.mark_step()
    with no `import torch._lazy` of their own."""
    code = (
        "x = torch.ones(3).to(lazyfuse.lazy_device()) * 2\n"
        "torch.lazy.synchronize()\n"
        "torch._lazy.mark_step()\n"
        "torch._lazy.wait_device_ops()\n"
        "print(x.cpu().tolist())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", "import torch, lazyfuse\n" + code],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[2.0, 2.0, 2.0]"


def test_sync_is_mark_step(lazy: torch.device) -> None:
    y = torch.ones(3).to(lazy) * 2
    lazyfuse.sync()
    assert graphs_executed() == 1
    assert y.cpu().tolist() == [2.0, 2.0, 2.0]


def test_step_closures_run_after_the_step_without_another_graph(lazy: torch.device) -> None:
    import threading

    seen: list[tuple[str, float]] = []
    done = threading.Event()
    loss = (torch.arange(4.0).to(lazy) ** 2).sum()
    lazyfuse.add_step_closure(lambda tag, t: seen.append((tag, t.item())), args=("first", loss))
    lazyfuse.add_step_closure(lambda: seen.append(("second", graphs_executed())))
    lazyfuse.add_step_closure(done.set, run_async=True)
    assert seen == []
    lazyfuse.mark_step()
    assert done.wait(10)
    assert seen == [("first", 14.0), ("second", 1)]
    assert graphs_executed() == 1
    lazyfuse.mark_step()
    assert len(seen) == 2  # each closure runs once


def test_compile_region_syncs_before_and_after(lazy: torch.device) -> None:
    x = torch.ones(4).to(lazy)
    pending = x * 3  # synced when the region starts

    @lazyfuse.compile
    def step(t: torch.Tensor) -> torch.Tensor:
        return (t + 1).relu()

    before = graphs_executed()
    y = step(x)
    assert graphs_executed() - before == 2  # the pending work, then the region
    assert y.cpu().tolist() == [2.0] * 4 and pending.cpu().tolist() == [3.0] * 4


def test_compile_full_graph_raises_when_something_forces_execution(lazy: torch.device) -> None:
    x = torch.ones(4).to(lazy)
    with pytest.raises(RuntimeError, match=r"compile\('probe'\): full_graph=True, but 1 graph"):
        with lazyfuse.compile(full_graph=True, name="probe"):
            if (x * 2).sum() > 0:  # a tensor in an if runs a graph
                pass
    with lazyfuse.compile(full_graph=True):
        (x * 2).sum()


def test_compile_max_different_graphs(lazy: torch.device) -> None:
    @lazyfuse.compile(max_different_graphs=2, name="shapes")
    def double(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    for n in (3, 3, 4, 4):
        double(torch.ones(n).to(lazy))
    with pytest.raises(RuntimeError, match="ran 3 different graphs, more than max_different"):
        double(torch.ones(5).to(lazy))


def test_torch_xla_metrics_names(lazy: torch.device) -> None:
    from lazyfuse import metrics

    (torch.ones(3).to(lazy) * 2).cpu()
    assert metrics.counter_value("LazyFuseGraphsExecuted") == 1
    assert "LazyFuseExecute" in metrics.metric_names()
    total, accumulator, samples = metrics.metric_data("LazyFuseExecute")
    assert total == len(samples) >= 1 and accumulator > 0 and samples[0][0] > 0
    assert metrics.metric_data("NoSuchMetric") is None
    assert "LazyFuseGraphsExecuted" in metrics.short_metrics_report()
    assert "Counter" in metrics.metrics_report() or "Metric" in metrics.metrics_report()
    assert metrics.executed_fallback_ops() == []
    metrics.clear_counters()
    assert metrics.counter_value("LazyFuseGraphsExecuted") == 0 and metrics.metric_names()
    metrics.clear_metrics()
    assert metrics.metric_data("LazyFuseExecute") is None
    (torch.ones(3).to(lazy) + 1).cpu()
    metrics.clear_all()
    assert metrics.counter_value("LazyFuseGraphsExecuted") == 0


def test_initialize_cache_readonly(tmp_path: Path) -> None:
    code = (
        "import torch, lazyfuse, os\n"
        f"lazyfuse.initialize_cache({str(tmp_path)!r}, readonly=READONLY)\n"
        "x = torch.arange(8.0).to(lazyfuse.lazy_device())\n"
        "print((x * 0.25 + 3).cpu().sum().item())\n"
    )
    env = dict(os.environ, LAZYFUSE_DEVICE="cpu", LAZYFUSE_EMULATE_CUDA="1")
    for readonly in (True, False):
        out = subprocess.run(
            [sys.executable, "-c", code.replace("READONLY", str(readonly))],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert float(out.stdout) == 31.0
        entries = list((tmp_path / "kernels").glob("*.bin"))
        assert len(entries) == (0 if readonly else 1)
