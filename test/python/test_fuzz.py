"""The differential fuzzer's fixed CI set: FUZZ_GRAPHS random graphs of
fusible work, lazy (fused kernels, emulated on the CPU) against eager, with
its corners (empty tensors, slices past 2^31, numbers near rounding
boundaries, signed zeros). Run more, crash-safe, with
`python test/python/fuzz_campaign.py --graphs N --seed S`."""

from __future__ import annotations

import pytest

from conftest import HOST_COMPILER, NO_FUSED_KERNELS, ON_CUDA
from fuzz_fusion import check_graph, reproduction

FUZZ_SEED = 20261124
FUZZ_GRAPHS = 320
CHUNK = 40
_results: dict[int, str | None] = {}


@pytest.mark.skipif(not ON_CUDA and not HOST_COMPILER, reason=NO_FUSED_KERNELS)
@pytest.mark.usefixtures("fused_kernels")
@pytest.mark.parametrize("start", range(0, FUZZ_GRAPHS, CHUNK))
def test_fuzz_graphs(start: int) -> None:
    failures = []
    for index in range(start, start + CHUNK):
        problem = check_graph(FUZZ_SEED, index)
        _results[index] = problem
        if problem is not None:
            failures.append(f"{reproduction(FUZZ_SEED, index)}  # {problem}")
    assert not failures, "\n".join(failures)


def fuzz_summary() -> str | None:
    if not _results:
        return None
    mismatches = sum(problem is not None for problem in _results.values())
    return f"fuzz: {len(_results)} graphs, {mismatches} mismatches"
