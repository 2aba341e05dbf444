"""The first training step's time, compiles included, with a graph's kernels
compiled one after the other (LAZYFUSE_COMPILE_THREADS=1) and side by side
(the default: one per core). Each run is a fresh process with an empty
kernel cache, so every kernel compiles (issue "New shapes without new
kernels", part 3); and again with a cache that holds only the prelude's
precompiled header, as every process after a machine's first finds it.

    python bench/first_step.py [--models transformer] [--target emulated|cpu|cuda] [--out DIR]
    python bench/first_step.py --smoke     # the MLP, emulated: checks the script runs

Targets: `emulated` is the CUDA source under emulation (the host compiler,
one call per kernel), `cpu` the CPU kernels (one library, so one compiler
call, per thread, at least 4 kernels each), `cuda` NVRTC on a GPU.
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


# One small kernel: its compile builds the prelude's precompiled header, which
# a kernel cache keeps for every later process.
PRELUDE_ONLY = """
import torch, lazyfuse
(torch.ones(4).to(lazyfuse.lazy_device()) * 2).cpu()
"""


def first_step(model: str, target: str, threads: int) -> dict[str, object]:
    """The first step in a process with an empty kernel cache, and in one
    whose cache holds only the prelude (a machine's later processes)."""
    env = dict(os.environ, LAZYFUSE_COMPILE_THREADS=str(threads))
    env["LAZYFUSE_DEVICE"] = "cuda" if target == "cuda" else "cpu"
    env["LAZYFUSE_EMULATE_CUDA"] = "1" if target == "emulated" else "0"
    row: dict[str, object] = {"model": model, "target": target, "threads": threads}
    for prelude_cached in (False, True):
        with tempfile.TemporaryDirectory() as cache:
            env["LAZYFUSE_CACHE_DIR"] = cache
            if prelude_cached:
                subprocess.run([sys.executable, "-c", PRELUDE_ONLY], env=env, timeout=900)
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
        key = "first step s, prelude cached" if prelude_cached else "first step s"
        row[key] = float(seconds)
        row.setdefault("kernels compiled", int(compiled))
    return row


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
        "| model | target | threads | first step s | the same, prelude cached | compiles |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {args.target} | {r['threads']} | error | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['target']} | {r['threads']} | {r['first step s']:.2f} "
            f"| {r['first step s, prelude cached']:.2f} | {r['kernels compiled']} |"
        )
    (args.out / "first_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
