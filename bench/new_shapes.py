"""What a new input shape costs: a Transformer encoder layer's AdamW training
step (bench/models.py's EncoderClassifier) run at one sequence length after
another, each step timed whole (lowering, planning, kernel compiles, run),
with shape-generic kernels (LAZYFUSE_DYNAMIC=auto, the default) and without
(LAZYFUSE_DYNAMIC=0). A new shape's overhead is its step less the same step
again (cached). Then the same step at one shape, many times, on
specialized kernels against shape-generic ones (LAZYFUSE_DYNAMIC=1), to see
what a size passed as an argument costs. Each run is a fresh process with an
empty kernel cache (issue "New shapes without new kernels").

    python bench/new_shapes.py [--target cpu|emulated|cuda] [--out DIR]
    python bench/new_shapes.py --smoke     # three lengths, CPU kernels
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = [16, 17, 18, 24, 31, 40, 48, 57, 64, 96]

RUN = """
import json, sys, time, torch, torch.nn.functional as F, lazyfuse
sys.path.insert(0, {root!r})
from bench.models import EncoderClassifier
lengths, repeats = {lengths!r}, {repeats!r}
device = lazyfuse.lazy_device()
torch.manual_seed(0)
model = EncoderClassifier().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
def built():
    counter = lazyfuse.metrics.counter_value
    return counter("LazyFuseKernelsCompiled") + counter("LazyFuseKernelsLoadedFromDisk")
timers = dict(lazyfuse.metrics.PHASE_METRICS, **lazyfuse.metrics.NEW_GRAPH_METRICS)
def phases():
    return {{k: lazyfuse.metrics.timed_seconds(name) for k, name in timers.items()}}
def spent(before, after):
    return {{k: after[k] - before[k] for k in before}}
def step(x, y):
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    lazyfuse.mark_step()
    lazyfuse.wait_device_ops()
rows = []
for length in lengths:
    x, y = torch.randn(8, length, 128).to(device), torch.randint(0, 10, (8,)).to(device)
    before, start, p0 = built(), time.perf_counter(), phases()
    step(x, y)
    first, p1 = time.perf_counter() - start, phases()
    start = time.perf_counter()
    step(x, y)  # the same shape again: its graph is cached
    again = time.perf_counter() - start
    rows.append([length, first, built() - before, again, spent(p0, p1), spent(p1, phases())])
steady = None
if repeats:
    start = time.perf_counter()
    for _ in range(repeats):
        step(x, y)
    steady = (time.perf_counter() - start) / repeats
print(json.dumps({{"steps": rows, "steady": steady}}))
"""


def run(target: str, dynamic: str, lengths: list[int], repeats: int) -> dict[str, object]:
    env = dict(os.environ, LAZYFUSE_DYNAMIC=dynamic)
    env["LAZYFUSE_DEVICE"] = "cuda" if target == "cuda" else "cpu"
    env["LAZYFUSE_EMULATE_CUDA"] = "1" if target == "emulated" else "0"
    with tempfile.TemporaryDirectory() as cache:
        env["LAZYFUSE_CACHE_DIR"] = cache
        code = RUN.format(root=str(ROOT), lengths=lengths, repeats=repeats)
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800
        )
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return dict(json.loads(done.stdout.splitlines()[-1]))


def overhead_table(steps: list[list[Any]]) -> list[str]:
    """Where each new length's overhead (its step less the cached step) goes
    under `auto`, ms: each column is a phase's time in the new length's step
    less its time in the cached step. At the first length the cached step
    makes the optimizer's state, so only later lengths read cleanly. Kernel
    choice at launch is part of `execute`; the batch (CPU kernels load a
    graph's kernels at once) comes before the run. `other` is outside every
    timer: mostly the trace, which builds every IR node of a new length
    again where the cached step reuses them (docs/performance.md)."""
    lines = [
        "Where a new length's overhead goes (auto), ms:",
        "",
        "| length | overhead | lowering | planning | rest of compile | kernel batch "
        "| execute | of which kernel choice | other |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for length, first, _, again, spent_first, spent_again in steps:
        ms = {k: 1e3 * (v - spent_again[k]) for k, v in spent_first.items()}
        overhead = 1e3 * (first - again)
        other = overhead - ms["lowering"] - ms["compile"] - ms["kernel_batch"] - ms["execute"]
        lines.append(
            f"| {length} | {overhead:.1f} | {ms['lowering']:.1f} | {ms['planning']:.1f} "
            f"| {ms['compile'] - ms['planning']:.1f} | {ms['kernel_batch']:.1f} "
            f"| {ms['execute']:.1f} | {ms['kernel_choice']:.1f} | {other:.1f} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--target", choices=["cpu", "emulated", "cuda"], default="cpu")
    parser.add_argument(
        "--repeats", type=int, default=50, help="steady steps to time; 0 skips them"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    lengths = LENGTHS[:3] if args.smoke else LENGTHS
    repeats = 2 if args.smoke else args.repeats
    runs = {mode: run(args.target, mode, lengths, 0) for mode in ("auto", "0")}
    steady = (
        {mode: run(args.target, mode, lengths[:1], repeats) for mode in ("0", "1")}
        if repeats > 0
        else {}
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "new_shapes.json").write_text(json.dumps({"runs": runs, "steady": steady}))
    failed = [r["error"] for r in [*runs.values(), *steady.values()] if "error" in r]
    if failed:
        print("\n".join(str(e) for e in failed), file=sys.stderr)
        return 1
    lines = [
        f"Target: {args.target}. Each step timed whole, ms (kernels built).",
        "",
        "| length | generic (auto) | new shape's overhead | per-shape (LAZYFUSE_DYNAMIC=0) |",
        "|---:|---:|---:|---:|",
    ]
    auto_steps: list[list[float]] = runs["auto"]["steps"]  # type: ignore[assignment]
    per_shape_steps: list[list[float]] = runs["0"]["steps"]  # type: ignore[assignment]
    for (length, t_auto, b_auto, again, *_), (_, t_off, b_off, *_) in zip(
        auto_steps, per_shape_steps, strict=True
    ):
        lines.append(
            f"| {length} | {t_auto * 1e3:.0f} ({b_auto}) | {(t_auto - again) * 1e3:.0f} "
            f"| {t_off * 1e3:.0f} ({b_off}) |"
        )
    lines += ["", *overhead_table(auto_steps)]
    if steady:
        specialized = float(steady["0"]["steady"])  # type: ignore[arg-type]
        generic = float(steady["1"]["steady"])  # type: ignore[arg-type]
        lines += [
            "",
            f"Steady step at length {lengths[0]}, {repeats} steps: specialized kernels "
            f"{specialized * 1e3:.2f} ms, shape-generic {generic * 1e3:.2f} ms "
            f"(generic / specialized = {generic / specialized:.3f}).",
        ]
    (args.out / "new_shapes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
