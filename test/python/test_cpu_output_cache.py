"""Freed CPU kernel outputs are kept for reuse (runtime/cpu/output_pool.h):
a step writing large results into memory freed by the last one does not
page-fault fresh memory, what is kept stays under its cap, a reused block's
old values never show, and track_memory counts what is in use, not what is
kept."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import torch

import lazyfuse
from conftest import HOST_COMPILER, NO_CPU_KERNELS, ON_CUDA

pytestmark = [
    pytest.mark.skipif(ON_CUDA or not HOST_COMPILER, reason=NO_CPU_KERNELS),
    pytest.mark.usefixtures("cpu_kernels"),
]

MIB = 1 << 20
NUMEL = 1 << 20  # 4 MiB of float32: pooled


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    before = lazyfuse.config.cpu_cache_mb()
    torch.lazy.empty_cache()
    yield
    _copies.clear()
    lazyfuse.config.set_cpu_cache_mb(before)
    torch.lazy.empty_cache()


def cache() -> dict[str, int]:
    return lazyfuse.metrics.cpu_output_cache()


def step(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """`fn` on a lazy copy of `x` kept by the caller's x: a result written over
    an input that dies (donation) would need no new memory."""
    out = fn(lazy_copy(x))
    # Waits: a peak read while the next step traces would vary by a scalar.
    lazyfuse.mark_step(wait=True)
    return out


_copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def lazy_copy(x: torch.Tensor) -> torch.Tensor:
    if id(x) not in _copies or _copies[id(x)][0] is not x:
        _copies[id(x)] = (x, x.to(lazyfuse.lazy_device()))
        lazyfuse.mark_step()
    return _copies[id(x)][1]


def test_a_step_writes_its_results_into_memory_the_last_one_freed() -> None:
    x = torch.randn(NUMEL)
    before = cache()["reused"]
    in_use = cache()["in_use_bytes"]  # other tests' tensors may hold pooled blocks
    for _ in range(5):
        out = step(lambda t: t * 2 + 1, x)
        torch.testing.assert_close(out.cpu(), x * 2 + 1)
        del out
    assert cache()["reused"] - before >= 4
    assert cache()["kept_bytes"] >= NUMEL * 4
    assert cache()["in_use_bytes"] == in_use


GRAPHS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "pointwise": lambda t: (t * 0.5 + 1).sin(),
    "softmax": lambda t: t.view(256, -1).softmax(1),
    "layer_norm": lambda t: torch.nn.functional.layer_norm(t.view(256, -1), (NUMEL // 256,)),
    "row_max_epilogue": lambda t: t.view(256, -1) - t.view(256, -1).amax(1, keepdim=True),
}


@pytest.mark.parametrize("name", GRAPHS)
def test_a_reused_block_shows_none_of_its_old_values(name: str) -> None:
    x = torch.randn(NUMEL)
    poison = step(lambda t: t * float("nan"), x)  # a block full of NaN, then kept
    assert poison.cpu().isnan().all()
    del poison
    reused = cache()["reused"]
    got = step(GRAPHS[name], x)
    assert cache()["reused"] > reused
    torch.testing.assert_close(got.cpu(), GRAPHS[name](x), rtol=1e-5, atol=1e-5)


def test_the_cap_bounds_what_is_kept_and_empty_cache_frees_it() -> None:
    x = torch.randn(NUMEL)
    lazyfuse.config.set_cpu_cache_mb(6)
    outs = [step(lambda t, k=k: t + k, x) for k in range(3)]  # 3 x 4 MiB
    del outs
    assert 0 < cache()["kept_bytes"] <= 6 * MIB
    torch.lazy.empty_cache()
    assert cache()["kept_bytes"] == 0
    lazyfuse.config.set_cpu_cache_mb(0)
    reused = cache()["reused"]
    for _ in range(3):
        out = step(lambda t: t - 1, x)
        del out
    assert cache()["kept_bytes"] == 0
    assert cache()["reused"] == reused
    with pytest.raises(RuntimeError, match=r"set_cpu_cache_mb\(-1\)"):
        lazyfuse.config.set_cpu_cache_mb(-1)


def peak_of_two_steps(x: torch.Tensor) -> int:
    with lazyfuse.metrics.track_memory() as reading:
        for _ in range(2):
            out = step(lambda t: (t * 3).exp() + t, x)
            del out
    return reading.peak_bytes


def test_track_memory_counts_blocks_in_use_not_blocks_kept() -> None:
    x = torch.randn(NUMEL)
    lazy_copy(x)  # not counted
    lazyfuse.config.set_cpu_cache_mb(0)
    peak_of_two_steps(x)  # compiles
    without = peak_of_two_steps(x)
    lazyfuse.config.set_cpu_cache_mb(64)
    peak_of_two_steps(x)  # fills the cache
    assert cache()["kept_bytes"] > 0
    with_cache = peak_of_two_steps(x)
    assert with_cache == without
    assert NUMEL * 4 <= with_cache <= 3 * NUMEL * 4


def test_a_bad_cache_size_raises_at_import() -> None:
    bad = subprocess.run(
        [sys.executable, "-c", "import lazyfuse"],
        env=dict(os.environ, LAZYFUSE_CPU_CACHE_MB="lots"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0
    assert "LAZYFUSE_CPU_CACHE_MB is 'lots'" in bad.stderr
