"""The in-place and out= variants of every claimed OpInfo entry, lazy against eager.

test_opinfo.py calls each entry's function. Users also write `x.add_(y)` and
`torch.add(x, y, out=o)`, which reach lazyfuse through other kernels: an
in-place op through its functional partner and a cast back, an out= op
through its functional variant and a write into out. Each variant runs on a
fresh tensor and on a view of a base, which must see the write:
- in-place: eager's values in the tensor and its base, or eager's exception
  type (`abs_` of a complex tensor used to compute where eager refuses);
- out=: an out tensor of the result's shape, an empty one eager resizes, and
  a view of a base, each with eager's values in out and base (`matmul` of a
  vector into a view used to stop with a select_scatter error: its `mm` writes
  a row into the vector);
- forward-mode AD, of the function and of the in-place variant: eager's
  values and tangents (`lerp_` with a tensor weight, and so `quantile`,
  raised an internal assert inside a dual level and left the thread's
  dispatch keys excluded).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.utils._pytree import tree_flatten, tree_map

from conftest import REFERENCE_DEVICE
from test_opinfo import (
    TOLERANCES,
    _first_kept_samples,
    _to_lazy,
    claimed_cases,
    claimed_entries,
    outcome,
    outcome_difference,
)

INPLACE_DTYPES = [torch.float32, torch.int64, torch.bool, torch.complex64]
OUT_DTYPES = [torch.float32, torch.int64, torch.bool]
SAMPLES = 4
FORWARD_AD_SAMPLES = 2

# In-place variants left out through a view, with why.
INPLACE_VIEW_SKIPS = {
    ("as_strided", ""): (
        "as_strided_ of a view takes coordinates in the view's own contiguous "
        "layout, not eager's offset into its base (README, limitations)"
    ),
}


def _first_samples(op: Any, dtype: torch.dtype) -> list[Any]:
    """Without gradients: out= refuses inputs that need them, as in eager."""
    return _first_kept_samples(op, dtype, SAMPLES, requires_grad=False)


def _in_view(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A base of zeros around `tensor`, and the view of it holding tensor's values."""
    base = torch.zeros((3, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    base[1] = tensor
    return base, base[1]


def _assert_close(op: Any, actual: torch.Tensor, expected: torch.Tensor) -> None:
    tolerance = TOLERANCES.get((op.name, op.variant_test_name), {})
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tolerance)


def _run_inplace(op: Any, sample: Any, lazy: torch.device, through_view: bool) -> str | None:
    def run(device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor | None]:
        target = sample.input.detach().clone().to(device)
        base = None
        if through_view:
            base, target = _in_view(target)
        args = tree_map(lambda v: _to_lazy(v, device), (sample.args, sample.kwargs))
        op.inplace_variant(target, *args[0], **args[1])
        return target, base

    torch.manual_seed(0)
    expected, eager_error = outcome(lambda: run("cpu"))
    torch.manual_seed(0)
    actual, lazy_error = outcome(lambda: run(lazy))
    resized = expected is not None and expected[0].shape != sample.input.shape
    if resized and lazy_error is not None:
        # Eager CPU's addbmm_ resizes a target it would broadcast; lazyfuse
        # refuses, as eager's other in-place ops do (README). In-place views
        # (as_strided_) change the shape in both.
        if "doesn't match the broadcast shape" not in str(lazy_error):
            return f"eager resized the target to {list(expected[0].shape)}; lazy: {lazy_error!r}"
        return None
    if problem := outcome_difference(eager_error, lazy_error):
        return problem
    if expected is not None:
        for e, a in zip(expected, actual, strict=True):
            if e is not None:
                _assert_close(op, a, e)
    return None


@pytest.mark.parametrize(
    ("op", "dtype"), claimed_cases(INPLACE_DTYPES, lambda op: op.inplace_variant)
)
@pytest.mark.parametrize("through_view", [False, True], ids=["tensor", "view"])
def test_inplace_variant(
    op: Any, dtype: torch.dtype, through_view: bool, lazy: torch.device
) -> None:
    if through_view and (reason := INPLACE_VIEW_SKIPS.get((op.name, op.variant_test_name))):
        pytest.skip(reason)
    failures = []
    for index, sample in enumerate(_first_samples(op, dtype)):
        if isinstance(sample.input, torch.Tensor):
            if problem := _run_inplace(op, sample, lazy, through_view):
                failures.append(f"sample {index}: {problem}")
    assert not failures, "\n".join(failures)


def _tensors_only(result: Any) -> bool:
    if isinstance(result, torch.Tensor):
        return True
    return isinstance(result, tuple) and all(isinstance(t, torch.Tensor) for t in result)


OUT_KINDS: dict[str, Callable[[torch.Tensor, torch.device | str], torch.Tensor]] = {
    "result_shape": lambda r, d: torch.full_like(r, 7, device=d),
    "empty": lambda r, d: torch.empty(0, dtype=r.dtype, device=d),
    "view": lambda r, d: _in_view(torch.full_like(r, 7, device=d))[1],
}


def _run_out(op: Any, sample: Any, lazy: torch.device, kind: str) -> str | None:
    torch.manual_seed(0)
    reference, error = outcome(lambda: op(sample.input, *sample.args, **sample.kwargs))
    if error is not None or not _tensors_only(reference):
        return None  # test_opinfo compares the op itself

    def run(device: torch.device | str) -> tuple[Any, Any]:
        out = tree_map(lambda r: OUT_KINDS[kind](r, device), reference)
        inputs = tree_map(lambda v: _to_lazy(v, device), (sample.input, sample.args, sample.kwargs))
        returned = op(inputs[0], *inputs[1], **inputs[2], out=out)
        return out, returned

    torch.manual_seed(0)
    expected, eager_error = outcome(lambda: run("cpu"))
    torch.manual_seed(0)
    actual, lazy_error = outcome(lambda: run(lazy))
    if problem := outcome_difference(eager_error, lazy_error):
        return problem
    if expected is not None:
        for e, a in zip(tree_flatten(expected)[0], tree_flatten(actual)[0], strict=True):
            if e is None:  # list outs (unbind_copy's) return nothing
                assert a is None
                continue
            _assert_close(op, a, e)
            if e._base is not None:
                _assert_close(op, a._base, e._base)
    return None


@pytest.mark.parametrize(("op", "dtype"), claimed_cases(OUT_DTYPES, lambda op: op.supports_out))
@pytest.mark.parametrize("kind", list(OUT_KINDS))
def test_out_variant(op: Any, dtype: torch.dtype, kind: str, lazy: torch.device) -> None:
    failures = []
    for index, sample in enumerate(_first_samples(op, dtype)):
        if "device" in sample.kwargs:
            continue  # a factory told to make a CPU tensor refuses a lazy out, as in eager
        if problem := _run_out(op, sample, lazy, kind):
            failures.append(f"sample {index}: {problem}")
    assert not failures, "\n".join(failures)


def _forward_ad_dtype(op: Any) -> torch.dtype:
    supported = op.supported_dtypes(REFERENCE_DEVICE)
    return torch.float64 if torch.float64 in supported else torch.float32


def _with_tangents(
    op: Any, sample: Any, device: torch.device | str, through_view: bool | None
) -> Any:
    """The sample's forward, its floating tensors made dual with seeded tangents;
    in place on a copy of the input when through_view is not None."""
    generator = torch.Generator().manual_seed(0)

    def dual(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        primal = value.detach().to(device)
        if not value.is_floating_point():
            return primal
        tangent = torch.randn(value.shape, generator=generator, dtype=value.dtype)
        return fwAD.make_dual(primal, tangent.to(device))

    with fwAD.dual_level():
        target, args, kwargs = tree_map(dual, (sample.input, sample.args, sample.kwargs))
        torch.manual_seed(0)
        if through_view is None:
            results = op(target, *args, **kwargs)
        else:
            target = target.clone()
            if through_view:
                target = _in_view(target)[1]
            op.inplace_variant(target, *args, **kwargs)
            results = target
        unpacked = []
        for result in tree_flatten(results)[0]:
            if isinstance(result, torch.Tensor) and result.is_floating_point():
                primal, tangent = fwAD.unpack_dual(result)
                unpacked += [primal.detach(), None if tangent is None else tangent.detach()]
        return unpacked


def _compare_forward_ad(op: Any, lazy: torch.device, through_view: bool | None) -> list[str]:
    failures = []
    for index, sample in enumerate(_first_samples(op, _forward_ad_dtype(op))[:FORWARD_AD_SAMPLES]):
        if not isinstance(sample.input, torch.Tensor):
            continue
        expected, eager_error = outcome(partial(_with_tangents, op, sample, "cpu", through_view))
        if isinstance(eager_error, NotImplementedError) and "forward AD" in str(eager_error):
            # torch lacks the in-place formula (acosh_); lazyfuse writes the
            # functional op's result and tangent into the tensor.
            expected, eager_error = outcome(partial(_with_tangents, op, sample, "cpu", None))
        actual, lazy_error = outcome(partial(_with_tangents, op, sample, lazy, through_view))
        if problem := outcome_difference(eager_error, lazy_error):
            failures.append(f"sample {index}: {problem}")
        elif expected is not None:
            assert len(actual) == len(expected)
            for e, a in zip(expected, actual, strict=True):
                assert (a is None) == (e is None), f"sample {index}: a tangent is missing"
                if e is not None:
                    _assert_close(op, a, e)
    return failures


@pytest.mark.parametrize("op", claimed_entries(lambda op: op.supports_forward_ad))
def test_forward_ad(op: Any, lazy: torch.device) -> None:
    failures = _compare_forward_ad(op, lazy, None)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "op", claimed_entries(lambda op: op.supports_forward_ad and op.inplace_variant)
)
@pytest.mark.parametrize("through_view", [False, True], ids=["tensor", "view"])
def test_inplace_variant_under_forward_ad(op: Any, through_view: bool, lazy: torch.device) -> None:
    if through_view and (reason := INPLACE_VIEW_SKIPS.get((op.name, op.variant_test_name))):
        pytest.skip(reason)
    failures = _compare_forward_ad(op, lazy, through_view)
    assert not failures, "\n".join(failures)
