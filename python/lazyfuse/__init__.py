"""lazyfuse: a lazy-tensor device for PyTorch.

Ops on tensors placed on :func:`lazy_device` only record IR. The pending graph
is compiled once per graph hash and run when :func:`mark_step` is called or a
value is read (``print``, ``.cpu()``, ``.item()``, a tensor in an ``if``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from lazyfuse import _C

# Importing lazyfuse registers it as the process's `lazy` device.
_C._init()

from lazyfuse import config, debug, metrics  # noqa: E402

__all__ = [
    "add_step_closure",
    "config",
    "debug",
    "lazy_device",
    "mark_step",
    "metrics",
    "sync",
    "wait_device_ops",
]

_tensor_reduce_ex = torch.Tensor.__reduce_ex__


def _reduce_ex(self: torch.Tensor, protocol: int) -> object:
    # Lazy tensors have no storage to pickle: torch.save() writes their value
    # as a CPU tensor, which torch.load() returns on the CPU and
    # load_state_dict() copies back onto the lazy device.
    if self.device.type == "lazy":
        value = self.detach().cpu()
        if isinstance(self, torch.nn.Parameter):
            value = torch.nn.Parameter(value, requires_grad=self.requires_grad)
        return _tensor_reduce_ex(value, protocol)
    return _tensor_reduce_ex(self, protocol)


torch.Tensor.__reduce_ex__ = _reduce_ex  # type: ignore[method-assign]

# Lazy tensors are not shallow-copy compatible with CPU or CUDA ones, so
# Module.to(lazy) used to give every module a new Parameter object: weights
# two modules share (tie_weights(), GPT-2's wte and lm_head) came apart and
# their gradients were wrong. With PyTorch's swap-on-conversion (its planned
# default) .to() swaps each parameter's contents in place: a parameter keeps
# its identity across devices, shared ones stay one object, and optimizers
# built before .to() keep working.
torch.__future__.set_swap_module_params_on_conversion(True)


def lazy_device(index: int = 0) -> torch.device:
    """Returns the lazy device, ``torch.device("lazy", index)``.

    Move models and tensors there with ``.to(lazyfuse.lazy_device())``.
    """
    return torch.device("lazy", index)


_step_closures: list[tuple[Callable[..., object], tuple[object, ...], bool]] = []
_step_closures_lock = threading.Lock()


def mark_step(wait: bool = False) -> None:
    """Compiles (or finds in the cache) and runs the graph of every live lazy tensor.

    Call it once per training step. With ``wait=True`` it returns only after the
    backing device has finished the work. Closures registered with
    :func:`add_step_closure` run afterwards, in order.
    """
    _C._mark_step(wait)
    with _step_closures_lock:
        closures = list(_step_closures)
        _step_closures.clear()
    for closure, args, run_async in closures:
        if run_async:
            threading.Thread(target=closure, args=args, daemon=True).start()
        else:
            closure(*args)


def sync(wait: bool = False) -> None:
    """torch_xla's name for :func:`mark_step`."""
    mark_step(wait)


def add_step_closure(
    closure: Callable[..., object], args: Sequence[object] = (), run_async: bool = False
) -> None:
    """Runs ``closure(*args)`` once the current step's graph has executed, at
    the end of the next :func:`mark_step`: the way to log a loss without a
    mid-step sync (reading it inside the closure costs no extra graph). With
    ``run_async=True`` it runs on a background thread. torch_xla's API."""
    with _step_closures_lock:
        _step_closures.append((closure, tuple(args), run_async))


def wait_device_ops() -> None:
    """Blocks until every graph already launched on the backing device has finished."""
    _C._wait_device_ops()
