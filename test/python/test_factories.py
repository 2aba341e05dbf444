"""Constant factories on the lazy device (full, zeros, ones, scalar_tensor):
a scalar expanded in the graph, with eager's values, dtypes and errors, and
no Python kernel on the way (ATen's composites filled an empty tensor of
host memory in place, through functionalization's Python meta check)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import lazyfuse
from python_kernels import python_kernel_calls

FACTORIES: dict[str, Callable[[torch.device], torch.Tensor]] = {
    "full": lambda d: torch.full((2, 3), 2.5, device=d),
    "full, int": lambda d: torch.full((4,), 7, device=d),
    "full, bool": lambda d: torch.full((2,), True, device=d),
    "full, complex": lambda d: torch.full((2,), 1 + 2j, device=d),
    "full, half": lambda d: torch.full((3,), 0.1, dtype=torch.half, device=d),
    "full, -inf": lambda d: torch.full((1, 3), float("-inf"), device=d),
    "full, -0.0": lambda d: torch.full((2, 2), -0.0, device=d),
    "zeros": lambda d: torch.zeros(3, 4, device=d),
    "zeros, int32": lambda d: torch.zeros(2, 3, dtype=torch.int32, device=d),
    "zeros, empty": lambda d: torch.zeros(0, 3, device=d),
    "ones": lambda d: torch.ones(5, device=d),
    "ones, 0-dim": lambda d: torch.ones((), device=d),
    "ones, bfloat16": lambda d: torch.ones(3, 4, dtype=torch.bfloat16, device=d),
    "scalar_tensor": lambda d: torch.scalar_tensor(3, device=d),
    "setitem of a number": lambda d: _set_column(torch.arange(12.0, device=d).view(3, 4)),
}


def _set_column(x: torch.Tensor) -> torch.Tensor:
    x[:, 1] = -5.0  # the number becomes a 0-dim tensor: scalar_tensor
    return x


@pytest.mark.parametrize("name", FACTORIES)
def test_a_constant_factory_matches_eager_without_python(name: str, lazy: torch.device) -> None:
    expected = FACTORIES[name](torch.device("cpu"))
    lazyfuse.mark_step()
    with python_kernel_calls() as calls:
        made = FACTORIES[name](lazy)
    assert not calls, f"{name} ran Python kernels: {dict(calls)}"
    got = made.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected)
    if got.is_floating_point():
        assert torch.equal(torch.signbit(got), torch.signbit(expected))


def test_factories_of_many_shapes_in_one_graph_keep_their_own_shapes(lazy: torch.device) -> None:
    # Expand nodes took their shape from LTC's shape cache keyed by a hash not
    # yet computed, so one could come out with another's shape.
    shapes = [(2,), (3, 4), (5,), (2, 3, 4), (1,), (4, 1, 2)]
    made = [torch.zeros(shape, device=lazy) + k for k, shape in enumerate(shapes)]
    source = torch.tensor([7.0], device=lazy)
    copied = []
    for shape in shapes:
        target = torch.empty(shape, device=lazy)
        target.copy_(source)  # a broadcast copy: another expand
        copied.append(target)
    for k, (shape, a, b) in enumerate(zip(shapes, made, copied, strict=True)):
        assert a.cpu().shape == shape and b.cpu().shape == shape
        assert torch.equal(a.cpu(), torch.full(shape, float(k)))
        assert torch.equal(b.cpu(), torch.full(shape, 7.0))


def test_a_factory_with_bad_arguments_names_the_problem(lazy: torch.device) -> None:
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        torch.zeros(-1, 2, device=lazy)
    with pytest.raises(RuntimeError, match="sparse layout"):
        torch.ones(2, layout=torch.sparse_coo, device=lazy)
    for value, dtype in ((300, torch.uint8), (float("nan"), torch.int32), (1 + 2j, torch.float32)):
        with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
            torch.full((2,), value, dtype=dtype, device=lazy)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.full((2,), 70000, dtype=torch.half, device=lazy)
    assert torch.equal(torch.ones(2, device=lazy).cpu(), torch.ones(2))


def test_a_new_fill_value_compiles_no_new_graph(lazy: torch.device) -> None:
    # The value is a host scalar parameter of the graph, as a scalar operand is.
    for value in (2.5, 3.5):
        torch.full((8,), value, device=lazy).sum().cpu()
    compiles = lazyfuse.metrics.counter_value("LazyFuseCompiles")
    out = torch.full((8,), 4.5, device=lazy).sum()
    assert out.item() == 36.0
    assert lazyfuse.metrics.counter_value("LazyFuseCompiles") == compiles


def _where(d: torch.device, dtype: torch.dtype, value: float) -> torch.Tensor:
    return torch.where(
        torch.tensor([True, False], device=d), torch.ones(2, dtype=dtype, device=d), value
    )


def _set_item(d: torch.device, dtype: torch.dtype, value: float) -> torch.Tensor:
    t = torch.ones(2, dtype=dtype, device=d)
    t[0] = value
    return t


def _set_masked(d: torch.device, dtype: torch.dtype, value: float) -> torch.Tensor:
    t = torch.ones(2, dtype=dtype, device=d)
    t[torch.tensor([False, True], device=d)] = value
    return t


WRAPPED_SCALARS: dict[str, Callable[[torch.device, torch.dtype, float], torch.Tensor]] = {
    "scalar_tensor": lambda d, dtype, v: torch.scalar_tensor(v, dtype=dtype, device=d),
    "where": _where,
    "setitem": _set_item,
    "masked setitem": _set_masked,
    "full": lambda d, dtype, v: torch.full((2,), v, dtype=dtype, device=d),
}


@pytest.mark.parametrize("dtype", [torch.half, torch.bfloat16, torch.float32, torch.uint8])
@pytest.mark.parametrize("name", list(WRAPPED_SCALARS))
def test_a_wrapped_scalar_out_of_range_does_what_eager_does(
    name: str, dtype: torch.dtype, lazy: torch.device
) -> None:
    """Python's indexing and torch.where wrap a scalar with scalar_tensor,
    which rounds a real number past half's or bfloat16's range to an infinity
    (scores[mask] = -1e9 in float16), where full refuses it. The lazy
    scalar_tensor refused it as full does."""
    make = WRAPPED_SCALARS[name]
    for value in (-1e9, 1e5, 1e39, 2**31, 300, float("inf")):
        try:
            want: torch.Tensor | None = make(torch.device("cpu"), dtype, value)
        except RuntimeError:
            want = None
        if want is None:
            with pytest.raises(RuntimeError, match="cannot be converted"):
                make(lazy, dtype, value).cpu()
        else:
            torch.testing.assert_close(make(lazy, dtype, value).cpu(), want, equal_nan=True)
