"""How ``Module.to()``, ``.double()``, ``.cuda()`` and the like convert a
module's parameters and buffers in a process that imported lazyfuse.

Lazy tensors are not shallow-copy compatible with CPU or CUDA ones, so
``Module.to(lazy)`` used to give every module a new Parameter object: weights
two modules share (``tie_weights()``, GPT-2's wte and lm_head) came apart and
their gradients were wrong. With PyTorch's swap-on-conversion (its planned
default) ``.to()`` swaps each parameter's contents in place: a parameter keeps
its identity across devices, shared ones stay one object, and optimizers built
before ``.to()`` keep working. The swap is turned on for conversions only;
``load_state_dict`` copies into each parameter, as PyTorch does by default.

A swap also swaps the tensors' classes, and cannot take an uninitialized
parameter or buffer (a lazy module's: ``nn.LazyLinear``, ``nn.LazyConv2d``,
``nn.LazyBatchNorm1d``) at all: it became a plain, empty Parameter, and the
module's first call failed, on any device (``LazyLinear(3).double()``) as on
the lazy one. Such a tensor is converted here as PyTorch converts it without
the swap: it stays uninitialized, holding the new device and dtype, which its
first call materializes with.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import torch
from torch.nn.parameter import UninitializedTensorMixin

_module_apply = torch.nn.Module._apply


def _converted(tensor: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """An uninitialized parameter or buffer with `fn`'s device and dtype: the
    same object, its data given them in place as in eager PyTorch, or where a
    lazy tensor cannot be, swapped with a new one of its class."""
    with torch.no_grad():
        applied = fn(tensor)
    if applied is tensor:
        return tensor
    if torch._has_compatible_shallow_copy_type(tensor, applied):
        tensor.data = applied
        return tensor
    converted = type(tensor)(tensor.requires_grad, device=applied.device, dtype=applied.dtype)
    converted.__dict__.update(tensor.__dict__)
    try:
        torch.utils.swap_tensors(tensor, converted)
    except RuntimeError:
        return converted  # something else holds it: a new object, as without the swap
    return tensor


def _apply(
    self: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
) -> Any:
    tables: list[MutableMapping[str, Any]] = [self._parameters, self._buffers]
    held = [
        (table, key, tensor)
        for table in tables
        for key, tensor in table.items()
        if isinstance(tensor, UninitializedTensorMixin)
    ]
    for table, key, _ in held:
        table[key] = None  # Module._apply skips it
    # Swapping only while converting: `load_state_dict` reads the same flag,
    # and with it swapped each parameter for a detached alias of itself, which
    # a lazy parameter is held twice as (a view and its base) once written.
    swapping = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        result = _module_apply(self, fn, recurse)
        converted = [_converted(tensor, fn) for _, _, tensor in held]
    except BaseException:
        for table, key, tensor in held:
            table[key] = tensor
        raise
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swapping)
    for (table, key, _), tensor in zip(held, converted, strict=True):
        table[key] = tensor
    return result


torch.nn.Module._apply = _apply  # type: ignore[method-assign]
