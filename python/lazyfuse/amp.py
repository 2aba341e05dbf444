"""Mixed precision on lazy tensors.

torch knows no autocast for the lazy backend, so lazyfuse keeps its own
region, ``lazyfuse.autocast``, with CUDA's policy (csrc/ops/autocast.h), and
answers torch's autocast API for ``"lazy"`` from it: ``torch.autocast("lazy",
...)``, ``torch.is_autocast_enabled("lazy")`` and the rest, which model code
calls with a tensor's ``device.type`` (transformers' ``maybe_autocast``):

- matmuls, convolutions, ``linear``, ``baddbmm``, attention: in ``dtype``;
- losses, norms, ``softmax``, ``log_softmax``, ``sum``, ``exp``, ``log``, ...:
  in float32;
- ``addcmul``, ``index_put``, ``cat``-like promotion ops: the widest input type;
- ``binary_cross_entropy``: refused, as on CUDA.

Only lazy floating tensors are cast; float64 ones are left alone, as CUDA's
autocast leaves them. Scale fp16 losses with ``torch.amp.GradScaler("lazy")``,
or with :class:`GradScaler`, whose ``step`` never reads a value (so a step
using it stays one graph, and can be replayed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import torch
from torch.amp.grad_scaler import OptState

from lazyfuse import _C

__all__ = ["GradScaler", "autocast"]

F = TypeVar("F", bound=Callable[..., Any])


class autocast:  # noqa: N801 - torch.autocast's spelling
    """``with lazyfuse.autocast(dtype=torch.bfloat16):`` runs the policy's ops
    on lazy tensors in ``dtype`` (``torch.bfloat16`` or ``torch.float16``).
    Nests, and ``enabled=False`` turns it off inside an outer region. Also a
    decorator. Per thread, like ``torch.autocast``; the backward pass runs in
    the dtypes the forward chose."""

    def __init__(self, dtype: torch.dtype = torch.bfloat16, enabled: bool = True) -> None:
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(
                "lazyfuse.autocast: dtype must be torch.bfloat16, torch.float16 or "
                f"torch.float32, got {dtype}"
            )
        self.dtype = dtype
        self.enabled = bool(enabled)
        self._previous: list[tuple[bool, torch.dtype]] = []

    def __enter__(self) -> autocast:
        self._previous.append(_C._set_autocast(self.enabled, self.dtype))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        enabled, dtype = self._previous.pop()
        _C._set_autocast(enabled, dtype)

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.dtype, self.enabled):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def is_autocast_enabled() -> bool:
    """Whether this thread is inside an enabled :class:`autocast` region."""
    return bool(_C._autocast_state()[0])


def get_autocast_dtype() -> torch.dtype:
    """The dtype of this thread's innermost :class:`autocast` region."""
    return _C._autocast_state()[1]


def _set_enabled(enabled: bool) -> None:
    _C._set_autocast(bool(enabled), get_autocast_dtype())


def _set_dtype(dtype: torch.dtype) -> None:
    _C._set_autocast(is_autocast_enabled(), dtype)


def _answering_for_lazy(original: Callable[..., Any], for_lazy: Callable[..., Any]) -> Any:
    """``original`` (device_type first), with "lazy" answered by ``for_lazy``."""

    @functools.wraps(original)
    def routed(*args: Any, **kwargs: Any) -> Any:
        if args and args[0] == "lazy":
            return for_lazy(*args[1:], **kwargs)
        if not args and kwargs.get("device_type") == "lazy":
            rest = {key: value for key, value in kwargs.items() if key != "device_type"}
            return for_lazy(**rest)
        return original(*args, **kwargs)

    routed.__lazyfuse_original__ = original  # type: ignore[attr-defined]
    return routed


def install_torch_autocast() -> None:
    """Makes torch's autocast functions answer for the lazy device; called
    once by ``import lazyfuse``. torch asks them from C++ for its own devices
    only, so nothing else sees the difference."""
    routes: dict[str, Callable[..., Any]] = {
        "is_autocast_enabled": is_autocast_enabled,
        "get_autocast_dtype": get_autocast_dtype,
        "set_autocast_enabled": _set_enabled,
        "set_autocast_dtype": _set_dtype,
    }
    for name, for_lazy in routes.items():
        original = getattr(torch, name)
        if not hasattr(original, "__lazyfuse_original__"):
            setattr(torch, name, _answering_for_lazy(original, for_lazy))
    modes = torch.amp.autocast_mode
    if not hasattr(modes.is_autocast_available, "__lazyfuse_original__"):
        available = _answering_for_lazy(modes.is_autocast_available, lambda: True)
        modes.is_autocast_available = available
        torch.amp.is_autocast_available = available


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("lazy")`` whose :meth:`step` keeps the whole
    step in one graph. torch's reads ``found_inf`` on the host to decide
    whether to call ``optimizer.step()``, which ends the graph there. This
    one always calls it, then puts back the parameters and optimizer state
    the optimizer updated in place wherever an inf or NaN was found:
    ``where(found_inf, before, after)``, the same values as a skipped step.
    State an optimizer replaces instead of updating in place is not put back."""

    def __init__(self, device: str = "lazy", **kwargs: Any) -> None:
        super().__init__(device, **kwargs)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        found = state["found_inf_per_device"].values()
        skip = sum(v.to(self._scale.device) for v in found) > 0  # type: ignore[union-attr]
        tensors = [p for group in optimizer.param_groups for p in group["params"]]
        tensors += [
            value
            for entry in optimizer.state.values()
            for value in entry.values()
            if isinstance(value, torch.Tensor) and value.device == self._scale.device  # type: ignore[union-attr]
        ]
        before = [t.detach().clone() for t in tensors]
        result = optimizer.step(*args, **kwargs)
        with torch.no_grad():
            for tensor, old in zip(tensors, before, strict=True):
                tensor.copy_(torch.where(skip, old, tensor))
        state["stage"] = OptState.STEPPED
        return result
