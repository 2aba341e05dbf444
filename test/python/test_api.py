"""The Python API: device, config, metrics and debug views."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

import lazyfuse


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
    for module in (lazyfuse, lazyfuse.config, lazyfuse.metrics, lazyfuse.debug):
        for name in dir(module):
            obj = getattr(module, name)
            if (
                callable(obj)
                and not name.startswith("_")
                and getattr(obj, "__module__", "").startswith("lazyfuse")
            ):
                assert obj.__doc__, f"{module.__name__}.{name} has no docstring"


def test_ops_doc_is_generated_from_the_yaml() -> None:
    script = Path(__file__).resolve().parents[2] / "codegen" / "gen_ops_doc.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
