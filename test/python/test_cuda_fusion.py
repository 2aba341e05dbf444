"""Fused CUDA kernels against eager. The same test bodies run natively on a
GPU backing device, and on the CPU under CUDA emulation: the kernels the CUDA
dialect renders, executed one host thread per CUDA thread with every memory
access checked. Tests that need GPU-sized memory say so in their skip."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from conftest import (
    HOST_COMPILER,
    NO_FUSED_KERNELS,
    ON_CUDA,
    assert_row_moments_as_accurate_as_eager,
)

DEVICE = lazyfuse.config.backing_device()
pytestmark = [
    pytest.mark.skipif(not ON_CUDA and not HOST_COMPILER, reason=NO_FUSED_KERNELS),
    pytest.mark.usefixtures("fused_kernels"),
]


def launches() -> int:
    return lazyfuse.metrics.counter_value("LazyFuseKernelLaunches")


def check(
    fn: Callable[..., torch.Tensor], *inputs: torch.Tensor, atol=1e-5, rtol=1.3e-6, equal_nan=False
) -> None:
    expected = fn(*[t.to(DEVICE) for t in inputs])
    lazy_inputs = [t.to(lazyfuse.lazy_device()) for t in inputs]
    lazyfuse.mark_step()
    before = launches()
    got = fn(*lazy_inputs)
    lazyfuse.mark_step()
    # An empty output needs no launch.
    assert launches() > before or got.numel() == 0, "nothing ran as a fused kernel"
    torch.testing.assert_close(got.cpu(), expected.cpu(), atol=atol, rtol=rtol, equal_nan=equal_nan)


def gelu_chain(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(F.gelu(x * 2.0 + 1.0)) * x


@pytest.mark.parametrize("n", [0, 1, 3, 4, 1001, 4096, 1 << 18])
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


@pytest.mark.parametrize("exponent", [2, 3, -2, 0.5])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pow_rounds_like_eager(dtype: torch.dtype, exponent: float) -> None:
    # Eager's pow(x, 3) multiplies in bfloat16 (and in half on CUDA), rounding
    # each product; an H100 run found the fused kernel rounding once. The
    # result feeds a float32 add, so an ulp of the half value fails the check.
    x = torch.randn(4099).mul(8).to(dtype)
    x = x.abs() if exponent == 0.5 else x
    y = torch.randn(4099)
    check(lambda a, b: b + a.pow(exponent), x, y, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_softmax_and_layer_norm(dtype: torch.dtype) -> None:
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype != torch.float32 else {"atol": 1e-5, "rtol": 1e-5}
    x = torch.randn(33, 1000, dtype=dtype)
    check(lambda a: torch.softmax(a, -1), x, **tol)
    check(lambda a: torch.log_softmax(a * 2, -1), x, **tol)
    w = torch.randn(1000, dtype=dtype)
    check(lambda a, b: F.layer_norm(a, (1000,), b, b), x, w, **tol)


EPILOGUE_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum_then_t": lambda a: a.sum(-1).t() * 3,
    "mean_then_permute": lambda a: (a * 2).mean(-1, keepdim=True).permute(1, 0, 2) + 1,
    "layer_norm_then_transpose": lambda a: F.layer_norm(a, (64,)).transpose(0, 1) * 2,
    "amax_dim0_then_t": lambda a: a.amax(0).t() - 1,
    "softmax_then_select": lambda a: torch.softmax(a, -1).select(1, 2) + 1,
    "softmax_then_reshape": lambda a: torch.softmax(a, -1).reshape(20, 64) * 2,
}


@pytest.mark.parametrize("case", sorted(EPILOGUE_VIEWS))
def test_views_after_a_reduction(case: str) -> None:
    # A reduction's epilogue runs at the row being reduced. A view that moves
    # elements across rows used to join it and read the wrong row's result.
    check(EPILOGUE_VIEWS[case], torch.randn(4, 5, 64), atol=1e-5, rtol=1e-5)


SHRINKING_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "slice": lambda a: F.gelu(a * 2)[:, :32] * 3,
    "strided_slice": lambda a: a.exp()[:, 1:50:3] + 1,
    "select": lambda a: torch.tanh(a + 1).select(1, 7),
    "select_after_permute": lambda a: (a.sin() * a).view(4, 4, 64).permute(1, 0, 2)[2] - 1,
    "slice_then_reduce": lambda a: (a * a)[2:, 5:].sum(-1),
    "strided_slice_then_outer_sum": lambda a: (a.exp() - 1)[1::2, ::3].sum(0),
    "select_then_softmax": lambda a: torch.softmax(a.view(4, 4, 64).sin()[:, 2], -1),
    "select_of_broadcast": lambda a: (a + a[0]).select(0, 3) * 2,
}


@pytest.mark.parametrize("case", sorted(SHRINKING_VIEWS))
def test_shrinking_views_of_private_values(case: str) -> None:
    # A select or slice of a value nothing else reads joins its producer's
    # kernel, which then runs over the view's elements only.
    check(SHRINKING_VIEWS[case], torch.randn(16, 64), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cols", [40, 1000, 4000, 8200])
def test_multi_pass_rows_read_once_or_not(cols: int) -> None:
    # Rows up to 32 KiB live in shared memory after the first pass; longer
    # rows are read again. Either way the values match, including epilogue
    # views that read the result at another index than the one computed.
    # (test_kernel_codegen checks the 32 KiB bound on rows too many to split.)
    rows = 6
    x = torch.randn(rows, cols)
    check(lambda a: torch.softmax(a * 0.5, -1), x, rtol=1e-5)
    check(lambda a: torch.log_softmax(a, -1).view(rows, 2, -1).transpose(1, 2) * 3, x, rtol=1e-5)
    check(lambda a: a.var(-1) + a.exp().mean(-1), x, atol=1e-5, rtol=1e-5)
    check(lambda a: F.layer_norm(a.sin(), (cols,)) + 1, x, atol=1e-5, rtol=1e-5)
    sources = [str(r["source"]) for r in lazyfuse.debug.last_kernels()]
    assert any("lf_row[" in s for s in sources) == (cols * 4 <= 16 * 1024)


@pytest.mark.parametrize("shape,dim", [((3, 9000), -1), ((5, 2, 4500), (1, 2)), ((2000, 6), 0)])
def test_long_row_moments_in_one_read(shape: tuple[int, ...], dim: int | tuple[int, ...]) -> None:
    # Rows too long for the row cache get var's and layer norm's statistics
    # in one read (Welford). Rows with inf and NaN come out as eager's.
    x = torch.randn(shape)
    x.view(-1)[5] = float("nan")
    x.view(-1)[-3] = float("inf")
    check(lambda a: a.var(dim), x, atol=1e-5, rtol=1e-5, equal_nan=True)
    check(lambda a: a.var(dim, correction=0) * 2, x, atol=1e-5, rtol=1e-5, equal_nan=True)
    sources = [str(r["source"]) for r in lazyfuse.debug.last_kernels()]
    assert any("lf_welford_add(" in s for s in sources)
    if dim == -1:
        check(lambda a: F.layer_norm(a, shape[-1:]) * 3, x, atol=1e-5, rtol=1e-5, equal_nan=True)
        sources = [str(r["source"]) for r in lazyfuse.debug.last_kernels()]
        assert any("lf_block_welford(" in s for s in sources)


@pytest.mark.parametrize("block", [32, 512])
@pytest.mark.parametrize("cols", [1024, 9000])
@pytest.mark.parametrize("offset", [0.0, 10.0, 1000.0])
def test_row_moments_are_as_accurate_as_eager(offset: float, cols: int, block: int) -> None:
    # A row's mean far from its spread: one-pass moments of the raw values
    # were 10x less accurate than eager's at 1000 (the running mean rounds at
    # the row's magnitude), and a cached row's float mean 40x. With 512
    # threads, an H100's block, float sums of squares were 2 ulp off, 5x
    # eager's error, where emulation's 32 threads were not: moments accumulate
    # in double. 1024 columns are cached in shared memory; 9000 are not.
    torch.manual_seed(0)
    x = torch.randn(3, cols) * 0.1 + offset
    lazy_x = x.to(lazyfuse.lazy_device())
    with lazyfuse.config.kernel_settings_as(emulated_block=block, emulated_grid=132):
        var, norm = lazy_x.var(-1), F.layer_norm(lazy_x, (cols,))
        lazyfuse.mark_step()
    assert_row_moments_as_accurate_as_eager(x, var, norm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("offset", [0, 1])
def test_row_vector_loads(dtype: torch.dtype, offset: int) -> None:
    # Aligned rows are read 16 bytes at a time, and written so when an output
    # has the row's shape; a row starting one element in is read by scalars.
    base = torch.randn(6 * 1024 + offset).to(dtype)

    def rows(a: torch.Tensor) -> torch.Tensor:
        return a[offset:].view(6, 1024) if offset else a.view(6, 1024)

    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype != torch.float32 else {"atol": 1e-5, "rtol": 1e-5}
    check(lambda a: torch.softmax(rows(a) * 2, -1), base, **tol)
    check(lambda a: F.layer_norm(rows(a), (1024,)) + rows(a), base, **tol)
    sum_tol = {**tol, "atol": 1e-3 if dtype == torch.float32 else 0.5}
    check(lambda a: (rows(a) * rows(a)).sum(-1), base, **sum_tol)
    (record,) = lazyfuse.debug.last_kernels()
    assert ("lf_vload<lf_v16>" in str(record["source"])) == (offset == 0)


@pytest.mark.parametrize("cols", [3, 100, 10000])
def test_reduction_locals_do_not_shadow_host_scalars(cols: int) -> None:
    # Host scalars are kernel parameters s<k>; reduction locals once used the
    # same prefix, and log_softmax(x + scalar) read its own sum as the scalar.
    x = torch.randn(4, cols)
    scalars = [torch.tensor(1.0 + k / 10) for k in range(12)]

    def scaled(a: torch.Tensor, *s: torch.Tensor) -> torch.Tensor:
        for value in s:
            a = a * value
        return a

    # The scaled inputs reach about 600, whose float32 spacing is 6e-5: CUDA
    # eager's log_softmax computes x - (max + log(sum)) and rounds there, so
    # a row's largest entry, exactly -1.7e-5, comes out 0 (lazyfuse: -1.7e-5).
    check(lambda a, *s: torch.log_softmax(scaled(a, *s), -1), x, *scalars, atol=1e-4, rtol=1e-5)
    check(lambda a, *s: F.layer_norm(scaled(a, *s), (cols,)), x, *scalars, atol=1e-5, rtol=1e-5)
    check(lambda a, *s: torch.softmax(scaled(a, *s), 0), x, *scalars, rtol=1e-5)


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.bool]
)
def test_host_scalars_of_every_dtype(dtype: torch.dtype) -> None:
    # A 0-dim lazy value is passed to the kernel by value, read from its data.
    x = torch.randn(64).to(dtype) if dtype != torch.bool else torch.rand(64) > 0.5
    scalar = torch.tensor(3, dtype=dtype) if dtype != torch.bool else torch.tensor(True)
    check(lambda a, s: torch.where(a == s, s, a) if dtype == torch.bool else a * s + s, x, scalar)


@pytest.mark.parametrize("cols", [1000, 10000])
def test_softmax_rows_with_infinities_and_nan(cols: int) -> None:
    # Long rows take max and sum in one pass, rescaling the sum as the max
    # grows; -inf prefixes, all -inf rows and NaN must still come out as
    # eager's.
    x = torch.randn(4, cols) * 5
    x[0] = float("-inf")
    x[1, : cols // 2] = float("-inf")
    x[2, 7] = float("nan")
    x[3, -1] = float("inf")
    check(lambda a: torch.softmax(a, -1), x, equal_nan=True)
    check(lambda a: torch.log_softmax(a, -1), x, equal_nan=True)
    check(lambda a: torch.softmax(a.t(), 0), x, equal_nan=True)


@pytest.mark.parametrize("dims", [(-1,), (0,), (0, 2), (1,)])
def test_reductions(dims: tuple[int, ...]) -> None:
    x = torch.randn(17, 31, 65)
    check(lambda a: (a * a).sum(dims), x, atol=1e-4, rtol=1e-5)
    check(lambda a: a.mean(dims, keepdim=True) + 1, x, atol=1e-5, rtol=1e-5)
    check(lambda a: a.amax(dims), x)
    check(lambda a: a.var(dims), x, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", [(1 << 15,), (3, 9000), (2, 3, 4100), (3000, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_split_reductions(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    # Few long rows are split across blocks; the last block of each row
    # combines the partials. Sizes leave a short last chunk.
    x = torch.randn(shape, dtype=dtype)
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype in (torch.float16, torch.bfloat16) else {}
    check(lambda a: a.sum(-1), x, **(tol or {"atol": 1e-4, "rtol": 1e-5}))
    check(lambda a: (a * a).mean(), x, **(tol or {"atol": 1e-5, "rtol": 1e-5}))
    check(lambda a: a.amax(-1, keepdim=True) * 2, x)
    check(lambda a: a.amin(tuple(range(1, a.dim()))) if a.dim() > 1 else a.amin(), x)
    # Outer dims, one thread per output: each thread sums a chunk of rows.
    check(lambda a: a.sum(0), x, **(tol or {"atol": 1e-4, "rtol": 1e-5}))
    check(lambda a: a.amax(0), x)


@pytest.mark.parametrize("shape", [(64, 512), (1000, 40), (300, 7, 5)])
def test_split_outer_reductions(shape: tuple[int, ...]) -> None:
    # A bias gradient's shape: [batch, features] summed over the batch.
    x = torch.randn(shape)
    check(lambda a: a.sum(0), x, atol=1e-4, rtol=1e-5)
    check(lambda a: (a * a).mean((0, 1)) if a.dim() == 3 else (a * a).mean(0), x, rtol=1e-5)
    check(lambda a: a.amin(0, keepdim=True) * 2, x)
    (record,) = lazyfuse.debug.last_kernels()
    assert "lf_publish(lf_partials" in str(record["source"])


def test_split_reduction_keeps_prologue_outputs_and_nan() -> None:
    x = torch.randn(2, 10000)
    x[1, 7777] = float("nan")
    check(lambda a: torch.stack([a.exp().sum(-1), a.exp()[:, 9999]], -1), x, equal_nan=True)
    check(lambda a: a.amax(-1), x, equal_nan=True)
    check(lambda a: a.amin(-1), x, equal_nan=True)
    (record,) = lazyfuse.debug.last_kernels()
    assert "aten::amin" in record["ops"]
    assert "lf_publish(lf_partials" in str(record["source"])


def masked_logits(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    # A chunk-sized run of -inf (a masked span), and one row wholly masked,
    # whose softmax is NaN as eager's.
    x = torch.randn(shape, dtype=dtype)
    rows = x.view(-1, shape[-1])
    rows[0, 100:3100] = float("-inf")
    if rows.shape[0] > 1:
        rows[-1] = float("-inf")
    return x


TWO_LAUNCH_ROWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": lambda a: torch.softmax(a * 0.5, -1),
    # The epilogue view reads the result at other columns than the chunk's.
    "log_softmax_then_transpose": lambda a: (
        torch.log_softmax(a, -1).view(*a.shape[:-1], 2, -1).transpose(-1, -2) * 3
    ),
    "layer_norm_affine": lambda a: (
        F.layer_norm(
            a.sin(),
            a.shape[-1:],
            torch.linspace(0.5, 2, a.shape[-1]).to(a),
            torch.full(a.shape[-1:], 0.25).to(a),
        )
        + 1
    ),
    # A prologue value is a result too: written in the first launch.
    "var_and_prologue": lambda a: torch.cat(
        [(a.exp() * 0.1).var(-1).flatten(), a.exp()[..., -3:].flatten()]
    ),
}


@pytest.mark.parametrize("shape", [(1, 1 << 15), (3, 9000), (5, 2, 4100)])
@pytest.mark.parametrize("case", sorted(TWO_LAUNCH_ROWS))
def test_few_long_rows_split_in_two_launches(case: str, shape: tuple[int, ...]) -> None:
    # Softmax, layer norm and var rows too few to fill the GPU are split
    # across blocks: the first launch publishes each chunk's statistics, the
    # second merges the row's in every block and writes the chunk's outputs.
    fn = TWO_LAUNCH_ROWS[case]
    x = masked_logits(shape, torch.float32) if "softmax" in case else torch.randn(shape)
    check(fn, x, atol=1e-5, rtol=1e-5, equal_nan=True)
    assert any("lf_phase" in str(r["source"]) for r in lazyfuse.debug.last_kernels())


def test_two_launch_row_counts_both_launches() -> None:
    x = torch.randn(2, 10000).to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    before = launches()
    torch.softmax(x, -1).cpu()
    assert launches() - before == 2


OUTER_TWO_LAUNCH: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "var_dim0": lambda a: a.var(0),
    "var_batch_norm_dims": lambda a: a.view(4, 3, 25, -1).var((0, 2, 3), correction=0) + 1,
    "softmax_dim0": lambda a: torch.softmax(a * 2, 0),
    "log_softmax_dim0_with_prologue": lambda a: torch.log_softmax(a.exp() - 1, 0)[::2] * 3,
}


@pytest.mark.parametrize("case", sorted(OUTER_TWO_LAUNCH))
def test_few_outer_rows_split_in_two_launches(case: str) -> None:
    # Reduced dims that are not innermost get a thread per row; few such rows
    # (a batch norm's channels) are split across threads in two launches.
    x = torch.randn(3000, 4)
    x[7, 1] = float("nan")
    x[11, 2] = float("inf")
    check(OUTER_TWO_LAUNCH[case], x, atol=1e-5, rtol=1e-5, equal_nan=True)
    assert any("lf_phase" in str(r["source"]) for r in lazyfuse.debug.last_kernels())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_two_launch_rows_in_other_dtypes(dtype: torch.dtype) -> None:
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype != torch.float64 else {}
    x = masked_logits((2, 10000), dtype)
    check(lambda a: torch.softmax(a, -1), x, equal_nan=True, **tol)
    check(lambda a: F.layer_norm(a.cos(), (10000,)), x, equal_nan=True, **tol)
    assert any("lf_phase" in str(r["source"]) for r in lazyfuse.debug.last_kernels())


@pytest.mark.skipif(not ON_CUDA, reason="2^31 elements: GPU-sized memory, too slow to emulate")
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


VIEW_CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "permute": lambda a: a.permute(2, 0, 1),
    "strided_slice": lambda a: a[:, 1:4:2],
    "select": lambda a: a.select(1, 2),
    "expand": lambda a: a[0].expand(3, 5, 4),
    "transpose_then_flatten": lambda a: a.transpose(0, 1).reshape(30, 4),
    "unsqueeze": lambda a: a.unsqueeze(1),
}


@pytest.mark.parametrize("case", sorted(VIEW_CASES))
def test_views_alias_instead_of_launching(case: str) -> None:
    # A graph of views alone launches no kernel, and its results (copied out
    # of the alias when strided) hold eager's values; so do kernels and
    # matmuls that read the aliases' strides.
    view = VIEW_CASES[case]
    a = torch.randn(6, 5, 4)
    lazy_a = a.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    before = launches()
    got = view(lazy_a)
    lazyfuse.mark_step()
    assert launches() == before
    assert "[view]" in lazyfuse.debug.fusion_plan()
    torch.testing.assert_close(got.cpu(), view(a))
    check(lambda t: view(t).exp() * 2, a)
    check(lambda t: view(t).sum(-1), a, atol=1e-5, rtol=1e-5)
    cols = view(a).shape[-1]
    check(lambda t: view(t).flatten(0, -2) @ torch.ones(cols, 3, device=t.device), a)


def test_linear_gelu_runs_one_kernel() -> None:
    x, w, b, r = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32), torch.randn(8, 32)
    fn = lambda *t: F.gelu(F.linear(t[0], t[1], t[2])) * 0.5 + t[3]  # noqa: E731
    lazy = [t.to(lazyfuse.lazy_device()) for t in (x, w, b, r)]
    lazyfuse.mark_step()
    before = launches()
    got = fn(*lazy)
    lazyfuse.mark_step()
    assert launches() - before == 1
    torch.testing.assert_close(got.cpu(), fn(x, w, b, r), atol=1e-5, rtol=1.3e-6)


def test_fused_kernels_are_inspectable() -> None:
    x = torch.randn(128, device=lazyfuse.lazy_device())
    y = gelu_chain(x)
    lazyfuse.mark_step()
    (record,) = lazyfuse.debug.last_kernels()
    assert "aten::gelu" in record["ops"] and "__global__ void" in str(record["source"])
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


@pytest.mark.skipif(ON_CUDA, reason="the emulator's own launch shapes; a GPU uses its own")
@pytest.mark.parametrize("block,grid", [(32, 1), (32, 3), (128, 1), (128, 4)])
def test_emulated_launch_shapes(block: int, grid: int) -> None:
    with lazyfuse.config.kernel_settings_as(emulated_block=block, emulated_grid=grid):
        x = torch.randn(37, 129)
        check(gelu_chain, x)
        check(lambda a: torch.softmax(a, -1), x, atol=1e-6, rtol=1e-5)
        check(lambda a: a.sum(0), x, atol=1e-5, rtol=1e-5)
        check(lambda a: (a * 2).sum(), x, atol=1e-4, rtol=1e-5)


def test_integer_and_bool_dtypes() -> None:
    x = torch.randint(-50, 50, (1003,))
    check(lambda a: torch.div(a * 3 - 7, 2, rounding_mode="floor"), x)
    check(lambda a: (a > 3) & (a < 40), x)
    check(lambda a: a.to(torch.int32).abs() + 1, x)
    check(lambda a: torch.where(a > 0, a, -a).sum(), x)


def test_multi_output_group() -> None:
    x = torch.randn(64, 33)
    check(lambda a: torch.stack([a.exp(), a.sin() + a.exp()]), x)


def test_sizes_not_a_multiple_of_the_vector_width() -> None:
    for n in (5, 17, 33, 127):
        check(lambda a: a * 0.5 + 1, torch.randn(n))
        check(lambda a: a.half().float() * 2, torch.randn(n))


# Each case is a wrong result a fused kernel once gave, found by reading the
# generated code or by the fuzzer (test/python/fuzz_fusion.py).
SEMANTICS: dict[str, tuple[Callable[..., torch.Tensor], torch.Tensor]] = {
    # 0-dim operands join type promotion when their category is higher.
    "int_ge_fractional_scalar": (lambda x: x >= 0.5, torch.arange(-3, 6)),
    "bool_lt_int_scalar": (lambda x: (x > 2) < -3, torch.arange(-3, 6)),
    # ATen's sign of NaN is 0.
    "sign_nan": (lambda x: torch.sign(x) * 2, torch.tensor([float("nan"), -2.0, 0.0, 3.0] * 3)),
    # Floor division goes through fmod: 1.0 // 0.1 is 9.
    "floor_div_fmod": (
        lambda x: torch.div(x, 0.1, rounding_mode="floor"),
        torch.tensor([1.0, -1.0, 0.3, 7.0, -0.0, 2.5] * 3),
    ),
    # A float64 sum of float32 accumulates in float64.
    "sum_float64_of_float32": (
        lambda x: x.sum(dtype=torch.float64),
        torch.randn(4099) * 1000 + 0.1,
    ),
    # Integral exponents are products, as ATen computes them.
    "pow_integral_exponent": (lambda x: torch.pow(x, 2) - x * x, torch.randn(77) * 100),
    "pow_cube_and_reciprocal": (
        lambda x: torch.pow(x, 3) + torch.pow(x, -1) - torch.pow(x, -2),
        torch.randn(77) * 10,
    ),
}


@pytest.mark.parametrize("case", sorted(SEMANTICS))
def test_aten_semantics(case: str) -> None:
    fn, x = SEMANTICS[case]
    check(fn, x, atol=0, rtol=0)


def test_kernel_modules_are_shared_and_unloaded_with_their_graphs() -> None:
    lazy = lazyfuse.lazy_device()
    x, y = torch.randn(300).to(lazy), torch.randn(300).to(lazy)
    lazyfuse.mark_step()
    (torch.sin(x) * 2.5).cpu()
    # debug.last_kernels() keeps the last graph's kernels alive: compiled
    # again, the graph finds its module loaded.
    lazyfuse.debug.clear_graph_cache()
    loaded = lazyfuse.debug.loaded_kernel_modules()
    compiles = lazyfuse.metrics.counter_value("UncachedCompile")
    (torch.sin(x) * 2.5).cpu()
    assert lazyfuse.metrics.counter_value("UncachedCompile") == compiles + 1
    assert lazyfuse.debug.loaded_kernel_modules() == loaded
    # Once no graph holds a module, it is unloaded: one graph of one kernel
    # is left.
    for graph in (lambda: x + y, lambda: x - y):
        lazyfuse.debug.clear_graph_cache()
        graph().cpu()
    assert len(lazyfuse.debug.last_kernels()) == 1
    assert lazyfuse.debug.loaded_kernel_modules() == 1


@pytest.mark.parametrize("asynchronous", [True, False], ids=["cpu_stream", "synchronous"])
def test_a_result_never_read_does_not_keep_its_graphs_kernels_loaded(asynchronous: bool) -> None:
    lazy = lazyfuse.lazy_device()
    x = torch.randn(300).to(lazy)
    lazyfuse.mark_step()
    with lazyfuse.config.async_execution_as(asynchronous):
        kept = torch.cos(x) * 3.5  # a graph of its own, its result left unread
        lazyfuse.mark_step()
        lazyfuse.debug.clear_graph_cache()
        (x + 1).cpu()  # the last graph's kernels stay, as debug.last_kernels() shows them
        assert lazyfuse.debug.loaded_kernel_modules() == 1
    torch.testing.assert_close(kept.cpu(), torch.cos(x.cpu()) * 3.5)
