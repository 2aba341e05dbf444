"""Writes through a view that repeats an element of its base: Note [Writes
through a view that repeats an element] (csrc/ops/repeating_views.h).

Functionalization folds a written view back into its base with the view's
inverse, which sums the places an element appears at, so such writes gave
silently wrong values (`fill_(2)` of an expanded view of ones wrote 4). They
are refused before anything is written, on every path to a write; the views
that repeat nothing stay writable and match eager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

import lazyfuse

View = Callable[[torch.Tensor], torch.Tensor]
Write = Callable[[torch.Tensor], Any]

REPEATING_VIEWS: dict[str, View] = {
    "expand": lambda x: x.view(1, 6).expand(3, 6),
    "expand, then a column slice": lambda x: x.view(1, 6).expand(3, 6)[:, 1:3],
    "expand, then transposed": lambda x: x.view(1, 6).expand(3, 6).t(),
    "unfold, overlapping windows": lambda x: x.unfold(0, 2, 1),
    "as_strided, zero stride": lambda x: x.as_strided((3, 3), (0, 1)),
    "as_strided, overlapping rows, then transposed": lambda x: x.as_strided((3, 3), (1, 1)).t(),
}


def _mask(view: torch.Tensor) -> torch.Tensor:
    return torch.ones(view.shape, dtype=torch.bool, device=view.device)


WRITES: dict[str, Write] = {
    "fill_": lambda v: v.fill_(2.0),
    "zero_": lambda v: v.zero_(),
    "add_": lambda v: v.add_(1.0),
    "mul_": lambda v: v.mul_(2.0),
    "exp_": lambda v: v.exp_(),
    "masked_fill_": lambda v: v.masked_fill_(_mask(v), 2.0),
    "index_put_": lambda v: v.index_put_(
        (torch.tensor([0], device=v.device),), torch.tensor(2.0, device=v.device)
    ),
    "copy_": lambda v: v.copy_(torch.full(v.shape, 2.0, device=v.device)),
    "setitem": lambda v: v.__setitem__(..., 2.0),
    "uniform_": lambda v: v.uniform_(),
    "out=": lambda v: torch.add(torch.ones(v.shape, device=v.device), 1.0, out=v),
}

MODES = ("no_grad", "autograd records", "inference_mode")


def _mode(mode: str) -> Any:
    if mode == "no_grad":
        return torch.no_grad()
    if mode == "inference_mode":
        return torch.inference_mode()
    return contextlib.nullcontext()


def _base(device: torch.device, mode: str) -> torch.Tensor:
    base = torch.arange(6.0, device=device)
    if mode == "autograd records":
        # A non-leaf, which eager lets a view of be written under autograd.
        return base.requires_grad_() * 1.0
    return base


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("view", REPEATING_VIEWS)
def test_write_through_a_repeating_view_is_refused(
    view: str, write: str, mode: str, lazy: torch.device
) -> None:
    if write == "out=" and mode == "autograd records":
        pytest.skip("out= functions refuse arguments that require grad, before any view check")
    with _mode(mode):
        base = _base(lazy, mode)
        with pytest.raises(RuntimeError, match=r"aten::\w+.*Please clone\(\) the tensor"):
            WRITES[write](REPEATING_VIEWS[view](base))
        # Nothing was written, and the process goes on.
        torch.testing.assert_close(base.cpu(), torch.arange(6.0))
        torch.testing.assert_close((base + 1).cpu(), torch.arange(6.0) + 1)


# Views whose elements are each one element of the base: each write matches
# eager, including those taken from a repeating view.
WRITABLE_VIEWS: dict[str, View] = {
    "a row of an expanded view": lambda x: x.view(1, 6).expand(3, 6)[1],
    "a transposed row of an expanded view": lambda x: x.view(2, 3)[None].expand(2, 2, 3)[0].t(),
    "an unfold whose windows tile the input": lambda x: x.unfold(0, 2, 2),
    "a window of a tiling unfold of a slice": lambda x: x[:4].unfold(0, 2, 2)[1],
    "as_strided without overlap": lambda x: x.as_strided((2, 2), (3, 1), 1),
    "an expand that broadcasts nothing": lambda x: x.view(2, 3).expand(2, 3),
}


@pytest.mark.parametrize("write", ["fill_", "add_", "copy_", "masked_fill_", "setitem"])
@pytest.mark.parametrize("view", WRITABLE_VIEWS)
def test_write_through_a_view_that_repeats_nothing_matches_eager(
    view: str, write: str, lazy: torch.device
) -> None:
    expected = torch.arange(6.0)
    WRITES[write](WRITABLE_VIEWS[view](expected))
    base = torch.arange(6.0, device=lazy)
    WRITES[write](WRITABLE_VIEWS[view](base))
    torch.testing.assert_close(base.cpu(), expected)


@pytest.mark.parametrize(
    "view",
    [lambda x: x.unfold(0, 2, 3)[0], lambda x: x.unfold(0, 2, 4)],
    ids=["one window of an unfold that skips elements", "an unfold that skips elements"],
)
def test_write_through_an_unfold_that_leaves_elements_out_is_refused(
    view: View, lazy: torch.device
) -> None:
    # Its inverse wrote zeros into the elements no window covers.
    base = torch.ones(6, device=lazy)
    with pytest.raises(RuntimeError, match="aten::fill_: .*unfold\\(\\) whose windows"):
        view(base).fill_(2.0)
    torch.testing.assert_close(base.cpu(), torch.ones(6))


def test_foreach_write_refuses_before_writing_any_target(lazy: torch.device) -> None:
    first = torch.zeros(3, device=lazy)
    second = torch.zeros(3, device=lazy)
    with torch.no_grad(), pytest.raises(RuntimeError, match="aten::_foreach_add_: .*clone"):
        torch._foreach_add_([first, second.view(1, 3).expand(2, 3)], 1.0)
    torch.testing.assert_close(first.cpu(), torch.zeros(3))
    torch.testing.assert_close(second.cpu(), torch.zeros(3))


def test_bucket_views_written_every_step_match_eager(lazy: torch.device) -> None:
    # DDP's shape: gradients copied into as_strided views of one flat bucket,
    # the same views step after step (their verdict is kept).
    def steps(device: torch.device) -> torch.Tensor:
        bucket = torch.zeros(10, device=device)
        views = [bucket.as_strided((2, 3), (3, 1), 0), bucket.as_strided((4,), (1,), 6)]
        for step in range(3):
            for k, view in enumerate(views):
                view.copy_(torch.full(view.shape, float(step + k), device=device))
            bucket.div_(2.0)
            if device.type == "lazy":
                lazyfuse.mark_step()
        return bucket

    torch.testing.assert_close(steps(lazy).cpu(), steps(torch.device("cpu")))


def _overlapping_rows(x: torch.Tensor) -> torch.Tensor:
    return x.as_strided((3, 3), (1, 1))


@pytest.mark.parametrize("write", ["fill_", "zero_", "copy_", "setitem"])
def test_overwriting_an_overlapping_as_strided_view_matches_eager(
    write: str, lazy: torch.device
) -> None:
    # Its inverse copies the view into the base in eager's order, so a write
    # of every element lands as eager's does.
    expected = torch.arange(6.0)
    WRITES[write](_overlapping_rows(expected))
    base = torch.arange(6.0, device=lazy)
    WRITES[write](_overlapping_rows(base))
    torch.testing.assert_close(base.cpu(), expected)


@pytest.mark.parametrize("write", ["add_", "masked_fill_", "index_put_", "exp_"])
def test_other_writes_to_an_overlapping_as_strided_view_are_refused(
    write: str, lazy: torch.device
) -> None:
    # Eager reads and writes the shared elements once per place.
    base = torch.arange(6.0, device=lazy)
    with pytest.raises(RuntimeError, match=r"aten::\w+: unsupported operation: more than one"):
        WRITES[write](_overlapping_rows(base))
    torch.testing.assert_close(base.cpu(), torch.arange(6.0))


AS_STRIDED_OF_VIEWS: dict[str, View] = {
    "of a slice": lambda x: x[2:].as_strided((2,), (2,)),
    "of a transpose": lambda x: x.view(2, 3).t().as_strided((2,), (1,)),
    "of a slice, then a row": lambda x: x[1:].as_strided((2, 2), (2, 1))[0],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("write", ["fill_", "add_", "copy_", "index_put_"])
@pytest.mark.parametrize("view", sorted(AS_STRIDED_OF_VIEWS))
def test_writes_through_an_as_strided_view_of_a_view_name_the_op(
    view: str, write: str, mode: str, lazy: torch.device
) -> None:
    # Functionalization cannot write back through as_strided below the first
    # view of a chain; its own message spoke of torch.compile.
    base = _base(lazy, mode)
    with (
        _mode(mode),
        pytest.raises(RuntimeError, match=r"aten::\w+: .*as_strided\(\) view of another"),
    ):
        WRITES[write](AS_STRIDED_OF_VIEWS[view](base))
    torch.testing.assert_close(base.detach().cpu(), torch.arange(6.0))
    torch.testing.assert_close((base.detach() + 1).cpu(), torch.arange(6.0) + 1)
