"""Peak memory of training, lazyfuse against eager, measured by one rule.

    python bench/memory.py [--cases mlp-2048,transformer,...] [--steps 5] [--out DIR]
    python bench/memory.py --smoke       # small shapes: checks the script runs

Each engine runs each case in a fresh process. lazyfuse.metrics.track_memory
counts the backing device's allocator bytes (eager's and lazyfuse's alike,
deterministic, not RSS) from model creation to the last step: the whole
run's peak, the last step's peak above what was allocated before it, and what
is still held at the end. For lazyfuse the report also names the buffers the
graph held at its peak. Engines:

- eager: PyTorch on the backing device;
- lazyfuse: the default, fused kernels (CPU kernels on the CPU, with buffer
  donation);
- lazyfuse-aten: every step an ATen call (LAZYFUSE_CPU_KERNELS=0).

Writes memory.json and memory.md. Figures belong here, never in tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ENGINES = {"eager": {}, "lazyfuse": {}, "lazyfuse-aten": {"LAZYFUSE_CPU_KERNELS": "0"}}
MIB = 2**20


class Blocks(nn.Module):
    """`depth` residual-free MLP blocks, each optionally checkpointed."""

    def __init__(self, width: int, depth: int, checkpointed: bool) -> None:
        super().__init__()
        self.checkpointed = checkpointed
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU())
            for _ in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def linear_stack(width: int, layers: int) -> nn.Module:
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())])


def encoder(d_model: int, heads: int, ff: int) -> nn.Module:
    return nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)


# name -> (title, model, input shape), full size and --smoke size.
CASES: dict[str, tuple[str, Callable[[bool], nn.Module], Callable[[bool], tuple[int, ...]]]] = {
    "mlp-2048": (
        "6 Linear(2048, 2048) + ReLU, batch 512, Adam",
        lambda smoke: linear_stack(256 if smoke else 2048, 6),
        lambda smoke: (64, 256) if smoke else (512, 2048),
    ),
    "transformer": (
        "Transformer encoder layer (d=512, 8 heads, ff 2048), seq 128, batch 16, Adam",
        lambda smoke: encoder(64, 4, 128) if smoke else encoder(512, 8, 2048),
        lambda smoke: (2, 16, 64) if smoke else (16, 128, 512),
    ),
    "deep-mlp": (
        "16 blocks Linear-GELU-Linear-GELU, width 1024, batch 1024, Adam",
        lambda smoke: Blocks(64 if smoke else 1024, 16, False),
        lambda smoke: (64, 64) if smoke else (1024, 1024),
    ),
    "deep-mlp-checkpointed": (
        "the same, each block under torch.utils.checkpoint (non-reentrant)",
        lambda smoke: Blocks(64 if smoke else 1024, 16, True),
        lambda smoke: (64, 64) if smoke else (1024, 1024),
    ),
}


def worker(case: str, engine: str, steps: int, smoke: bool) -> dict:
    import lazyfuse
    from lazyfuse.metrics import track_memory

    device = torch.device(lazyfuse.config.backing_device().type)
    if engine != "eager":
        device = lazyfuse.lazy_device()
    _, make_model, shape = CASES[case]
    step_peak = 0
    with track_memory() as run:
        torch.manual_seed(0)
        model = make_model(smoke).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        x = torch.randn(shape(smoke)).to(device).requires_grad_(case.endswith("checkpointed"))
        lazyfuse.mark_step()
        for _ in range(steps):
            with track_memory() as step:
                opt.zero_grad()
                loss = model(x).square().mean()
                loss.backward()
                opt.step()
                lazyfuse.mark_step()
            step_peak = step.peak_bytes
        final_loss = loss.item()
        del loss
    state = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "case": case,
        "engine": engine,
        "parameter_mib": state / MIB,
        "peak_mib": run.peak_bytes / MIB,
        "step_peak_mib": step_peak / MIB,
        "held_mib": run.allocated_bytes / MIB,
        "loss": final_loss,
        "held_at_peak": step.describe(8) if engine != "eager" else "",
    }


def run_case(case: str, engine: str, steps: int, smoke: bool) -> dict:
    env = dict(os.environ, **ENGINES[engine])
    command = [sys.executable, __file__, "--worker", case, engine, "--steps", str(steps)]
    out = subprocess.run(
        command + (["--smoke"] if smoke else []), env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"{case} on {engine} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(report: dict) -> str:
    lines = [
        f"Memory, {report['date']}, torch {report['torch']}, {report['device']}, "
        f"{report['steps']} steps. MiB from lazyfuse.metrics.track_memory; "
        "ratios are to eager's.",
        "",
        "| case | engine | peak | vs eager | step peak | held at end | vs eager |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for case in report["cases"]:
        rows = [r for r in report["results"] if r["case"] == case]
        eager = next(r for r in rows if r["engine"] == "eager")
        for r in rows:
            lines.append(
                f"| {case} | {r['engine']} | {r['peak_mib']:.1f} | "
                f"{r['peak_mib'] / eager['peak_mib']:.2f} | {r['step_peak_mib']:.1f} | "
                f"{r['held_mib']:.1f} | {r['held_mib'] / eager['held_mib']:.2f} |"
            )
    lines += ["", "What lazyfuse's graph held at the last step's peak:", ""]
    for r in report["results"]:
        if r["held_at_peak"]:
            lines += [f"{r['case']}, {r['engine']}:", "```", r["held_at_peak"], "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "ENGINE"))
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.smoke)))
        return
    steps = 2 if args.smoke else args.steps
    cases = args.cases.split(",")
    results = [
        run_case(case, engine, steps, args.smoke)
        for case in cases
        for engine in args.engines.split(",")
    ]
    import lazyfuse

    report = {
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "device": lazyfuse.config.backing_device().type,
        "steps": steps,
        "cases": cases,
        "results": results,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.json").write_text(json.dumps(report, indent=2))
    (out / "memory.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
