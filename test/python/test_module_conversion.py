"""Module.to() and its kin in a process that imported lazyfuse
(python/lazyfuse/module_conversion.py): parameters are swapped, and a lazy
module's uninitialized ones stay uninitialized, as in eager PyTorch.

Found from outside: after ``import lazyfuse``, ``nn.LazyLinear(3).double()``
gave the module a plain, empty weight, and its first call failed, on the CPU
as on the lazy device; ``.float()`` and ``.cpu()`` raised "Couldn't swap"."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.nn.parameter import UninitializedTensorMixin

import lazyfuse

LAZY = lazyfuse.lazy_device()

BUILDS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "LazyLinear": (lambda: torch.nn.LazyLinear(3), (2, 4)),
    "LazyConv2d": (lambda: torch.nn.LazyConv2d(3, 2), (2, 4, 5, 5)),
    "LazyBatchNorm1d": (lambda: torch.nn.LazyBatchNorm1d(), (6, 4)),
}

CONVERSIONS: dict[str, tuple[Callable[[torch.nn.Module], torch.nn.Module], str, torch.dtype]] = {
    "double": (lambda m: m.double(), "cpu", torch.float64),
    "half": (lambda m: m.half(), "cpu", torch.float16),
    "float": (lambda m: m.float(), "cpu", torch.float32),
    "cpu": (lambda m: m.cpu(), "cpu", torch.float32),
    "to_float64": (lambda m: m.to(torch.float64), "cpu", torch.float64),
    "to_lazy": (lambda m: m.to(LAZY), "lazy", torch.float32),
    "to_lazy_float64": (lambda m: m.to(LAZY, torch.float64), "lazy", torch.float64),
    "to_lazy_and_back": (lambda m: m.to(LAZY).cpu(), "cpu", torch.float32),
}


@pytest.mark.parametrize("conversion", list(CONVERSIONS))
@pytest.mark.parametrize("build", list(BUILDS))
def test_a_converted_lazy_module_stays_uninitialized_until_its_first_call(
    build: str, conversion: str
) -> None:
    make, input_shape = BUILDS[build]
    convert, device, dtype = CONVERSIONS[conversion]
    module = make()
    weight = module.weight
    module = convert(module)
    for tensor in list(module.parameters()) + list(module.buffers()):
        if tensor.is_floating_point():  # not the batch count
            assert isinstance(tensor, UninitializedTensorMixin), type(tensor)
            assert tensor.device.type == device and tensor.dtype == dtype
    assert module.weight is weight  # converted in place, as in eager
    torch.manual_seed(0)
    out = module(torch.randn(input_shape, dtype=dtype).to(device))
    assert out.device.type == device and out.dtype == dtype
    for tensor in list(module.parameters()) + list(module.buffers()):
        assert not isinstance(tensor, UninitializedTensorMixin)
        assert tensor.device.type == device
    assert module.weight.dtype == dtype


def test_a_failed_conversion_leaves_the_module_as_it_was() -> None:
    module = torch.nn.LazyLinear(3)
    with pytest.raises(ValueError, match="uninitialized parameter"):
        module.to_empty(device="cpu")
    assert isinstance(module.weight, UninitializedTensorMixin)
    assert module(torch.randn(2, 4)).shape == (2, 3)
