"""The differential fuzzer's fixed CI set: FUZZ_GRAPHS random graphs of
fusible work, lazy (fused kernels: emulated CUDA and native CPU kernels; and
ATen steps) against eager, with its corners (empty tensors, slices past
2^31, numbers near rounding boundaries, signed zeros). Run more, crash-safe, with
`python test/python/fuzz_campaign.py --graphs N --seed S`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import lazyfuse
from conftest import HOST_COMPILER, NO_FUSED_KERNELS, ON_CUDA
from fuzz_fusion import Graph, check_graph, evaluate, reproduction, sin_of_large_rounded
from fuzz_ops import wide_slice

FUZZ_SEED = 20261124
FUZZ_GRAPHS = 320
CHUNK = 40
_results: dict[tuple[str, int], str | None] = {}


@pytest.mark.skipif(not ON_CUDA and not HOST_COMPILER, reason=NO_FUSED_KERNELS)
@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("start", range(0, FUZZ_GRAPHS, CHUNK))
def test_fuzz_graphs(start: int) -> None:
    check_chunk("fused", start)


@pytest.mark.usefixtures("cpu_kernels")
@pytest.mark.parametrize("start", range(0, FUZZ_GRAPHS, CHUNK))
def test_fuzz_graphs_on_cpu_kernels(start: int) -> None:
    check_chunk("cpu", start, target="cpu")


@pytest.fixture
def aten_steps() -> Iterator[None]:
    with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=False):
        yield


@pytest.mark.skipif(ON_CUDA, reason="the CUDA backing device always fuses: no ATen-only path")
@pytest.mark.usefixtures("aten_steps")
@pytest.mark.parametrize("start", range(0, FUZZ_GRAPHS, CHUNK))
def test_fuzz_graphs_on_aten_steps(start: int) -> None:
    # Pointwise ATen steps write results over inputs nothing reads later.
    check_chunk("aten", start, target="aten")


def check_chunk(name: str, start: int, target: str | None = None) -> None:
    failures = []
    for index in range(start, start + CHUNK):
        problem = check_graph(FUZZ_SEED, index)
        _results[(name, index)] = problem
        if problem is not None:
            failures.append(f"{reproduction(FUZZ_SEED, index, target)}  # {problem}")
    assert not failures, "\n".join(failures)


def fuzz_summary() -> str | None:
    if not _results:
        return None
    lines = []
    for name in sorted({name for name, _ in _results}):
        problems = [p for (n, _), p in _results.items() if n == name]
        mismatches = sum(problem is not None for problem in problems)
        lines.append(f"{len(problems)} graphs on {name} kernels, {mismatches} mismatches")
    return "fuzz: " + "; ".join(lines)


def test_sin_of_a_large_rounded_value_is_not_compared() -> None:
    # Fuzz seed 24, graph 238: sin of a float64 sum of int64 extremes (about
    # 4e17, where an ulp is 64). Eager and the CPU kernels sum in two correct
    # orders an ulp apart, and sin of the two has nothing in common. The same
    # graph with a small sum is still compared.
    graph = Graph(
        seed=0,
        index=0,
        inputs=[("v0", [4], torch.int64)],
        steps=[("v1", "sum_f64", ["v0", "7", "False"]), ("v2", "sin", ["v1"])],
        outputs=["v2"],
    )
    dtypes: dict[str, torch.dtype] = {}
    largest: dict[str, float] = {}
    evaluate(graph, {"v0": torch.tensor([2**60, 3, 2**58, 7])}, dtypes, largest)
    assert sin_of_large_rounded(graph, "v2", dtypes, largest)
    evaluate(graph, {"v0": torch.tensor([2, 3, 5, 7])}, dtypes, largest)
    assert not sin_of_large_rounded(graph, "v2", dtypes, largest)


def test_largest_magnitudes_cover_every_dtype() -> None:
    # Recording magnitudes must not raise: check_graph counts a raise in the
    # eager run as "eager rejects the graph" and skips it, and abs has no
    # bool kernel, so every graph with a comparison was once skipped.
    graph = Graph(
        seed=0,
        index=0,
        inputs=[("v0", [3], torch.float32), ("v1", [3], torch.int64)],
        steps=[("v2", "le_s", ["v0", "0.5"]), ("v3", "sin", ["v0"])],
        outputs=["v2", "v3"],
    )
    largest: dict[str, float] = {}
    inputs = {"v0": torch.tensor([0.25, -2.0, float("inf")]), "v1": torch.tensor([1, -7, 3])}
    evaluate(graph, inputs, None, largest)
    assert largest == {"v0": 2.0, "v1": 7.0, "v2": 1.0, "v3": pytest.approx(0.909, abs=1e-3)}


@pytest.mark.skipif(not ON_CUDA and not HOST_COMPILER, reason=NO_FUSED_KERNELS)
@pytest.mark.usefixtures("fused_kernels")
def test_the_wide_slice_op_stores_only_its_slice() -> None:
    # Its 2^31-element product once came back as a slice of a view chain,
    # which functionalization keeps alive whole: each step then stored 4 GiB
    # and its replay fuzz graph took minutes under emulation.
    x = torch.tensor([[[1.0]], [[-2.0]]])
    slice_ = wide_slice(x.to(lazyfuse.lazy_device()), 3)
    with lazyfuse.metrics.track_memory() as reading:
        lazyfuse.mark_step()
    assert reading.peak_bytes < 2**20, reading.describe()
    assert torch.equal(slice_.cpu(), wide_slice(x, 3))
