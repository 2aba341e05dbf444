"""Where a training step's time goes, engine by engine: wall time per step,
device time by kind of kernel (GEMM, lazyfuse's fused kernels, other ATen
kernels, copies), launches per step and the runtime API calls behind them.
The split that explains a missed training target (issue "On a real GPU").

    python bench/gpu_time_split.py [--cases transformer:eager,gpt2:lazyfuse-replay] [--out DIR]
    python bench/gpu_time_split.py --smoke     # CPU, tiny: checks the script runs

One profiled step after warm-up steps (a replayed step captures on its
first calls); wall time is the mean of five unprofiled steps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gpu_training import GPT2, make_step, synchronize  # noqa: E402
from bench.models import MODELS  # noqa: E402

DEFAULT_CASES = (
    "transformer:eager,transformer:lazyfuse,transformer:lazyfuse-replay,"
    "gpt2:eager,gpt2:lazyfuse-replay"
)
GEMM_NAMES = ("gemm", "sm90", "sm80", "cutlass", "xmma", "cublas")


def kind_of(name: str) -> str:
    low = name.lower()
    if "memcpy" in low:
        return "memcpy"
    if "memset" in low:
        return "memset"
    if name.startswith("lf_"):
        return "lazyfuse"
    if any(k in low for k in GEMM_NAMES):
        return "gemm"
    return "other"


def is_annotation(name: str) -> bool:
    # torch.profiler also reports the optimizer's record_function range as a
    # device event; it is no kernel.
    return name.startswith(("Optimizer.", "ProfilerStep"))


def split(model: str, engine: str, device: torch.device) -> dict[str, object]:
    setup = GPT2 if model == "gpt2" else MODELS[model]
    step = make_step(setup, engine, device)
    for _ in range(6):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(5):
        step()
    synchronize(device)
    wall_ms = (time.perf_counter() - start) / 5 * 1e3
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        step()
        synchronize(device)
    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    api: Counter[str] = Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            if not is_annotation(event.name):
                entry = kinds[kind_of(event.name)]
                entry[0] += 1
                entry[1] += event.time_range.elapsed_us() / 1e3
        elif event.name.startswith(("cuda", "cu")) and not event.name.startswith("cudnn"):
            api[event.name] += 1
    return {
        "model": model,
        "engine": engine,
        "wall ms": wall_ms,
        "device ms": sum(ms for _, ms in kinds.values()),
        "kinds": {k: {"count": int(c), "ms": ms} for k, (c, ms) in sorted(kinds.items())},
        "api": dict(api.most_common(8)),
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | engine | wall ms/step | device ms | GEMM ms "
        "| lazyfuse kernels | other kernels |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['engine']} | {r['error']} | | | | |")
            continue
        kinds = r["kinds"]
        gemm = kinds.get("gemm", {"ms": 0.0})["ms"]
        fused = kinds.get("lazyfuse", {"count": 0})["count"]
        other = kinds.get("other", {"count": 0})["count"]
        lines.append(
            f"| {r['model']} | {r['engine']} | {r['wall ms']:.2f} | {r['device ms']:.2f} "
            f"| {gemm:.2f} | {fused} | {other} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--cases", default=DEFAULT_CASES, help="model:engine,...")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true", help="CPU: the MLP, eager and replayed")
    args = parser.parse_args()
    if args.smoke:
        device, cases = torch.device("cpu"), "mlp:eager,mlp:lazyfuse-replay"
    elif torch.cuda.is_available():
        device, cases = torch.device("cuda"), args.cases
    else:
        print("bench/gpu_time_split.py needs a CUDA GPU (or --smoke); none is visible to torch.")
        return 0
    rows = []
    for case in cases.split(","):
        model, engine = case.split(":")
        try:
            row = split(model, engine, device)
        except Exception as error:  # noqa: BLE001 - one case's failure is a result
            row = {"model": model, "engine": engine, "error": f"{type(error).__name__}: {error}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_time_split.json").write_text(json.dumps(rows, indent=2))
    table = markdown(rows)
    (args.out / "gpu_time_split.md").write_text(table)
    print(table)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
