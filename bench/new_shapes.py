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
def step(x, y):
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    lazyfuse.mark_step()
    lazyfuse.wait_device_ops()
rows = []
for length in lengths:
    x, y = torch.randn(8, length, 128).to(device), torch.randint(0, 10, (8,)).to(device)
    before, start = built(), time.perf_counter()
    step(x, y)
    first = time.perf_counter() - start
    start = time.perf_counter()
    step(x, y)  # the same shape again: its graph is cached
    rows.append([length, first, built() - before, time.perf_counter() - start])
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
    for (length, t_auto, b_auto, again), (_, t_off, b_off, _) in zip(
        auto_steps, per_shape_steps, strict=True
    ):
        lines.append(
            f"| {length} | {t_auto * 1e3:.0f} ({b_auto}) | {(t_auto - again) * 1e3:.0f} "
            f"| {t_off * 1e3:.0f} ({b_off}) |"
        )
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
