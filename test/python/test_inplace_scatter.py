"""Writes into a view, `base[...] = src`: functionalization records them as
scatters (slice_scatter, select_scatter, diagonal_scatter, as_strided_scatter)
that return a new base. Where the run may overwrite the old base, a scatter
writes its part in place, as eager does, instead of copying the whole base:
a KV cache copied all of itself for every token, 1900x eager's time per
write. Values must be eager's, and memory anything can still read is never
written."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_inplace_index_writes import INDEX_WRITES

import lazyfuse

SCATTERS = "LazyFuseInPlaceScatters"


pytestmark = pytest.mark.usefixtures("donation_on")


def scatters() -> int:
    return lazyfuse.metrics.counter_value(SCATTERS)


def write_slice(x: torch.Tensor, v: torch.Tensor, t: int) -> None:
    x[:, t % 5 : t % 5 + 2] = v[:, :2]


def write_select(x: torch.Tensor, v: torch.Tensor, t: int) -> None:
    x[:, t % 7] = v[:, 0]


def write_diagonal(x: torch.Tensor, v: torch.Tensor, t: int) -> None:
    x.diagonal(offset=t % 2).copy_(v[:, 0])


def write_as_strided(x: torch.Tensor, v: torch.Tensor, t: int) -> None:
    x.as_strided((3, 2), (7, 2), t % 3).copy_(v[:3, :2])


WRITES: dict[str, Callable[[torch.Tensor, torch.Tensor, int], None]] = {
    "slice": write_slice,
    "select": write_select,
    "diagonal": write_diagonal,
    "as_strided": write_as_strided,
    **INDEX_WRITES,  # index_copy_, x[idx] = v, scatter_ and their kin
}


# Where the base's memory comes from: an upload, or a kernel's own output
# (a cast, so that it cannot reuse its input's memory). Emulated CUDA once
# padded each output with guard bytes inside its storage, so that no write
# went in place there, while on a GPU every one did.
ORIGINS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "uploaded": lambda t: t.to(lazyfuse.lazy_device()),
    "computed": lambda t: t.double().to(lazyfuse.lazy_device()).float(),
}


@pytest.mark.parametrize("origin", sorted(ORIGINS))
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_into_a_view_stays_in_the_bases_memory(
    engine: str, write: str, origin: str
) -> None:
    torch.manual_seed(0)
    expected = torch.randn(6, 7)
    values = [torch.randn(6, 7) for _ in range(4)]
    x = ORIGINS[origin](expected)
    lazyfuse.mark_step()
    before, addresses = scatters(), set()
    for t, v in enumerate(values):
        WRITES[write](expected, v, t)
        WRITES[write](x, v.to(x.device) * 1, t)
        lazyfuse.mark_step()
        addresses.add(lazyfuse.debug.data_address(x))
    assert scatters() - before == len(values)
    assert len(addresses) == 1
    assert torch.equal(x.cpu(), expected)


def test_a_kv_cache_is_written_a_token_at_a_time(engine: str) -> None:
    torch.manual_seed(0)
    keys = [torch.randn(2, 4, 8) for _ in range(6)]
    expected = torch.zeros(2, 4, 6, 8)
    cache = expected.to(lazyfuse.lazy_device())
    before = scatters()
    scores = []
    for t, k in enumerate(keys):
        expected[:, :, t] = k * 2
        cache[:, :, t] = k.to(cache.device) * 2
        scores.append(cache[:, :, : t + 1].sum(-1))
        lazyfuse.mark_step()
    assert scatters() - before == len(keys)
    assert torch.equal(cache.cpu(), expected)
    for t, got in enumerate(scores):
        # Each read the cache as it was at its token: a later in-place write
        # must not reach it.
        torch.testing.assert_close(got.cpu(), expected[:, :, : t + 1].sum(-1))


def test_a_functional_scatter_leaves_its_base_as_it_was(engine: str) -> None:
    torch.manual_seed(0)
    base, src = torch.randn(5, 4), torch.randn(4)
    x = base.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    y = torch.select_scatter(x, src.to(x.device), 0, 2)
    z = x + 1  # read after the scatter: its base cannot be written over
    lazyfuse.mark_step()
    assert torch.equal(y.cpu(), torch.select_scatter(base, src, 0, 2))
    assert torch.equal(z.cpu(), base + 1)
    assert torch.equal(x.cpu(), base)


@pytest.mark.parametrize("row", [0, 1], ids=["the_view_written", "another_row"])
def test_a_view_held_across_steps_sees_what_eager_shows(engine: str, row: int) -> None:
    # The view shares the base's memory, so the base is not the run's to
    # write over; in eager the view sees a write into its own row only.
    torch.manual_seed(0)
    expected = torch.randn(3, 4)
    x = expected.to(lazyfuse.lazy_device())
    held, expected_held = x[0], expected[0]
    lazyfuse.mark_step()
    held.cpu()
    v = torch.randn(4)
    expected[row] = v
    x[row] = v.to(x.device)
    lazyfuse.mark_step()
    assert torch.equal(x.cpu(), expected)
    assert torch.equal(held.cpu(), expected_held)


def test_a_write_of_another_dtype_converts_as_in_eager(engine: str) -> None:
    expected = torch.zeros(4, 3)
    x = expected.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    v = torch.tensor([1.5, -2.5, 3.25], dtype=torch.float64)
    expected[1] = v
    x[1] = v.to(x.device)
    lazyfuse.mark_step()
    assert torch.equal(x.cpu(), expected)


def test_a_write_through_an_overlapping_view_is_eagers(engine: str) -> None:
    # Elements of the view share memory: ATen's own scatter runs, which
    # writes as eager's copy does.
    expected = torch.zeros(5)
    x = expected.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    src = torch.arange(4.0).reshape(2, 2)
    expected.as_strided((2, 2), (1, 1)).copy_(src)
    x.as_strided((2, 2), (1, 1)).copy_(src.to(x.device))
    lazyfuse.mark_step()
    assert torch.equal(x.cpu(), expected)
