"""resize_ and resize_as_ of lazy tensors, and out= tensors resized by the op.

torch's functionalization turned a shrinking resize_ into a view of the old
storage and refused to grow any such view, so PyTorch's own advice for
reusing an out= tensor (`t.resize_(0)`, then `op(..., out=t)`) raised
"Attempted to resize a view tensor to a larger size"; `resize_as_` stopped
its graph; and a view out= tensor of the right elements but another shape
(matmul's `mm` writing a row into a vector) stopped with a select_scatter
error. What lazyfuse cannot lay out as eager does raises, naming the op.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import lazyfuse

DEV = lazyfuse.lazy_device()


def _reuse_after_resize_to_zero(d: torch.device | str) -> list[torch.Tensor]:
    out = torch.arange(6.0, device=d)
    out.resize_(0)
    results = []
    for n in (2, 5, 3):
        torch.mul(torch.arange(float(n), device=d), 2, out=out)
        results.append(out.clone())
    return results


def _shrink_then_grow(d: torch.device | str) -> list[torch.Tensor]:
    t = torch.arange(6.0, device=d)
    t.resize_(2, 2)
    kept = t.clone()
    t.resize_(3, 3)
    t.fill_(1)
    return [kept, t]


def _resize_as(d: torch.device | str) -> list[torch.Tensor]:
    t = torch.arange(6.0, device=d)
    t.resize_as_(torch.zeros(2, 3))
    u = torch.arange(6.0, device=d)
    u.resize_as_(torch.zeros(2, 2, device=d))
    return [t, u]


def _shrink_a_view(d: torch.device | str) -> list[torch.Tensor]:
    base = torch.zeros(3, 6, device=d)
    view = base[1]
    view.resize_(2, 2)
    view.fill_(1)
    return [view, base]


def _matmul_into_a_view(d: torch.device | str) -> list[torch.Tensor]:
    base = torch.zeros(2, 5, device=d)
    out = base[1]
    torch.matmul(torch.arange(3.0, device=d), torch.ones(3, 5, device=d), out=out)
    return [out, base]


def _same_elements_into_a_view(d: torch.device | str) -> list[torch.Tensor]:
    base = torch.zeros(3, 6, device=d)
    out = base[1]
    torch.add(torch.ones(2, 3, device=d), 1, out=out)
    return [out, base]


def _smaller_into_a_view(d: torch.device | str) -> list[torch.Tensor]:
    base = torch.zeros(3, 6, device=d)
    out = base[1]
    torch.mm(torch.ones(2, 3, device=d), torch.ones(3, 2, device=d), out=out)
    return [out, base]


CASES: dict[str, Callable[[torch.device | str], list[torch.Tensor]]] = {
    "reuse_after_resize_to_zero": _reuse_after_resize_to_zero,
    "shrink_then_grow": _shrink_then_grow,
    "resize_as": _resize_as,
    "shrink_a_view": _shrink_a_view,
    "matmul_into_a_view": _matmul_into_a_view,
    "same_elements_into_a_view": _same_elements_into_a_view,
    "smaller_into_a_view": _smaller_into_a_view,
}


@pytest.mark.parametrize("name", list(CASES))
def test_resize_gives_eager_values(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's deprecation of resizing outs
        expected = CASES[name]("cpu")
        lazyfuse.metrics.reset()
        actual = CASES[name](DEV)
    for e, a in zip(expected, actual, strict=True):
        assert a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e)
    assert lazyfuse.metrics.fallback_counts() == {}


def test_a_resized_view_out_warns_as_eager() -> None:
    for d in ("cpu", DEV):
        base = torch.zeros(3, 6, device=d)
        with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
            torch.add(torch.ones(2, 3, device=d), 1, out=base[1])


def _grow_a_view() -> None:
    torch.zeros(3, 6, device=DEV)[1].resize_(2, 4)


def _grow_a_view_out() -> None:
    torch.add(torch.ones(2, 4, device=DEV), 1, out=torch.zeros(3, 6, device=DEV)[1])


def _resize_a_viewed_tensor() -> None:
    t = torch.arange(6.0, device=DEV)
    view = t[:3]
    t.resize_(2)
    del view


REFUSED: dict[str, tuple[Callable[[], None], str]] = {
    "grow_a_view": (_grow_a_view, r"aten::resize_: lazyfuse cannot grow a view \(from \[6\]"),
    "grow_a_view_out": (_grow_a_view_out, r"aten::add: the out= tensor is a view of shape \[6\]"),
    "resize_a_viewed_tensor": (_resize_a_viewed_tensor, "while views of it are alive"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_lazy_tensors_cannot_lay_out_raises_naming_the_op(name: str) -> None:
    call, message = REFUSED[name]
    kept = torch.arange(4.0, device=DEV) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match=message):
            call()
    lazyfuse.mark_step()
    torch.testing.assert_close(kept.cpu(), torch.arange(4.0) * 2)
