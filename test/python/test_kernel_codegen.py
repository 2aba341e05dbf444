"""The CUDA kernel codegen, NVRTC compilation and the kernel cache, on any
machine: kernels are rendered and compiled for sm_80 and sm_90, never run.

Golden sources live in test/python/golden/; LAZYFUSE_UPDATE_GOLDEN=1
rewrites them after an intended codegen change."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from fusion_graphs import GRAPHS

GOLDEN = Path(__file__).parent / "golden"
NVRTC = lazyfuse.debug.nvrtc_info()
needs_nvrtc = pytest.mark.skipif(
    not NVRTC["found"],
    reason=f"libnvrtc not found, so nothing can be compiled: {NVRTC.get('error')}",
)


def kernel_body(source: str) -> str:
    return source[source.index('extern "C"') :]


def pending(lazy: torch.device, build: Callable[..., torch.Tensor], *shapes, dtype=torch.float32):
    inputs = [torch.randn(*s, dtype=dtype).to(lazy) for s in shapes]
    lazyfuse.mark_step()
    return build(*inputs)


GOLDEN_CASES: dict[str, Callable[[torch.device], torch.Tensor]] = {
    # contiguous float32: 128-bit vector loads and stores, scalar tail
    "gelu_chain": lambda d: pending(d, lambda x: torch.tanh(F.gelu(x * 2.0)) * x, (1001,)),
    # inner reduction over 256 columns: one block per row, warp shuffles
    "softmax_rows": lambda d: pending(d, lambda x: torch.softmax(x, -1), (8, 256)),
    # outer reduction: a thread per output column and chunk of rows; the last combines
    "sum_dim0": lambda d: pending(d, lambda x: x.sum(0), (64, 16)),
    # half in, broadcast bias, transposed (strided) read, half out
    "half_bias_transpose": lambda d: pending(
        d, lambda x, b: (x.t() + b).relu(), (16, 8), (16,), dtype=torch.float16
    ),
    # a full reduction: rows split into chunks, the last block combines
    "full_sum_split": lambda d: pending(d, lambda x: (x * x).sum(), (1 << 16,)),
    "layer_norm_affine": lambda d: pending(
        d, lambda x, w, b: F.layer_norm(x, (64,), w, b), (4, 64), (64,), (64,)
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_codegen_golden(name: str, lazy: torch.device) -> None:
    records = lazyfuse.debug.compile_cuda(GOLDEN_CASES[name](lazy), arch="sm_90")
    body = "\n".join(kernel_body(str(r["source"])) for r in records)
    path = GOLDEN / f"{name}.cu"
    if os.environ.get("LAZYFUSE_UPDATE_GOLDEN") == "1":
        path.write_text(body)
    assert path.exists(), f"no golden file {path}; run with LAZYFUSE_UPDATE_GOLDEN=1"
    assert body == path.read_text()


def test_index_type_widens_past_2_31(lazy: torch.device) -> None:
    # meta-free: a 2^31-element expand is only recorded, never allocated
    x = torch.randn(1, 1, device=lazy)
    y = x.expand(1 << 16, 1 << 15) * 2
    (record,) = lazyfuse.debug.compile_cuda(y, arch="sm_90")
    assert "const long long n = 2147483648;" in str(record["source"])
    small = lazyfuse.debug.compile_cuda(x * 2, arch="sm_90")
    assert "const int n = 1;" in str(small[0]["source"])


def test_vector_width_follows_widest_dtype(lazy: torch.device) -> None:
    x = torch.randn(64, dtype=torch.float64).to(lazy)
    lazyfuse.mark_step()
    (record,) = lazyfuse.debug.compile_cuda(x * 2, arch="sm_90")
    assert "double e[2]" in str(record["source"])


def test_record_fields(lazy: torch.device) -> None:
    records = lazyfuse.debug.compile_cuda(GRAPHS["gelu_chain"](lazy), arch="sm_80")
    assert len(records) == 1
    assert set(records[0]) >= {"name", "ops", "source", "compiled", "log"}
    assert records[0]["ops"][2] == "aten::gelu"


@pytest.mark.parametrize("shape", [(1 << 24,), (8, 1 << 21), (1 << 12, 1 << 12), (1 << 20, 16)])
@pytest.mark.parametrize("arch,sms", [("sm_80", 108), ("sm_90", 132)])
def test_reductions_fill_the_gpu(shape: tuple[int, ...], arch: str, sms: int, lazy) -> None:
    # A reduction of 2^24 elements launches at least two blocks per SM,
    # however its rows fall: full, few rows, over the innermost or the
    # outermost dim. Rows whose elements need the row's statistics (softmax,
    # layer norm) take two launches of that size.
    x = torch.empty(shape, device=lazy)
    reductions = (
        lambda t: t.sum(-1),
        lambda t: t.amax(-1),
        lambda t: (t * 2).mean(-1),
        lambda t: t.sum(0),
        lambda t: t.amin(0),
        lambda t: torch.softmax(t, -1),
        lambda t: torch.log_softmax(t * 2, -1),
        lambda t: F.layer_norm(t, t.shape[-1:]),
        lambda t: t.var(-1),
        lambda t: t.var(0),
    )
    for reduce in reductions:
        (record,) = lazyfuse.debug.compile_cuda(reduce(x), arch=arch, sms=sms)
        assert record["grid"] >= 2 * sms, (shape, record["name"], record["grid"])
        # Only rows split across blocks need a second launch.
        two = record["launches"] == 2
        assert two == ("lf_phase" in str(record["source"])), record["name"]


@pytest.mark.parametrize(
    "rows,cols,cached,launches",
    [(1024, 8192, True, 1), (1024, 8193, False, 1), (8, 8192, False, 2)],
)
def test_rows_up_to_32_kib_are_read_once(
    rows: int, cols: int, cached: bool, launches: int, lazy
) -> None:
    # Many rows of up to 32 KiB stay in shared memory after the first pass.
    # Few rows are split across blocks in two launches instead, which read
    # the row twice but fill the GPU.
    x = torch.empty(rows, cols, device=lazy)
    for reduce in (
        lambda t: torch.softmax(t, -1),
        lambda t: t.var(-1),
        lambda t: F.layer_norm(t, (cols,)),
    ):
        (record,) = lazyfuse.debug.compile_cuda(reduce(x), arch="sm_90")
        assert ("lf_row[" in str(record["source"])) == cached, record["name"]
        assert record["launches"] == launches, record["name"]


@pytest.mark.parametrize("block_limit,block", [(0, 512), (64, 64), (32, 32)])
def test_row_loops_step_by_the_launch_block(block_limit: int, block: int, lazy) -> None:
    # Block-per-row loops hold the block size as a constant (unrolled, a
    # thread has several loads in flight), so the launch must use exactly it,
    # and a target that allows fewer threads gets a kernel rendered for them.
    x = torch.empty(6, 1 << 14, device=lazy)
    loops = (
        "LF_UNROLL for (int c = lf_begin + threadIdx.x; c < lf_end; c += lf_threads)",
        "LF_UNROLL for (int lf_cv = threadIdx.x; lf_cv < 4096; lf_cv += lf_threads)",
    )
    for reduce in (lambda t: torch.softmax(t, -1), lambda t: t.var(-1), lambda t: t.sum()):
        (record,) = lazyfuse.debug.compile_cuda(reduce(x), arch="sm_90", block_limit=block_limit)
        source = str(record["source"])
        assert record["block"] == block, (record["name"], record["block"])
        assert f"constexpr int lf_threads = {block};" in source, source
        assert any(loop in source for loop in loops), source
        assert "blockDim" not in source.split("extern")[-1], "a loop strides by blockDim"


@pytest.mark.parametrize(
    "rows,cols,block,sum_block",
    [
        (16384, 1024, 64, 64),
        (4096, 1024, 64, 64),
        (2048, 1024, 128, 128),
        (1024, 1024, 256, 256),
        (16384, 768, 32, 64),
    ],
)
def test_many_short_rows_give_each_thread_several_loads(
    rows: int, cols: int, block: int, sum_block: int, lazy
) -> None:
    # With one 16-byte load a thread, a row of 1024 spent more on its two
    # block reductions than on its loads (an H100: softmax SM 75% busy, DRAM
    # 56%; with 64 threads, 48% and 72%). Rows enough to fill a GPU get
    # fewer threads, each looping over 16 floats; few rows keep one load a
    # thread. A sum's block keeps 64 threads (an SM holds 32 blocks); rows
    # reduced more than once go down to one warp, whose reductions need no
    # barrier (an H200: softmax over rows of 96, 0.67x the time of 64 threads).
    x = torch.empty(rows, cols, device=lazy)
    for reduce, expected in (
        (lambda t: torch.softmax(t, -1), block),
        (lambda t: F.layer_norm(t, (cols,)), block),
        (lambda t: t.sum(-1), sum_block),
    ):
        (record,) = lazyfuse.debug.compile_cuda(reduce(x), arch="sm_90")
        source = str(record["source"])
        assert record["block"] == expected, (record["name"], record["block"])
        assert f"constexpr int lf_threads = {expected};" in source, record["name"]
        assert f"lf_cv < {cols // 4}; lf_cv += lf_threads)" in source, record["name"]


@pytest.mark.parametrize("dtype,width", [(torch.float32, 4), (torch.float16, 8)])
def test_row_loops_load_16_bytes_when_rows_are_aligned(
    dtype: torch.dtype, width: int, lazy
) -> None:
    # A row whose start is 16-byte aligned is read a vector at a time; a
    # column count that leaves rows unaligned keeps scalar loads.
    for cols, vector in ((1024, True), (1004 if width == 8 else 1002, False)):
        x = torch.empty(8, cols, device=lazy, dtype=dtype)
        for reduce in (lambda t: torch.softmax(t * 2, -1), lambda t: F.layer_norm(t, t.shape[-1:])):
            (record,) = lazyfuse.debug.compile_cuda(reduce(x), arch="sm_90")
            source = str(record["source"])
            assert ("lf_vload<lf_v16>(in0 + lf_vbase)" in source) == vector, source
            assert (f"constexpr int lf_width = {width};" in source) == vector
            assert record["compiled"], record["log"]


def test_bad_arch_is_a_clear_error(lazy: torch.device) -> None:
    x = torch.randn(4, device=lazy)
    with pytest.raises(RuntimeError, match="unknown CUDA architecture 'volta'"):
        lazyfuse.debug.compile_cuda(x + 1, arch="volta")
    assert (x + 1).cpu().shape == (4,)


@needs_nvrtc
@pytest.mark.parametrize("generic", [False, True], ids=["specialized", "generic"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_kernel_compiles(name: str, arch: str, generic: bool, lazy: torch.device) -> None:
    # Shape-generic templates too: emulation runs them, NVRTC must take them.
    records = lazyfuse.debug.compile_cuda(GRAPHS[name](lazy), arch=arch, generic=generic)
    assert records
    for record in records:
        assert record["compiled"], record["log"]
        assert record["target"] == arch
    assert any("lf_g0" in str(record["source"]) for record in records) == generic


# A strategy constant as a template argument: a loop stride, a vector's lane
# count or its multiplier, a vector loop's bound.
STRATEGY_ARGUMENT = re.compile(r"\+= lf_g\d+\)|(lf_cv|b) \* lf_g\d+|n / lf_g\d+|< lf_g\d+; \+\+j")


@needs_nvrtc
@pytest.mark.parametrize("name", sorted(set(GRAPHS) | set(GOLDEN_CASES)))
def test_templates_keep_strategy_constants(name: str, lazy: torch.device) -> None:
    # A row block's threads and a vector's lanes are what the loops unroll
    # and vectorize on. As template arguments (round 4, an H200) they made
    # softmax's template read shared memory a float at a time, not 16 bytes:
    # 41.8 us against its specialized kernel's 37.1 at 2^24 (ncu). As
    # constexprs, 37.4 against 36.9. A new thread or lane count is a new kernel.
    build = GRAPHS.get(name) or GOLDEN_CASES[name]
    for record in lazyfuse.debug.compile_cuda(build(lazy), arch="sm_90", generic=True):
        source = kernel_body(str(record["source"]))
        assert not STRATEGY_ARGUMENT.search(source), (record["name"], source)
        if "lf_vbase" in source or "base = b *" in source:
            assert "constexpr int lf_width = " in source, source
        if "lf_threads" in source:
            assert "constexpr int lf_threads = " in source, source


@needs_nvrtc
@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_kernels_compile(name: str, lazy: torch.device) -> None:
    for record in lazyfuse.debug.compile_cuda(GOLDEN_CASES[name](lazy), arch="sm_80"):
        assert record["compiled"], record["log"]


@needs_nvrtc
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.bool])
def test_dtypes_compile(dtype: torch.dtype, lazy: torch.device) -> None:
    x = torch.ones(37, dtype=dtype).to(lazy)
    lazyfuse.mark_step()
    y = x.float().exp().to(dtype) if dtype.is_floating_point else (x == x) & (x != 0)
    records = lazyfuse.debug.compile_cuda(y, arch="sm_90")
    assert records and all(r["compiled"] for r in records), [r["log"] for r in records]


def _compile_in_subprocess(cache_dir: Path, size: int) -> dict[str, int]:
    script = textwrap.dedent(
        f"""
        import json, torch, lazyfuse
        x = torch.randn({size}).to(lazyfuse.lazy_device())
        lazyfuse.mark_step()
        records = lazyfuse.debug.compile_cuda((x * 3).sin(), arch="sm_80")
        assert all(r["compiled"] for r in records), records
        print(json.dumps(lazyfuse.metrics.counters()))
        """
    )
    env = dict(os.environ, LAZYFUSE_CACHE_DIR=str(cache_dir))
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_nvrtc
def test_disk_cache_warm_process_compiles_nothing(tmp_path: Path) -> None:
    cold = _compile_in_subprocess(tmp_path, 123)
    assert cold.get("LazyFuseKernelsCompiled") == 1
    entries = list((tmp_path / "kernels").glob("*.bin"))
    assert len(entries) == 1
    warm = _compile_in_subprocess(tmp_path, 123)
    assert warm.get("LazyFuseKernelsCompiled", 0) == 0
    assert warm.get("LazyFuseKernelsLoadedFromDisk") == 1


@needs_nvrtc
def test_corrupt_cache_entry_is_recompiled(tmp_path: Path) -> None:
    _compile_in_subprocess(tmp_path, 77)
    (entry,) = (tmp_path / "kernels").glob("*.bin")
    entry.write_bytes(entry.read_bytes()[:40])  # truncated
    again = _compile_in_subprocess(tmp_path, 77)
    assert again.get("LazyFuseKernelsCompiled") == 1
    assert not list((tmp_path / "kernels").glob("*.tmp.*"))


@needs_nvrtc
def test_cache_dir_zero_turns_the_disk_cache_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LAZYFUSE_CACHE_DIR", "0")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert lazyfuse.debug.kernel_cache_dir() == ""
    x = torch.randn(5, 7).to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    assert all(r["compiled"] for r in lazyfuse.debug.compile_cuda(x.cos() * 5, arch="sm_80"))
    assert not any(tmp_path.rglob("*.bin"))


def test_default_cache_dir(monkeypatch) -> None:
    monkeypatch.delenv("LAZYFUSE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/home/someone")
    assert lazyfuse.debug.kernel_cache_dir() == "/home/someone/.cache/lazyfuse"


def test_pointers_that_may_alias_are_not_restrict(lazy: torch.device) -> None:
    # An update written over its input's memory (buffer donation) aliases
    # that input: restrict would let the compiler read it through the
    # read-only cache after the write. Other kernels keep restrict.
    p, g = torch.randn(256, device=lazy), torch.randn(256, device=lazy)
    lazyfuse.mark_step()
    (update,) = lazyfuse.debug.compile_cuda(p - 0.1 * g, arch="sm_90")
    params = str(update["source"]).split("extern")[-1].split(")")[0]
    assert "__restrict__" not in params and "float* out0" in params, params
    (reduce,) = lazyfuse.debug.compile_cuda((p * g).sum(), arch="sm_90")
    params = str(reduce["source"]).split("extern")[-1].split(")")[0]
    assert "const float* __restrict__ in0" in params, params
