"""``Tensor.contiguous()`` copies a lazy tensor where eager copies.

A lazy tensor reports a contiguous layout of its own, views included, and
``Tensor.contiguous()`` returns ``self`` when its tensor says it is contiguous,
before any dispatch. So ``y = x.t().contiguous()`` was a view of ``x``: an
in-place op on ``y`` wrote into ``x``, and one on ``x`` showed in ``y``, where
eager's ``y`` is a copy. The same held for ``memory_format=torch.channels_last``
on any lazy tensor.

On lazy tensors, ``contiguous()`` asks eager's layout of the tensor instead
(Note [Eager's layout of a lazy view], csrc/ops/view_layout.h) and copies where
it is not contiguous in the format asked. Other tensors take torch's method
unchanged. ``contiguous()`` called from C++ answers from the lazy strides still.
"""

from __future__ import annotations

import torch

from lazyfuse import _C

_tensor_contiguous = torch.Tensor.contiguous
_is_compiling = torch.compiler.is_compiling


def _contiguous(
    self: torch.Tensor, *, memory_format: torch.memory_format = torch.contiguous_format
) -> torch.Tensor:
    if (
        not self.is_cpu
        and not self.is_cuda
        and self.device.type == "lazy"
        and not torch._C._has_torch_function_unary(self)  # a subclass's __torch_function__ decides
    ):
        return _C._eager_contiguous(self, memory_format)
    if _is_compiling():
        # Dynamo inlines this function, and breaks the graph at a call of
        # the C method it replaces; the aten op it traces.
        return torch.ops.aten.contiguous.default(self, memory_format=memory_format)
    return _tensor_contiguous(self, memory_format=memory_format)


_contiguous.__doc__ = _tensor_contiguous.__doc__


def install() -> None:
    torch.Tensor.contiguous = _contiguous  # type: ignore[method-assign]
