"""The first training step's time, compiles included, with a graph's kernels
compiled one after the other (LAZYFUSE_COMPILE_THREADS=1) and side by side
(the default: one per core). Each run is a fresh process with an empty
kernel cache, so every kernel compiles (issue "New shapes without new
kernels", part 3).

    python bench/first_step.py [--models transformer] [--target emulated|cpu|cuda] [--out DIR]
    python bench/first_step.py --smoke     # the MLP, emulated: checks the script runs

Targets: `emulated` is the CUDA source under emulation (the host compiler,
one call per kernel), `cpu` the CPU kernels (one compiler call per graph, so
threads change nothing), `cuda` NVRTC on a GPU.
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

FIRST_STEP = """
import sys, time, torch, lazyfuse
sys.path.insert(0, {root!r})
from bench.gpu_training import make_step
from bench.models import MODELS
step = make_step(MODELS[{model!r}], "lazyfuse", torch.device("cpu"))
start = time.perf_counter()
step()
lazyfuse.wait_device_ops()
seconds = time.perf_counter() - start
compiled = lazyfuse.metrics.counter_value("LazyFuseKernelsCompiled") or 0
print(seconds, compiled)
"""


def first_step(model: str, target: str, threads: int) -> dict[str, object]:
    env = dict(os.environ, LAZYFUSE_COMPILE_THREADS=str(threads))
    env["LAZYFUSE_DEVICE"] = "cuda" if target == "cuda" else "cpu"
    env["LAZYFUSE_EMULATE_CUDA"] = "1" if target == "emulated" else "0"
    with tempfile.TemporaryDirectory() as cache:
        env["LAZYFUSE_CACHE_DIR"] = cache
        run = subprocess.run(
            [sys.executable, "-c", FIRST_STEP.format(root=str(ROOT), model=model)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if run.returncode != 0:
        return {"model": model, "threads": threads, "error": run.stderr[-2000:]}
    seconds, compiled = run.stdout.split()[-2:]
    return {
        "model": model,
        "target": target,
        "threads": threads,
        "first step s": float(seconds),
        "kernels compiled": int(compiled),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--models", default="transformer")
    parser.add_argument("--target", choices=["emulated", "cpu", "cuda"], default="emulated")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    models = ["mlp"] if args.smoke else args.models.split(",")
    cores = os.cpu_count() or 1
    rows = [
        first_step(model, args.target, threads)
        for model in models
        for threads in sorted({1, cores})
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_step.json").write_text(json.dumps(rows, indent=2))
    lines = [
        "| model | target | threads | first step s | kernels compiled |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {args.target} | {r['threads']} | error | |")
            continue
        lines.append(
            f"| {r['model']} | {r['target']} | {r['threads']} | {r['first step s']:.2f} "
            f"| {r['kernels compiled']} |"
        )
    (args.out / "first_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
