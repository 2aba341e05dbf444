"""aten ops whose only kernel is a CompositeExplicitAutograd one run it on
bare lazy tensors, below functionalization (Note [aten composites on bare lazy
tensors], csrc/ops/functionalized_composite.cpp). Those that take views there,
or that are factories calling a CPU-only kernel, used to raise; each case is
checked against eager."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import lazyfuse
from lazyfuse.testing import assert_matches_eager


def _conv_tbc(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.conv_tbc(x, weight, bias, 1)


def _spatial_transformer(theta: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta, list(image.shape), align_corners=False)
    return F.grid_sample(image, grid, align_corners=False)


class PackedLSTM(nn.Module):
    """A padded batch through an LSTM as NLP code runs it: packed by length."""

    def __init__(self, lengths: list[int]) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.lengths = lengths  # on the host, as eager wants them on any device

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        packed = nn.utils.rnn.pack_padded_sequence(
            x, self.lengths, batch_first=True, enforce_sorted=False
        )
        out, (h, c) = self.lstm(packed)
        padded, out_lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        return padded, h, c, out_lengths


# (name, fn, args): ops whose composite takes a view of its input.
VIEW_TAKING_CASES: list[tuple[str, Callable[..., object], tuple[object, ...]]] = [
    (
        "conv_tbc",
        _conv_tbc,
        (
            torch.randn(7, 2, 3, requires_grad=True),
            torch.randn(3, 3, 4, requires_grad=True),
            torch.randn(4, requires_grad=True),
        ),
    ),
    (
        "affine_grid_generator",
        _spatial_transformer,
        (torch.randn(2, 2, 3, requires_grad=True), torch.randn(2, 3, 5, 6, requires_grad=True)),
    ),
    ("_pack_padded_sequence", PackedLSTM([2, 5, 3]), (torch.randn(3, 5, 4, requires_grad=True),)),
]


@pytest.mark.parametrize(
    ("fn", "args"), [case[1:] for case in VIEW_TAKING_CASES], ids=[c[0] for c in VIEW_TAKING_CASES]
)
def test_a_composite_taking_views_matches_eager_in_the_graph(
    fn: Callable[..., object], args: tuple[object, ...]
) -> None:
    assert_matches_eager(fn, *args)
    assert lazyfuse.metrics.fallback_counts() == {}


def test_packed_batch_sizes_stay_a_plain_cpu_tensor(lazy: torch.device) -> None:
    x = torch.randn(3, 5, 4).to(lazy)
    packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 3, 2]), batch_first=True)
    assert packed.data.device == lazy
    assert packed.batch_sizes.device.type == "cpu"
    assert not torch._is_functional_tensor(packed.batch_sizes)
    assert packed.batch_sizes.tolist() == [3, 3, 2, 1, 1]


def _grouped_mm(device: torch.device) -> torch.Tensor:
    torch.manual_seed(0)
    a, b = torch.randn(6, 8), torch.randn(3, 8, 8)
    offsets = torch.tensor([2, 4, 6], dtype=torch.int32)
    return torch._grouped_mm(a.to(device), b.to(device), offs=offsets.to(device))


# Composites that are backend kernels in all but name: they call a CPU-only
# kernel (kaiser_window's stub), resize a view of their result (fftfreq) or
# read a tensor's address (_grouped_mm's alignment check). They run as an op
# without a lowering does, keyed here by the overload the fallback counts.
EAGER_CASES: dict[str, Callable[[torch.device], torch.Tensor]] = {
    "aten::kaiser_window.beta": lambda device: torch.kaiser_window(9, True, 8.0, device=device),
    "aten::fft_fftfreq": lambda device: torch.fft.fftfreq(9, 0.5, device=device),
    "aten::_grouped_mm": _grouped_mm,
}


@pytest.mark.parametrize("name", list(EAGER_CASES))
def test_a_composite_that_cannot_run_on_lazy_tensors_falls_back_to_eager(
    name: str, lazy: torch.device
) -> None:
    call = EAGER_CASES[name]
    for _ in range(2):  # the first call finds out, the second goes there at once
        got = call(lazy)
        assert got.device == lazy
        torch.testing.assert_close(got.cpu(), call(torch.device("cpu")), rtol=0, atol=0)
    assert lazyfuse.metrics.fallback_counts() == {name: 2}


def test_bad_arguments_still_raise_eagers_error(lazy: torch.device) -> None:
    x, weight, bias = torch.randn(7, 2, 3), torch.randn(3, 5, 4), torch.randn(4)
    with pytest.raises(RuntimeError) as eager:
        torch.conv_tbc(x, weight, bias)
    with pytest.raises(RuntimeError) as lazily:
        torch.conv_tbc(x.to(lazy), weight.to(lazy), bias.to(lazy))
    assert str(lazily.value).splitlines()[0] == str(eager.value).splitlines()[0]
    with pytest.raises(RuntimeError) as eager:
        torch.kaiser_window(-1)
    with pytest.raises(RuntimeError) as lazily:
        torch.kaiser_window(-1, device=lazy)
    assert str(lazily.value).splitlines()[0] == str(eager.value).splitlines()[0]
    # The process stays usable, and a factory that raised for its argument
    # still runs in the graph.
    torch.testing.assert_close(
        torch.kaiser_window(5, device=lazy).cpu(), torch.kaiser_window(5), rtol=0, atol=0
    )
    torch.testing.assert_close(
        torch.conv_tbc(x.to(lazy), weight[:, :3].to(lazy), bias.to(lazy)).cpu(),
        torch.conv_tbc(x, weight[:, :3], bias),
    )


def _is_covered(name: str) -> bool:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if not (has(name, "CompositeExplicitAutograd") and not has(name, "CompositeImplicitAutograd")):
        return True
    base, _, overload = name.removeprefix("aten::").partition(".")
    op = getattr(getattr(torch.ops.aten, base), overload or "default")
    schema = op._schema
    aliases = any(a.alias_info is not None for a in [*schema.arguments, *schema.returns])
    if aliases or not schema.returns:
        return True
    if torch.Tag.pointwise in op.tags or torch.Tag.nondeterministic_seeded in op.tags:
        return True
    return has(name, "Lazy")


def test_every_functional_aten_composite_has_a_lazy_kernel() -> None:
    """A new torch's composite of this kind runs as these do, not unwrapped."""
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")]
    uncovered = [name for name in names if not _is_covered(name)]
    assert uncovered == []


def test_a_composite_reading_a_lazy_tensors_storage_raises_instead_of_crashing(
    lazy: torch.device,
) -> None:
    """LTC leaves a bare lazy tensor's storage null: a C++ composite that read
    its size crashed the process (forward AD's _has_same_storage_numel did,
    before it had a lazy kernel). Its arguments' storage now raises on access,
    as a tensor without storage does; a Python one shows it."""
    library = torch.library.Library("aten", "FRAGMENT")
    try:
        library.define("_lazyfuse_test_storage_bytes(Tensor self) -> Tensor")
        library.impl(
            "_lazyfuse_test_storage_bytes",
            lambda t: t * 0 + t.untyped_storage().nbytes(),
            "CompositeExplicitAutograd",
        )
        op = torch.ops.aten._lazyfuse_test_storage_bytes
        torch.testing.assert_close(op(torch.ones(3)), torch.full((3,), 12.0))
        with pytest.raises(NotImplementedError, match="Cannot access storage"):
            op(torch.ones(3).to(lazy) * 2)
        torch.testing.assert_close((torch.ones(3).to(lazy) * 2).cpu(), torch.full((3,), 2.0))
    finally:
        library._destroy()
