"""Mixed precision on lazy tensors.

``torch.autocast(device_type="lazy")`` is refused by torch, which knows no
autocast for the lazy backend, so lazyfuse provides its own region with
CUDA's policy (csrc/ops/autocast.h):

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
