"""Fused kernels as native CPU code (the CPU dialect and target): on by
default on the CPU backing device, parallel over torch's intra-op threads,
vectorized, one compile per graph, and eager CPU's values. Sizes here are
large enough to take the parallel path and split long rows over threads."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import lazyfuse
from compile_watch import most_compiles_at_once
from conftest import (
    HOST_COMPILER,
    NO_CPU_KERNELS,
    ON_CUDA,
    assert_row_moments_as_accurate_as_eager,
)

pytestmark = [
    pytest.mark.skipif(ON_CUDA or not HOST_COMPILER, reason=NO_CPU_KERNELS),
    pytest.mark.usefixtures("cpu_kernels"),
]

Graph = Callable[[torch.Tensor, torch.Tensor], list[torch.Tensor]]


def launches() -> int:
    return lazyfuse.metrics.counter_value("LazyFuseKernelLaunches")


def run_lazy(fn: Graph, x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    d = lazyfuse.lazy_device()
    outs = fn(x.to(d), w.to(d))
    lazyfuse.mark_step()
    return [out.cpu() for out in outs]


GRAPHS: dict[str, Graph] = {
    "pointwise_chain": lambda x, w: [((x * w + 1).sin() * 0.5).relu()],
    "broadcast_and_scalar": lambda x, w: [x * w[0] - x.mean(0, keepdim=True) * 2],
    "transcendentals": lambda x, w: [x.exp() - x.tanh() + x.sigmoid() * w.abs().log1p()],
    "sum_all": lambda x, w: [(x * w).sum()],
    "sum_rows_and_columns": lambda x, w: [x.sum(1), x.sum(0), (x * w).mean(0)],
    "amax_amin": lambda x, w: [x.amax(1), x.amin(0), x.amax()],
    "softmax_family": lambda x, w: [x.softmax(1), x.log_softmax(1), x.softmax(0)],
    "layer_norm_and_var": lambda x, w: [
        torch.nn.functional.layer_norm(x, x.shape[1:], w[0], w[1]),
        x.var(1),
        x.var(0, correction=0),
    ],
    "epilogue": lambda x, w: [x - x.amax(1, keepdim=True), (x * x).sum(1).sqrt() + 1],
}


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("shape", [(512, 1024), (4, 65536), (3, 5)], ids=str)
def test_matches_eager(name: str, shape: tuple[int, int]) -> None:
    torch.manual_seed(0)
    x, w = torch.randn(shape), torch.randn(shape)
    before = launches()
    got = run_lazy(GRAPHS[name], x, w)
    assert launches() > before, "no CPU kernel ran"
    for lazy, eager in zip(got, GRAPHS[name](x, w), strict=True):
        torch.testing.assert_close(lazy, eager, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", GRAPHS)
def test_values_do_not_depend_on_the_thread_count(name: str) -> None:
    # A read runs its graph on the caller's threads, a step on the CPU
    # stream's (one fewer): a fused kernel's sums must not split by either.
    torch.manual_seed(0)
    x, w = torch.randn(4, 65536), torch.randn(4, 65536)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = run_lazy(GRAPHS[name], x, w)
        torch.set_num_threads(max(threads, 2))
        shared = run_lazy(GRAPHS[name], x, w)
    finally:
        torch.set_num_threads(threads)
    for one, many in zip(alone, shared, strict=True):
        assert torch.equal(one, many)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_dtypes_match_eager(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (torch.randn(256, 300) * 10).to(dtype)
    w = (torch.randn(256, 300) * 10).to(dtype)

    def fn(x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
        if dtype.is_floating_point:
            return [(x * w + 1).abs().sqrt(), x.sum(1), x.amax(0)]
        return [x * w + 3, x // 3, x.sum(1), x.amax(0)]

    for lazy, eager in zip(run_lazy(fn, x, w), fn(x, w), strict=True):
        torch.testing.assert_close(lazy, eager)


def test_nan_wins_every_lane_of_a_max_and_min() -> None:
    x = torch.randn(8, 4096)
    x[3, 1000] = float("nan")
    x[5, 4095] = float("nan")
    got = run_lazy(lambda x, w: [x.amax(1), x.amin(1), x.softmax(1)], x, x)
    for lazy, eager in zip(got, [x.amax(1), x.amin(1), x.softmax(1)], strict=True):
        torch.testing.assert_close(lazy, eager, equal_nan=True)


def test_an_optimizer_step_updates_in_place_and_matches_eager() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))
    lazy_model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8)
    )
    lazy_model.load_state_dict(model.state_dict())
    lazy_model.to(lazyfuse.lazy_device())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    lazy_opt = torch.optim.AdamW(lazy_model.parameters(), lr=1e-2)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    for _ in range(3):
        for m, o, (xb, yb) in (
            (model, opt, (x, y)),
            (lazy_model, lazy_opt, (x.to(lazyfuse.lazy_device()), y.to(lazyfuse.lazy_device()))),
        ):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(xb), yb).backward()
            o.step()
        lazyfuse.mark_step()
    assert lazyfuse.metrics.counter_value("LazyFuseInPlaceOutputs") > 0
    for p, q in zip(model.parameters(), lazy_model.parameters(), strict=True):
        # Adam divides by the root of small second moments, which magnifies
        # the last-bit differences of summation order and libm.
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-4)


def test_a_graph_compiles_its_kernels_in_one_call() -> None:
    torch.manual_seed(0)
    # Shapes no other test uses: every kernel here is new.
    x = torch.randn(37, 211)
    got = run_lazy(lambda x, w: [x.softmax(1), x.sum(0), (x * 3).sin()], x, x)
    assert lazyfuse.metrics.counter_value("LazyFuseKernelsCompiled") <= 1
    assert launches() >= 3
    for lazy, eager in zip(got, [x.softmax(1), x.sum(0), (x * 3).sin()], strict=True):
        torch.testing.assert_close(lazy, eager)


# Eight kernels of distinct sources: each input has its own shape.
EIGHT_KERNELS = """
import torch, lazyfuse
xs = [torch.randn(8 + i, 5) for i in range(8)]
outs = [(x.to(lazyfuse.lazy_device()) * 3).sin() for x in xs]
lazyfuse.mark_step()
for got, x in zip(outs, xs):
    torch.testing.assert_close(got.cpu(), (x * 3).sin())
print(lazyfuse.metrics.counter_value("LazyFuseKernelsCompiled"))
"""


def test_a_graphs_kernels_compile_as_one_library_per_core(tmp_path: Path) -> None:
    # One library of a whole graph is one compiler call: one core of two,
    # while the first step waits for it.
    assert most_compiles_at_once(tmp_path, EIGHT_KERNELS, threads=2, emulate=False) == (2, 2)
    assert most_compiles_at_once(tmp_path, EIGHT_KERNELS, threads=1, emulate=False) == (1, 1)


@pytest.mark.parametrize("shape", [(37, 211), (300, 17), (5, 3)], ids=str)
def test_a_transposed_read_walks_rows_without_dividing_its_index(
    shape: tuple[int, int],
) -> None:
    # Walked element by element, a transposed read divides each index into
    # its two dims; walked row by row, the dims are the loops' own. Rows
    # here cross the 16-element chunks that blocks take.
    x = torch.randn(*shape)
    with lazyfuse.config.dynamic_kernels_as("0"):  # each shape its own kernel
        lazy = (x.to(lazyfuse.lazy_device()).t() * 3).sin()
        lazyfuse.mark_step()
    torch.testing.assert_close(lazy.cpu(), (x.t() * 3).sin())
    (kernel,) = [k for k in lazyfuse.debug.last_kernels() if "tcopy" in str(k["name"])]
    body = str(kernel["source"]).split(f"void {kernel['name']}(")[1]
    inner = body.split("; ++ii) {")[1]
    assert " % " not in inner and " / " not in inner, inner


def _tiles_nan_and_zeros(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    flat = x.view(-1)
    flat[::997] = float("nan")
    flat[5::7] = 0.0
    flat[6::7] = -0.0
    return x


OUTER_REDUCTIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, ...]]] = {
    # Rows cross tiles and blocks; columns outnumber a sum's chunk.
    "sum_columns": (lambda x: (x * 2).sum(0), (300, 513)),
    # A bias gradient: the kept dim is the innermost, the rest reduced.
    "bias_gradient": (lambda x: x.sum((0, 1)), (4, 32, 768)),
    # Kept dims on both sides: tiles stop at the end of each run of 300.
    "mean_middle": (lambda x: x.mean(1), (3, 70, 300)),
    "amax_nan_and_zero_ties": (lambda x: _tiles_nan_and_zeros(x).amax(0), (50, 7, 33)),
    "amin_keepdim": (lambda x: _tiles_nan_and_zeros(x).amin(1, keepdim=True), (4, 9, 40)),
    "sum_into_float64": (lambda x: x.sum(0, dtype=torch.float64), (257, 64)),
    "half": (lambda x: x.half().sum(0), (64, 100)),
    "epilogue": (lambda x: x.sum(0).sqrt() + x.mean(0), (130, 270)),
}


@pytest.mark.parametrize("case", list(OUTER_REDUCTIONS))
def test_an_outer_reduction_reads_a_tile_of_rows_per_column(case: str) -> None:
    # Row by row, each of a row's columns is a stride apart: the loop gathers
    # (a bias gradient's sums ran at 4-5 GB/s, a [4096, 1024] sum(0) 40x
    # slower than now). A tile of rows reads each column contiguously, in
    # the innermost loop, with no division there.
    fn, shape = OUTER_REDUCTIONS[case]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    lazy = fn(x.to(lazyfuse.lazy_device()))
    lazyfuse.mark_step()
    got, eager, exact = lazy.cpu(), fn(x), fn(x.double())
    assert got.dtype == eager.dtype and torch.equal(got.isnan(), eager.isnan())
    # Columns add in another order than eager's cascade: as accurate, within 2x.
    eager_error = (eager.double() - exact).nan_to_num().abs().max().item()
    error = (got.double() - exact).nan_to_num().abs().max().item()
    half_ulp = exact.abs().max().item() * 2**-10 if got.dtype == torch.half else 0.0
    assert error <= 2 * eager_error + half_ulp + 1e-9, (error, eager_error)
    if "zero_ties" in case:  # eager's first zero of a tie, exactly
        assert torch.equal(got.nan_to_num(), eager.nan_to_num())
        assert torch.equal(got.signbit() | got.isnan(), eager.signbit() | eager.isnan())
    reductions = [k for k in lazyfuse.debug.last_kernels() if "reduction" in str(k["name"])]
    assert reductions
    for kernel in reductions:
        body = str(kernel["source"]).split(f"void {kernel['name']}(")[1]
        columns = body.split("for (long long c = ")[1]
        tile_rows = columns.split("lf_r < lf_n; ++lf_r) {")[1].split("}")[0]
        assert "lf_ld(in" in tile_rows and " % " not in tile_rows and " / " not in tile_rows, body


def test_the_source_is_the_cpu_dialect() -> None:
    run_lazy(lambda x, w: [(x * w).sum(1)], torch.randn(64, 64), torch.randn(64, 64))
    (kernel,) = lazyfuse.debug.last_kernels()
    assert kernel["source"].startswith("// lazyfuse cpu kernel")
    assert "#pragma omp simd reduction(+:" in kernel["source"]


def _run_with_only(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh process whose LAZYFUSE_ variables are `env`'s only."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAZYFUSE_")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.parametrize(
    ("env", "fused"),
    [({}, True), ({"LAZYFUSE_CPU_KERNELS": "0"}, False), ({"LAZYFUSE_FUSION": "0"}, False)],
    ids=["default", "cpu_kernels_off", "fusion_off"],
)
def test_on_by_default_and_off_by_either_switch(env: dict[str, str], fused: bool) -> None:
    code = (
        "import torch, lazyfuse\n"
        "x = torch.ones(8, 8).to(lazyfuse.lazy_device())\n"
        "y = (x * 2 + 1).sum(1)\n"
        "lazyfuse.mark_step()\n"
        "assert y.cpu().eq(24).all()\n"
        "print(lazyfuse.metrics.counter_value('LazyFuseKernelLaunches'))\n"
    )
    out = _run_with_only(env, code)
    assert (int(out.stdout.split()[-1]) > 0) == fused, out.stderr


KERNEL_RUN = (
    "import torch, lazyfuse\n"
    "x = torch.ones(8, 8).to(lazyfuse.lazy_device())\n"
    "y = (x * 2 + 1).sin().sum(1)\n"
    "lazyfuse.mark_step()\n"
    "torch.testing.assert_close(y.cpu(), (torch.ones(8, 8) * 2 + 1).sin().sum(1))\n"
    "print(lazyfuse.metrics.counter_value('LazyFuseKernelLaunches'),"
    " lazyfuse.metrics.counter_value('LazyFuseKernelFallbacks'))\n"
)


@pytest.mark.parametrize(
    ("env", "warning"),
    [
        ({"LAZYFUSE_CACHE_DIR": "/proc/lazyfuse-cache"}, "/proc/lazyfuse-cache cannot be written"),
        (
            {"LAZYFUSE_EMULATE_CXX": "/nonexistent/c++"},
            "LAZYFUSE_EMULATE_CXX=/nonexistent/c++ is not",
        ),
    ],
    ids=["unwritable_cache_dir", "missing_compiler"],
)
def test_a_bad_cache_dir_or_compiler_warns_and_kernels_still_run(
    env: dict[str, str], warning: str
) -> None:
    # An unwritable cache directory (a read-only home) made every kernel fall
    # back to its ATen steps; a compiler named that does not exist was
    # passed over without a word.
    out = _run_with_only(env, KERNEL_RUN)
    launches, fallbacks = (int(n) for n in out.stdout.split()[-2:])
    assert launches > 0 and fallbacks == 0, out.stderr
    assert warning in out.stderr


def test_cache_files_cut_short_are_rebuilt(tmp_path: Path) -> None:
    # A kernel library cut short (a full disk, a copy of the cache) faulted
    # inside dlopen, killing every later run with SIGBUS; a damaged
    # precompiled prelude made every later kernel fall back to ATen steps.
    def run() -> str:
        return _run_with_only({"LAZYFUSE_CACHE_DIR": str(tmp_path)}, KERNEL_RUN).stdout

    run()
    damaged = [*tmp_path.rglob("*.so"), *tmp_path.rglob("*.gch")]
    assert {path.suffix for path in damaged} == {".so", ".gch"}
    for path in damaged:
        path.write_bytes(path.read_bytes()[:1000])
    launches, fallbacks = (int(n) for n in run().split()[-2:])
    assert launches > 0 and fallbacks == 0
    for kernel in tmp_path.rglob("*.bin"):
        kernel.unlink()  # the prelude is needed again, and compiled again
    launches, fallbacks = (int(n) for n in run().split()[-2:])
    assert launches > 0 and fallbacks == 0


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
def test_float_to_integer_out_of_range_is_eagers(dtype: torch.dtype) -> None:
    """C++ leaves these conversions undefined; -O3 loops once answered 0 where
    eager (x86's truncation) gives the integer minimum."""
    corners = torch.tensor(
        [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e19, 300.7, -2.5]
    )
    x = corners.repeat(512)
    got = run_lazy(lambda x, w: [x.floor().to(dtype), (x * 1.0).to(dtype) + 1], x, x)
    for lazy, eager in zip(got, [x.floor().to(dtype), (x * 1.0).to(dtype) + 1], strict=True):
        assert torch.equal(lazy, eager)


@pytest.mark.parametrize("cols", [1024, 9000])
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_row_moments_far_from_zero_are_as_accurate_as_eager(offset: float, cols: int) -> None:
    # Rows summed in float lanes lost a mean of 1000 (var 40-100x eager's
    # error, which accumulates in double); moments now accumulate in double.
    torch.manual_seed(0)
    x = torch.randn(4, cols) * 0.1 + offset
    lazy_x = x.to(lazyfuse.lazy_device())
    var, norm = lazy_x.var(-1), torch.nn.functional.layer_norm(lazy_x, (cols,))
    before = launches()
    lazyfuse.mark_step()
    assert launches() > before
    assert_row_moments_as_accurate_as_eager(x, var, norm)
