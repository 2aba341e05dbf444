"""torch.func and forward-mode AD on lazy tensors (jvp, jacfwd, hessian,
vmap over grad, torch.autograd.forward_ad), against eager.

Forward AD asks whether a tangent has its primal's layout through ops whose
only kernels read a tensor's storage, which a lazy tensor has none of; each
such call used to crash the process. functorch's batching rules call
convolution_backward without bias sizes, where torch's own shape function
gave the node too few shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import func, nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten, tree_unflatten

import lazyfuse
from lazyfuse.testing import assert_matches_eager
from test_opinfo import CLAIMED, TOLERANCES, _spelling, opinfo_entry


def _jvp_tanh_matmul(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return func.jvp(lambda t: (t @ w).tanh().softmax(-1), (x,), (torch.ones_like(x),))


def _jacfwd(x: torch.Tensor) -> torch.Tensor:
    return func.jacfwd(lambda t: t.sin() * t.sum())(x)


def _hessian(x: torch.Tensor) -> torch.Tensor:
    return func.hessian(lambda t: (t.exp() * t).sum())(x)


def _dual_through_a_model(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.full_like(x, 0.5))
        out = F.layer_norm(F.linear(dual, weight).relu(), (weight.shape[0],))
        primal, tangent = fwAD.unpack_dual(out)
    return primal, tangent


# The cases of Note [Forward Grad View/inplace] in torch's autograd_meta.cpp:
# a tangent written into a view or a base reaches the other.
def _dual_copied_into_a_view(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with fwAD.dual_level():
        base = x.clone()
        view = base[1]
        view.copy_(fwAD.make_dual(y, y * 3))
        return fwAD.unpack_dual(base).tangent, fwAD.unpack_dual(view).tangent


def _dual_copied_into_a_base(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with fwAD.dual_level():
        base = torch.zeros_like(x)
        view = base.t()[2:]
        base.copy_(fwAD.make_dual(x, x * y.sum()))
        return fwAD.unpack_dual(view).tangent, fwAD.unpack_dual(base.mul_(2)).tangent


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.linear = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(F.relu(self.conv(x)).flatten(1))


def _per_sample_gradients(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> dict[str, torch.Tensor]:
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = func.functional_call(model, p, (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    return func.vmap(func.grad(loss), in_dims=(None, 0, 0))(params, x, y)


def _jacrev_through_a_convolution(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return func.jacrev(model)(x)


def _jacrev_through_norms(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    layer = func.jacrev(lambda t: F.layer_norm(t, (6,)))(x)
    group = func.jacrev(lambda t: F.group_norm(t, 2))(x.reshape(2, 2, 3))
    return layer, group


CASES: dict[str, tuple[Callable[..., object], tuple[object, ...]]] = {
    "jvp": (_jvp_tanh_matmul, (torch.randn(3, 4), torch.randn(4, 5))),
    "jacfwd": (_jacfwd, (torch.randn(5),)),
    "hessian": (_hessian, (torch.randn(4),)),
    "dual_through_a_model": (_dual_through_a_model, (torch.randn(2, 4), torch.randn(3, 4))),
    "dual_copied_into_a_view": (_dual_copied_into_a_view, (torch.randn(3, 4), torch.randn(4))),
    "dual_copied_into_a_base": (_dual_copied_into_a_base, (torch.randn(3, 4), torch.randn(2))),
    "per_sample_gradients": (
        _per_sample_gradients,
        (SmallCNN(), torch.randn(5, 1, 8, 8), torch.randint(0, 3, (5,))),
    ),
    "jacrev_through_a_convolution": (
        _jacrev_through_a_convolution,
        (SmallCNN(), torch.randn(2, 1, 8, 8)),
    ),
    # vmap's batch rule for the norms' backward expands and clones their
    # statistics; a lazy clone records nothing, so the expanded alias reached
    # ATen's kernel, which reads them as contiguous memory.
    "jacrev_through_norms": (_jacrev_through_norms, (torch.randn(2, 6),)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_ad_matches_eager(name: str) -> None:
    fn, args = CASES[name]
    assert_matches_eager(fn, *args, check_grad=False)
    assert lazyfuse.metrics.fallback_counts() == {}


@pytest.mark.parametrize(
    "trace",
    [
        lambda x: make_fx(lambda t: t.cos() * 2)(x),
        lambda x: func.linearize(lambda t: t.cos() * 2, x),
    ],
    ids=["make_fx", "linearize"],
)
def test_make_fx_refuses_lazy_tensors_instead_of_freezing_them(
    trace: Callable[[torch.Tensor], object], lazy: torch.device
) -> None:
    # It traced lazy tensors' ops as constants: the graph ignored its inputs.
    with pytest.raises(RuntimeError, match="make_fx cannot trace lazy tensors"):
        trace(torch.randn(3, 2).to(lazy))
    graph = make_fx(lambda t: t.cos() * 2)(torch.randn(3, 2))  # CPU tensors still trace
    x = torch.randn(3, 2)
    torch.testing.assert_close(graph(x), x.cos() * 2)


def _norm_backwards_on_views(
    x: torch.Tensor, grad: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    # Statistics as expanded views, cloned as a caller of these kernels
    # (functorch's batch rule) does to make them contiguous.
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [6], weight, None, 1e-5)
    layer = torch.ops.aten.native_layer_norm_backward(
        grad,
        x.expand(3, 4, 6).clone(),
        [6],
        mean.expand(3, 4, 1).clone(),
        rstd.expand(3, 4, 1).clone(),
        weight,
        None,
        [True, True, False],
    )
    flat = x.reshape(4, 2, 3)
    _, g_mean, g_rstd = torch.ops.aten.native_group_norm(flat, None, None, 4, 2, 3, 2, 1e-5)
    group = torch.ops.aten.native_group_norm_backward(
        grad[0].reshape(4, 2, 3),
        flat,
        g_mean[:1].expand(4, 2).clone(),
        g_rstd[:1].expand(4, 2).clone(),
        None,
        4,
        2,
        3,
        2,
        [True, False, False],
    )
    return layer[0], layer[1], group[0]


def test_norm_backward_kernels_read_their_statistics_as_laid_out() -> None:
    assert_matches_eager(
        _norm_backwards_on_views,
        torch.randn(4, 6),
        torch.randn(3, 4, 6),
        torch.randn(6),
        check_grad=False,
    )


def test_the_copy_on_write_clone_is_a_clone(lazy: torch.device) -> None:
    x = torch.randn(3, 4)
    lazy_x = x.to(lazy)
    clone = lazy_x._lazy_clone()
    lazy_x.add_(1)
    torch.testing.assert_close(clone.cpu(), x, rtol=0, atol=0)
    assert lazyfuse.metrics.fallback_counts() == {}


def test_layout_queries_answer_for_the_lazy_layout(lazy: torch.device) -> None:
    x = torch.randn(3, 4).to(lazy)
    assert torch.ops.aten._has_same_storage_numel(x, torch.randn(12).to(lazy))
    assert not torch.ops.aten._has_same_storage_numel(x, torch.randn(4, 4).to(lazy))
    zeros = torch.ops.aten._new_zeros_with_same_feature_meta(
        torch.randn(2, 5, dtype=torch.float64).to(lazy), x, self_num_batch_dims=1
    )
    assert zeros.device == lazy and zeros.dtype == torch.float64
    torch.testing.assert_close(zeros.cpu(), torch.zeros(2, 3, 4, dtype=torch.float64))


# Every claimed OpInfo entry that supports forward AD, its first float32
# sample: func.jvp along random tangents of every floating-point tensor.
FORWARD_AD_CASES = [
    opinfo_entry(name, variant)
    for name, variant in CLAIMED
    if opinfo_entry(name, variant).supports_forward_ad
    and torch.float32 in opinfo_entry(name, variant).supported_dtypes("cpu")
]


def _jvp_of_sample(op: Any, sample: Any, device: torch.device) -> tuple[Any, Any]:
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    flat = [t.detach().to(device) if isinstance(t, torch.Tensor) else t for t in flat]
    primal_at = [
        i for i, t in enumerate(flat) if isinstance(t, torch.Tensor) and t.is_floating_point()
    ]

    def call(*primals: torch.Tensor) -> Any:
        full = list(flat)
        for i, primal in zip(primal_at, primals, strict=True):
            full[i] = primal
        op_input, args, kwargs = tree_unflatten(full, spec)
        return op(op_input, *args, **kwargs)

    generator = torch.Generator().manual_seed(0)
    tangents = tuple(torch.randn(flat[i].shape, generator=generator).to(device) for i in primal_at)
    return func.jvp(call, tuple(flat[i] for i in primal_at), tangents)


@pytest.mark.parametrize(
    "op",
    FORWARD_AD_CASES,
    ids=[_spelling(op.name, op.variant_test_name) for op in FORWARD_AD_CASES],
)
def test_an_opinfo_sample_under_jvp_matches_eager(op: Any, lazy: torch.device) -> None:
    sample = next(iter(op.sample_inputs("cpu", torch.float32)))
    try:
        expected = _jvp_of_sample(op, sample, torch.device("cpu"))
    except (RuntimeError, NotImplementedError) as eager_error:
        # No forward AD for some argument (a loss's target), or a host-only
        # argument (tensor_split's indices, which lazy refuses on its device
        # first): refused as well.
        with pytest.raises(type(eager_error)):
            _jvp_of_sample(op, sample, lazy)
        return
    lazyfuse.metrics.reset()
    got = _jvp_of_sample(op, sample, lazy)
    lazyfuse.mark_step()
    tolerance = TOLERANCES.get((op.name, op.variant_test_name), {})
    for e, g in zip(tree_flatten(expected)[0], tree_flatten(got)[0], strict=True):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g.cpu(), e, equal_nan=True, **tolerance)
        else:
            assert g == e
    assert lazyfuse.metrics.fallback_counts() == {}
