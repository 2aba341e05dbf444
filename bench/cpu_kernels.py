"""Fused CPU kernels side by side with eager and torch.compile, on the CPU.

    python bench/cpu_kernels.py [--max-log2 26] [--out bench/results] [--workloads "column sum"]

For pointwise chains of 1, 4 and 16 ops, softmax, layer norm, a column sum
(rows of 1024) and a 2x2 max pool (planes of 28 x 28) at sizes 2^12 to
2^max, on all cores: the time per call of eager,
torch.compile (Inductor's C++ backend), lazyfuse with its CPU kernels (the
default), lazyfuse running ATen steps (LAZYFUSE_CPU_KERNELS=0's path) and
lazyfuse with no freed outputs kept for reuse (LAZYFUSE_CPU_CACHE_MB=0);
the achieved GB/s (each input read once, each output written once) and that
as a percentage of a same-size copy measured in the same run. Writes JSON
and a Markdown table. Training steps per second and the first step's time
come from `python -m bench` (docs/performance.md). Timings belong here,
never in tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fused_kernels  # noqa: E402
from fused_kernels import Workload, kernel_table, sweep  # noqa: E402


def time_cpu(fn: Callable[[], object], numel: int) -> float:
    """Median seconds per call after a warm-up; about 0.3 s of samples."""
    for _ in range(3):
        fn()
    reps = max(5, min(200, (1 << 26) // max(numel, 1) // 4))
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def time_engines(fn: Workload, x: torch.Tensor) -> dict[str, float]:
    import lazyfuse

    return fused_kernels.time_engines(
        fn,
        x,
        lambda f: time_cpu(f, x.numel()),
        {
            "lazyfuse, ATen steps": lambda: lazyfuse.config.kernel_settings_as(cpu_kernels=False),
            "lazyfuse, no output cache": lambda: lazyfuse.config.cpu_cache_mb_as(0),
        },
        wait=True,
    )


def copy_gbs(numel: int) -> float:
    src = torch.randn(numel)
    dst = torch.empty_like(src)
    return 2 * numel * 4 / time_cpu(lambda: dst.copy_(src), numel) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-log2", type=int, default=26)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--workloads",
        type=lambda text: [name.strip() for name in text.split(",")],
        default=[],
        help=f"comma-separated, of {', '.join(fused_kernels.WORKLOADS)} (default: all)",
    )
    options = parser.parse_args()
    unknown = set(options.workloads) - set(fused_kernels.WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}")
    import lazyfuse

    if lazyfuse.config.backing_device().type != "cpu":
        print("bench/cpu_kernels.py measures the CPU backing device (LAZYFUSE_DEVICE=cpu)")
        return 1
    print(f"{torch.get_num_threads()} threads, torch {torch.__version__}", flush=True)
    rows = sweep(options.max_log2, "cpu", time_engines, copy_gbs, workloads=options.workloads)
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "cpu_kernels.json").write_text(json.dumps(rows, indent=1) + "\n")
    table = "\n".join(kernel_table(rows)) + "\n"
    (options.out / "cpu_kernels.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
