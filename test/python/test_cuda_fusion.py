"""Fused CUDA kernels against eager, on the CUDA backing device. Marked
`cuda` and skipped without a GPU; the rest of the suite also runs on the CUDA
backing device whenever one is present, since it is the default there."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import lazyfuse

ON_CUDA = lazyfuse._C._backing_device().startswith("cuda")
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not ON_CUDA, reason="needs a CUDA GPU as the lazy device's backing device"),
]


def launches() -> int:
    return lazyfuse.metrics.counter_value("LazyFuseKernelLaunches")


def check(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor, atol=1e-5, rtol=1.3e-6) -> None:
    expected = fn(*[t.cuda() for t in inputs])
    lazy_inputs = [t.to(lazyfuse.lazy_device()) for t in inputs]
    lazyfuse.mark_step()
    before = launches()
    got = fn(*lazy_inputs)
    lazyfuse.mark_step()
    assert launches() > before, "nothing ran as a fused kernel"
    torch.testing.assert_close(got.cpu(), expected.cpu(), atol=atol, rtol=rtol)


def gelu_chain(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(F.gelu(x * 2.0 + 1.0)) * x


@pytest.mark.parametrize("n", [0, 1, 3, 4, 1001, 4096, 1 << 20])
def test_pointwise_sizes(n: int) -> None:
    check(gelu_chain, torch.randn(n))


def test_non_contiguous_input() -> None:
    x = torch.randn(64, 48).t()
    assert not x.is_contiguous()
    check(lambda a: (a.exp() + 1).sqrt(), x)


def test_offset_input_is_not_aligned() -> None:
    base = torch.randn(1025)
    check(lambda a: a.sigmoid() * 3, base[1:])


def test_broadcasts() -> None:
    check(
        lambda a, b, c: (a * b + c).relu(),
        torch.randn(32, 1, 16),
        torch.randn(8, 1),
        torch.randn(16),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype: torch.dtype) -> None:
    x = torch.randn(4099, dtype=dtype)
    y = torch.randn(4099, dtype=dtype)
    check(lambda a, b: F.silu(a) * b - a, x, y, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_softmax_and_layer_norm(dtype: torch.dtype) -> None:
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype != torch.float32 else {"atol": 1e-5, "rtol": 1e-5}
    x = torch.randn(33, 1000, dtype=dtype)
    check(lambda a: torch.softmax(a, -1), x, **tol)
    check(lambda a: torch.log_softmax(a * 2, -1), x, **tol)
    w = torch.randn(1000, dtype=dtype)
    check(lambda a, b: F.layer_norm(a, (1000,), b, b), x, w, **tol)


@pytest.mark.parametrize("dims", [(-1,), (0,), (0, 2), (1,)])
def test_reductions(dims: tuple[int, ...]) -> None:
    x = torch.randn(17, 31, 65)
    check(lambda a: (a * a).sum(dims), x, atol=1e-4, rtol=1e-5)
    check(lambda a: a.mean(dims, keepdim=True) + 1, x, atol=1e-5, rtol=1e-5)
    check(lambda a: a.amax(dims), x)
    check(lambda a: a.var(dims), x, atol=1e-5, rtol=1e-4)


def test_index_beyond_2_31() -> None:
    n = (1 << 31) + 7
    x = torch.ones(n, dtype=torch.uint8)
    lazy_x = x.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    y = (lazy_x * 3).cpu()
    assert y.numel() == n and int(y[-1]) == 3 and int(y[0]) == 3


def test_adam_step_is_one_kernel_per_parameter() -> None:
    model = torch.nn.Linear(256, 256).to(lazyfuse.lazy_device())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(8, 256, device=lazyfuse.lazy_device())).sum().backward()
    lazyfuse.mark_step()
    before = launches()
    opt.step()
    lazyfuse.mark_step()
    assert launches() - before == 2
    assert "aten::addcdiv" in lazyfuse.debug.fusion_plan()


def test_fused_kernels_are_inspectable() -> None:
    x = torch.randn(128, device=lazyfuse.lazy_device())
    y = gelu_chain(x)
    lazyfuse.mark_step()
    (record,) = lazyfuse.debug.last_kernels()
    assert "aten::gelu" in record["ops"] and "__global__" in str(record["source"])
    assert y.cpu().shape == (128,)


def test_cached_graph_launches_without_nvrtc() -> None:
    x = torch.randn(512, device=lazyfuse.lazy_device())
    for _ in range(3):
        x = gelu_chain(x)
        lazyfuse.mark_step()
    compiled = lazyfuse.metrics.counter_value("LazyFuseKernelsCompiled")
    x = gelu_chain(x)
    lazyfuse.mark_step()
    assert lazyfuse.metrics.counter_value("LazyFuseKernelsCompiled") == compiled
