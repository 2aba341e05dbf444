"""Fused CUDA kernels side by side with eager and torch.compile.

    python bench/fused_kernels.py [--max-log2 28] [--out bench/results]

Needs a CUDA GPU (it exits with a message otherwise). Reports, for pointwise
chains of 1, 4 and 16 ops, softmax, layer norm, a column sum and a 2x2 max
pool at sizes 2^12 to 2^max: the time per call of each engine, the achieved GB/s (each input read
once, each output written once) and that as a percentage of a device-to-device
copy of the same size measured in the same run. Then kernels launched per
training step for the MLP, CNN and Transformer loops, counted with
torch.profiler for eager and lazyfuse alike. Writes JSON and a Markdown table.
Timings belong here, never in tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import torch
import torch.nn.functional as F


def chain(ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor) -> torch.Tensor:
        for k in range(ops):
            x = torch.sin(x) if k % 2 else x * 1.0001 + 0.5
        return x

    return fn


def layer_norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],))


Workload = Callable[[torch.Tensor], torch.Tensor]

WORKLOADS: dict[str, Workload] = {
    "pointwise x1": chain(1),
    "pointwise x4": chain(4),
    "pointwise x16": chain(16),
    "softmax": lambda x: torch.softmax(x, -1),
    "layer_norm": layer_norm,
    # A bias gradient's shape: columns of 1024 summed over the rows.
    "column sum": lambda x: x.sum(0),
    # LeNet-5's first pool: 2x2 windows over planes of 28 x 28 (an ATen step
    # that lazyfuse runs with its own loop on the CPU, ops/max_pool_step.h).
    "max_pool 2x2": lambda x: F.max_pool2d(x, 2),
}

# Workloads over rows of 1024; the column sum writes one row.
ROW_WORKLOADS = ("softmax", "layer_norm", "column sum")


def time_cuda(fn: Callable[[], object], reps: int) -> float:
    """Median seconds per call, measured with CUDA events after a warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return statistics.median(samples)


def shape_for(name: str, numel: int) -> tuple[int, ...]:
    if name == "max_pool 2x2":
        return (max(numel // 784, 1), 28, 28)
    return (numel // 1024, 1024) if name in ROW_WORKLOADS else (numel,)


def bytes_moved(name: str, numel: int) -> int:
    """Float32 bytes read once and written once (a pool's quarter of the
    input as values; its indices, which lazyfuse also writes, not counted)."""
    if name == "max_pool 2x2":
        return (numel + numel // 4) * 4
    return (numel + 1024 if name == "column sum" else 2 * numel) * 4


def time_engines(
    fn: Workload,
    x: torch.Tensor,
    timer: Callable[[Callable[[], object]], float],
    lazy_variants: dict[str, Callable[[], AbstractContextManager[object]]] | None = None,
    *,
    generic: bool = False,
    wait: bool = False,
) -> dict[str, float]:
    """Seconds per call of eager, torch.compile and lazyfuse, each timed by
    `timer`; then lazyfuse again inside each variant's context (other kernel
    settings, the CPU output cache off).
    lazyfuse runs specialized kernels (sizes as constants), as a program of
    one shape gets; a sweep of sizes would otherwise time shape-generic ones
    from its second size on. With `generic`, lazyfuse again on shape-generic
    kernels (sizes as arguments, LAZYFUSE_DYNAMIC=1). With `wait`, each call
    of lazyfuse waits for its graph's run: a host `timer` needs it on the CPU
    backing device, whose mark_step returns before the graph has run
    (asynchronous execution), so a call would time its trace alone."""
    import lazyfuse

    x_lazy = x.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    compiled = torch.compile(fn)

    outputs: list[torch.Tensor] = []

    def run_lazy() -> None:
        # mark_step computes live tensors only: a discarded result would time
        # the tracing alone (the first GPU run reported 543% of copy speed).
        outputs[:] = [fn(x_lazy)]
        lazyfuse.mark_step(wait=wait)

    times = {"eager": timer(lambda: fn(x)), "torch.compile": timer(lambda: compiled(x))}
    with lazyfuse.config.dynamic_kernels_as("0"):
        times["lazyfuse"] = timer(run_lazy)
        for name, variant in (lazy_variants or {}).items():
            with variant():
                times[name] = timer(run_lazy)
    if generic:
        with lazyfuse.config.dynamic_kernels_as("1"):
            times["lazyfuse, generic"] = timer(run_lazy)
    return times


def copy_gbs(numel: int, reps: int) -> float:
    src = torch.randn(numel, device="cuda")
    dst = torch.empty_like(src)
    return 2 * numel * 4 / time_cuda(lambda: dst.copy_(src), reps) / 1e9


def sweep(
    max_log2: int,
    device: str,
    time_engines: Callable[[Workload, torch.Tensor], dict[str, float]],
    copy_gbs: Callable[[int], float],
    min_log2: int = 12,
    workloads: Sequence[str] = (),
) -> list[dict[str, object]]:
    """Each of `workloads` (default: all) at 2^min_log2 to 2^max_log2
    elements on `device`, timed by `time_engines`, with GB/s and that as a %
    of `copy_gbs` at the size."""
    rows = []
    for log2 in range(min_log2, max_log2 + 1, 2):
        numel = 1 << log2
        copy = copy_gbs(numel)
        for name in workloads or WORKLOADS:
            fn = WORKLOADS[name]
            times = time_engines(fn, torch.randn(shape_for(name, numel), device=device))
            for engine, seconds in times.items():
                gbs = bytes_moved(name, numel) / seconds / 1e9
                row = {
                    "workload": name,
                    "numel": numel,
                    "engine": engine,
                    "us": seconds * 1e6,
                    "GB/s": gbs,
                    "% of copy": 100 * gbs / copy,
                }
                rows.append(row)
                # As measured, so a run cut short still reports what it took.
                print(json.dumps(row), flush=True)
    return rows


def bench_kernels(
    max_log2: int,
    reps: int,
    min_log2: int = 12,
    workloads: Sequence[str] = (),
    generic: bool = False,
) -> list[dict[str, object]]:
    return sweep(
        max_log2,
        "cuda",
        lambda fn, x: time_engines(fn, x, lambda f: time_cuda(f, reps), generic=generic),
        lambda numel: copy_gbs(numel, reps),
        min_log2,
        workloads,
    )


def kernel_table(kernels: list[dict[str, object]]) -> list[str]:
    lines = [
        "| workload | elements | engine | µs | GB/s | % of copy |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in kernels:
        lines.append(
            f"| {r['workload']} | 2^{int(r['numel']).bit_length() - 1} | {r['engine']} "
            f"| {r['us']:.1f} | {r['GB/s']:.1f} | {r['% of copy']:.0f}% |"
        )
    return lines


def count_kernels(step: Callable[[], None]) -> int:
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def training_launches() -> list[dict[str, object]]:
    import lazyfuse
    from lazyfuse.demo import LeNet5

    def mlp() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
        )

    def transformer() -> torch.nn.Module:
        return torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True, dropout=0.0)

    models = {
        "MLP": (mlp, (64, 784)),
        "CNN (LeNet-5)": (LeNet5, (64, 1, 28, 28)),
        "Transformer": (transformer, (16, 32, 128)),
    }
    rows = []
    for name, (build, shape) in models.items():
        counts = {
            engine: launches_per_step(build, shape, device)
            for engine, device in (
                ("eager", torch.device("cuda")),
                ("lazyfuse", lazyfuse.lazy_device()),
            )
        }
        rows.append({"model": name, **counts})
    return rows


def launches_per_step(
    build: Callable[[], torch.nn.Module], shape: tuple[int, ...], device: torch.device
) -> int:
    import lazyfuse

    torch.manual_seed(0)
    model = build().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(shape, device=device)

    def step() -> None:
        opt.zero_grad()
        model(x).float().square().mean().backward()
        opt.step()
        if device.type == "lazy":
            lazyfuse.mark_step()

    return count_kernels(step)


def markdown(kernels: list[dict[str, object]], launches: list[dict[str, object]]) -> str:
    lines = kernel_table(kernels)
    lines += ["", "| model | eager kernels/step | lazyfuse kernels/step |", "|---|---:|---:|"]
    for r in launches:
        lines.append(f"| {r['model']} | {r['eager']} | {r['lazyfuse']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--max-log2", type=int, default=28)
    parser.add_argument("--min-log2", type=int, default=12)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument(
        "--workloads",
        type=lambda text: text.split(","),
        default=[],
        help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all)",
    )
    parser.add_argument(
        "--no-launches", action="store_true", help="skip the kernels-per-step table"
    )
    parser.add_argument(
        "--generic",
        action="store_true",
        help="also time lazyfuse on shape-generic kernels (LAZYFUSE_DYNAMIC=1)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--profile-engine",
        choices=["lazyfuse", "torch.compile", "eager"],
        default="lazyfuse",
        help="whose kernels --profile-workload runs",
    )
    parser.add_argument(
        "--profile-workload",
        choices=sorted(WORKLOADS),
        help="only run this workload's lazyfuse step a few times at 2^max-log2 elements,"
        " for a profiler such as ncu to read its kernels",
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/fused_kernels.py needs a CUDA GPU; none is visible to torch.")
        return 0
    import lazyfuse

    if args.profile_workload:
        fn = WORKLOADS[args.profile_workload]
        shape = shape_for(args.profile_workload, 1 << args.max_log2)
        if args.profile_engine == "lazyfuse":
            x = torch.randn(shape, device=lazyfuse.lazy_device())
            lazyfuse.mark_step()
            kept: list[torch.Tensor] = []
            for _ in range(5):
                kept[:] = [fn(x)]  # mark_step computes live tensors only
                lazyfuse.mark_step()
            lazyfuse.wait_device_ops()
        else:
            x = torch.randn(shape, device="cuda")
            run = torch.compile(fn) if args.profile_engine == "torch.compile" else fn
            for _ in range(5):
                run(x)
            torch.cuda.synchronize()
        print(f"ran {args.profile_workload} on {args.profile_engine} at 2^{args.max_log2}")
        return 0

    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {sorted(WORKLOADS)}")
    kernels = bench_kernels(args.max_log2, args.reps, args.min_log2, args.workloads, args.generic)
    launches = [] if args.no_launches else training_launches()
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "backing": lazyfuse._C._backing_device(),
    }
    (args.out / "fused_kernels.json").write_text(
        json.dumps({"meta": meta, "kernels": kernels, "launches": launches}, indent=2)
    )
    table = markdown(kernels, launches)
    (args.out / "fused_kernels.md").write_text(f"{meta}\n\n{table}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
