"""Makes torch._lazy's API safe on lazyfuse tensors.

torch._lazy is LTC's public Python API. Most of it works on any backend, and
so on lazyfuse: mark_step, wait_device_ops, metrics, config, step closures,
the IR cache, debug dumps and graph hashes. A few bindings, though, belong to
the TorchScript backend and cast lazyfuse's data to TorchScript's types
unchecked, which crashes the process (torch._lazy.extract_compiled_graph
calls one of them). Others dereference the lazy tensor of an argument that
has none. Each is wrapped here so that it raises a clear error instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch._lazy  # torch._lazy.mark_step() after `import lazyfuse` alone

from lazyfuse import _C

_TORCHSCRIPT_ONLY = {
    "_get_tensors_ts_device_data_node": "torch._lazy.computation.get_tensors_ts_device_data_node",
    "_run_cached_graph": "torch._lazy.computation.run_cached_graph",
    "_init": "torch._lazy.ts_backend.init",
}
# Bindings that read the lazy tensor behind each argument.
_READS_LAZY_TENSORS = (
    "_get_tensor_id",
    "_get_tensors_text",
    "_get_tensors_dot",
    "_get_tensors_backend",
    "_get_graph_hash",
)


def _refuse(python_name: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"{python_name} belongs to PyTorch's TorchScript lazy backend, but lazyfuse "
            "owns the lazy device in this process, and one process has one lazy backend. "
            "lazyfuse's own tools: lazyfuse.debug (graphs, fusion plans, kernels) and "
            "lazyfuse.metrics."
        )

    refused.__name__ = python_name.rsplit(".", 1)[-1]
    return refused


def _tensors_of(args: tuple[Any, ...]) -> Iterable[Any]:
    for arg in args:
        if isinstance(arg, (list, tuple)):
            yield from arg
        else:
            yield arg


def _lazy_only(name: str, binding: Callable[..., Any]) -> Callable[..., Any]:
    def checked(*args: Any, **kwargs: Any) -> Any:
        for value in _tensors_of(args):
            if isinstance(value, torch.Tensor) and value.device.type != "lazy":
                raise RuntimeError(
                    f"torch._C._lazy.{name}: expected tensors on the lazy device, got one on "
                    f"{value.device}; move it with .to(lazyfuse.lazy_device())"
                )
        return binding(*args, **kwargs)

    checked.__name__ = name
    checked.__wrapped__ = binding  # type: ignore[attr-defined]
    return checked


def _wait_device_ops(devices: Iterable[str] | None = None) -> None:
    """LTC's wait, plus the graphs lazyfuse's CPU stream runs (asynchronous
    execution): one lazy device, so ``devices`` changes nothing."""
    _C._wait_device_ops()


def _failure_raised_once(binding: Callable[..., Any]) -> Callable[..., Any]:
    """A sync binding whose graph failure LTC would also keep on the device,
    to raise again at the next, unrelated sync: lazyfuse raises it once."""

    @functools.wraps(binding)
    def synced(*args: Any, **kwargs: Any) -> Any:
        try:
            return binding(*args, **kwargs)
        except BaseException:
            _C._clear_kept_failure()
            raise

    return synced


# LTC's metric bindings: a graph on the CPU stream is waited for first.
_READS_METRICS = ("_counter_names", "_counter_value", "_metrics_report", "_reset_metrics")


def _after_the_stream(binding: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(binding)
    def settled(*args: Any, **kwargs: Any) -> Any:
        _C._synchronize_cpu_stream()
        return binding(*args, **kwargs)

    return settled


def _wrap(
    module: Any,
    names: Iterable[str],
    wrapper: Callable[[Callable[..., Any]], Callable[..., Any]],
) -> None:
    """Wraps each binding in `names` once (a second install leaves it)."""
    for name in names:
        binding = getattr(module, name, None)
        if binding is not None and not hasattr(binding, "__wrapped__"):
            setattr(module, name, wrapper(binding))


def install() -> None:
    """Called once by ``import lazyfuse``."""
    ts_backend = torch._C._lazy_ts_backend
    for name, python_name in _TORCHSCRIPT_ONLY.items():
        if hasattr(ts_backend, name):
            setattr(ts_backend, name, _refuse(python_name))
    lazy = torch._C._lazy
    lazy._wait_device_ops = _wait_device_ops
    _wrap(lazy, _READS_METRICS, _after_the_stream)
    _wrap(lazy, ("_sync_multi",), _failure_raised_once)
    for name in _READS_LAZY_TENSORS:
        binding = getattr(lazy, name, None)
        if binding is not None and not hasattr(binding, "__wrapped__"):
            setattr(lazy, name, _lazy_only(name, binding))
