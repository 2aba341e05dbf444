"""Another strategy's template against the kernel a shape calls for (issue
"New shapes without new kernels"). A reduction over rows of L columns runs
on the kernel its sizes call for (LAZYFUSE_DYNAMIC=0), and on the template
of the strategy its structure already has: under `auto`, rows of 17 and 18
columns first make a block-per-row template of 32 threads, which longer rows
then run where their own strategy would be another block size or vector
width. Reports each kernel's time and their ratio, and whether the template
served (LazyFuseGenericOtherStrategy counted it).

    python bench/strategy_reuse.py [--lengths 40,64,96,128,256] [--rows-log2 20]
    python bench/strategy_reuse.py --smoke     # emulated CUDA, tiny: a check, not a figure

On a GPU each call is timed with CUDA events, and its lazyfuse kernels
(`lf_*`) alone with torch.profiler: a whole call is mostly the host's
trace at these sizes, so the kernel column is the one the 5% target reads.
Without a GPU, the kernels run under emulation, and the times are the
emulator's, not a figure.
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
import torch.nn.functional as F

Workload = Callable[[torch.Tensor], torch.Tensor]

WORKLOADS: dict[str, Workload] = {
    "softmax": lambda x: torch.softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "sum": lambda x: x.sum(-1),
}


def time_call(fn: Callable[[], object], reps: int, cuda: bool) -> float:
    """Median seconds per call after a warm-up: CUDA events on a GPU, the
    host clock otherwise."""
    for _ in range(2):
        fn()
    samples = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            begin = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - begin)
    return statistics.median(samples)


def kernel_time(fn: Callable[[], object], reps: int) -> float:
    """Mean device seconds per call of the lazyfuse kernels (`lf_*`) that fn
    launches, read by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels = [
        e
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("lf_")
    ]
    return sum(e.time_range.elapsed_us() for e in kernels) / 1e6 / reps


def measure(
    name: str, lengths: list[int], rows_log2: int, reps: int, cuda: bool
) -> list[dict[str, object]]:
    import lazyfuse

    fn = WORKLOADS[name]
    device = lazyfuse.lazy_device()
    counter = lazyfuse.metrics.counter_value

    def timed(length: int) -> tuple[float, float, bool]:
        x = torch.randn(max(1, (1 << rows_log2) // length), length).to(device)
        lazyfuse.mark_step()
        before = counter("LazyFuseGenericOtherStrategy")
        out: list[torch.Tensor] = []

        def call() -> None:
            out[:] = [fn(x)]
            lazyfuse.mark_step()
            lazyfuse.wait_device_ops()

        call()
        served = counter("LazyFuseGenericOtherStrategy") > before
        kernel = kernel_time(call, reps) if cuda else float("nan")
        return time_call(call, reps, cuda), kernel, served

    with lazyfuse.config.dynamic_kernels_as("0"):
        own = {length: timed(length) for length in lengths}
    lazyfuse.debug.clear_graph_cache()
    lazyfuse.debug.clear_generic_kernels()
    rows = []
    with lazyfuse.config.dynamic_kernels_as("auto"):
        for warm in (17, 18):
            timed(warm)
        for length in lengths:
            seconds, kernel, served = timed(length)
            own_seconds, own_kernel, _ = own[length]
            rows.append(
                {
                    "workload": name,
                    "length": length,
                    "own_us": own_seconds * 1e6,
                    "template_us": seconds * 1e6,
                    "ratio": seconds / own_seconds,
                    "own_kernel_us": own_kernel * 1e6,
                    "template_kernel_us": kernel * 1e6,
                    "kernel_ratio": kernel / own_kernel if own_kernel else float("nan"),
                    "another_strategy": served,
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--lengths", default="40,64,96,128,256")
    parser.add_argument("--rows-log2", type=int, default=20, help="about 2^N elements a call")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    import lazyfuse

    cuda = torch.cuda.is_available() and not args.smoke
    lengths = [int(v) for v in args.lengths.split(",")]
    rows_log2, reps = (args.rows_log2, args.reps) if not args.smoke else (9, 2)
    if args.smoke:
        lengths = lengths[:2]
    settings = {} if cuda else {"emulate_cuda": True, "emulated_block": 256}
    results: list[dict[str, object]] = []
    with lazyfuse.config.kernel_settings_as(**settings):
        for name in WORKLOADS:
            results += measure(name, lengths, rows_log2, reps, cuda)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "strategy_reuse.json").write_text(json.dumps(results, indent=1))
    lines = [
        f"{'CUDA events' if cuda else 'emulated CUDA (not a figure)'}, about 2^{rows_log2} "
        "elements a call, µs:",
        "",
        "| workload | row length | call: own | call: template | ratio "
        "| kernels: own | kernels: template | ratio | another strategy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['workload']} | {r['length']} | {r['own_us']:.1f} | {r['template_us']:.1f} "
            f"| {r['ratio']:.3f} | {r['own_kernel_us']:.1f} | {r['template_kernel_us']:.1f} "
            f"| {r['kernel_ratio']:.3f} | {'yes' if r['another_strategy'] else 'no'} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
