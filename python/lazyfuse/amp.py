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
autocast leaves them. Scale fp16 losses with ``torch.amp.GradScaler("lazy")``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import torch

from lazyfuse import _C

__all__ = ["autocast"]

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
