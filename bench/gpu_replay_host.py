"""Where a replayed training step's time goes on a GPU: the host's launch
loop against the device's kernels.

    python bench/gpu_replay_host.py [--models transformer] [--steps 20] [--windows 3] [--out DIR]
    python bench/gpu_replay_host.py --smoke   # CPU, tiny: checks the script runs

Round 6 (docs/performance.md) found the replayed Transformer step bound by
its host: the loop of 20 replays ended within 5 µs of the synchronized
step, and the kernels took 188 µs of a 1.1-2.0 ms step. For each model this
reports, per window, the host's ms a step before the synchronize and the
whole step's after it; the device's kernel time a step (torch.profiler);
and the host ops that cost most, per step. Run it in several processes to
see how far they differ. Writes gpu_replay_host.json and gpu_replay_host.md.
Timings belong here, never in tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gpu_training import make_step, synchronize  # noqa: E402
from bench.models import MODELS  # noqa: E402

PROFILED_STEPS = 5
TOP_HOST_OPS = 8


def split(model: str, device: torch.device, steps: int, windows: int) -> dict[str, object]:
    step = make_step(MODELS[model], "lazyfuse-replay", device)
    for _ in range(6):  # warm-up calls trace and capture
        step()
    synchronize(device)
    host, whole = [], []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        host.append((time.perf_counter() - start) / steps * 1e3)
        synchronize(device)
        whole.append((time.perf_counter() - start) / steps * 1e3)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(PROFILED_STEPS):
            step()
        synchronize(device)
    events = prof.key_averages()
    device_us = sum(getattr(e, "self_device_time_total", 0.0) for e in events)
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:TOP_HOST_OPS]
    return {
        "model": model,
        "replayed calls": step.replayed_calls,  # type: ignore[attr-defined]
        "host ms/step": [round(v, 3) for v in host],
        "whole ms/step": [round(v, 3) for v in whole],
        "device kernel µs/step": round(device_us / PROFILED_STEPS, 1),
        "top host ops (calls/step, self µs/step)": {
            e.key: [e.count / PROFILED_STEPS, round(e.self_cpu_time_total / PROFILED_STEPS, 1)]
            for e in top
        },
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | host ms/step | whole ms/step | device kernel µs/step |",
        "|---|---|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['host ms/step']} | {r['whole ms/step']} "
            f"| {r['device kernel µs/step']} |"
        )
    for r in rows:
        lines += ["", f"{r['model']}, host ops by self time (calls a step, µs a step):"]
        lines += [
            f"- {k}: {v[0]:g}, {v[1]}"
            for k, v in r["top host ops (calls/step, self µs/step)"].items()
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--models", default="transformer", help=f"of {list(MODELS)}")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true", help="CPU, the MLP, 2 windows of 2 steps")
    args = parser.parse_args()
    if args.smoke:
        device, models, steps, windows = torch.device("cpu"), ["mlp"], 2, 2
    elif torch.cuda.is_available():
        device, models = torch.device("cuda"), args.models.split(",")
        steps, windows = args.steps, args.windows
    else:
        print("bench/gpu_replay_host.py needs a CUDA GPU (or --smoke); none is visible to torch.")
        return 0
    rows = [split(model, device, steps, windows) for model in models]
    for row in rows:
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_replay_host.json").write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    (args.out / "gpu_replay_host.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
