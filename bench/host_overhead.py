"""Kernel counts and host overhead, measured without a GPU.

    python bench/host_overhead.py [--rounds 50] [--out bench/results]
    python bench/host_overhead.py --smoke      # fewer rounds: checks the script runs

1. Kernels per training step (forward, backward, optimizer) for the MLP,
   LeNet-5 and Transformer setups of bench/models.py. lazyfuse's count is
   what one cache-hit step launches: its fused kernels (counted as launched)
   plus its ATen calls (from the step's fusion plan; each is at least one
   kernel on a GPU). Views run as aliases and launch nothing. Eager's count is
   the ATen ops the same step dispatches on the CPU, views left out, since
   they launch nothing either. Eager on a GPU may use foreach optimizers and
   launch fewer; bench/fused_kernels.py counts real GPU kernels.
2. Host µs per kernel launch (binding the inputs, finding the variant,
   allocating outputs, packing arguments) and per cache-hit mark_step of a
   graph of many small kernels. It runs under CUDA emulation, and the time the
   emulated kernel bodies take (LazyFuseTargetLaunch) is taken out, so what
   is left is lazyfuse's host work. On a GPU the driver's launch call is
   host work too and is not taken out there.

Writes host_overhead.json and host_overhead.md. Timings belong here, never in
tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.models import MODELS, TrainingSetup  # noqa: E402


class OpCounter(TorchDispatchMode):
    """Counts the ATen ops eager dispatches that compute something: views
    (outputs that alias an input without writing it) are left out."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: object,
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        returns = func._schema.returns
        is_view = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns
        )
        self.ops += 0 if is_view else 1
        return func(*args, **(kwargs or {}))


def _training_step(setup: TrainingSetup, device: torch.device) -> Callable[[], None]:
    torch.manual_seed(0)
    model = setup.make_model().to(device)
    opt = setup.make_optimizer(list(model.parameters()))
    x, y = (t.to(device) for t in setup.batches(1)[0])

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def eager_ops_per_step(setup: TrainingSetup) -> int:
    step = _training_step(setup, torch.device("cpu"))
    step()  # the optimizer creates its state on the first step
    counter = OpCounter()
    with counter:
        step()
    return counter.ops


def lazyfuse_kernels_per_step(setup: TrainingSetup) -> dict[str, int]:
    import lazyfuse
    from lazyfuse.metrics import counter_value

    step = _training_step(setup, lazyfuse.lazy_device())
    for _ in range(2):  # the first steps compile; the third is a cache hit
        step()
        lazyfuse.mark_step()
    before = counter_value("LazyFuseKernelLaunches")
    step()
    lazyfuse.mark_step()
    fused = counter_value("LazyFuseKernelLaunches") - before
    kinds = [line.split("[", 1)[1].split()[0].rstrip("]:") for line in _plan_lines()]
    return {
        "fused kernels": fused,
        "ATen calls": kinds.count("aten"),
        "aliased view groups": kinds.count("view"),
        "lazyfuse kernels": fused + kinds.count("aten"),
    }


def _plan_lines() -> list[str]:
    import lazyfuse

    return lazyfuse.debug.fusion_plan().splitlines()[1:]


def _accumulated_ns(name: str) -> float:
    import lazyfuse

    data = lazyfuse.metrics.metric_data(name)
    return data[1] if data else 0.0


def host_overhead(kernels: int, rounds: int, emulated: bool) -> dict[str, float]:
    """A graph of `kernels` independent small pointwise kernels, run cached
    `rounds` times: host µs per mark_step and per launch. Emulated kernel
    bodies run on the host and are taken out; a CUDA launch is asynchronous,
    and its driver call is host work, so it stays in. Each mark_step waits
    for its graph's run: on the CPU backing device it would otherwise return
    before its launches (asynchronous execution), and the previous round's
    kernel bodies would be taken out of this one's time."""
    import lazyfuse
    from lazyfuse.metrics import counter_value

    inputs = [torch.randn(64, device=lazyfuse.lazy_device()) for _ in range(kernels)]
    lazyfuse.mark_step()
    step_us, launch_us = [], []
    for _ in range(rounds + 2):
        outs = [x * 1.5 + 0.5 for x in inputs]
        launches = counter_value("LazyFuseKernelLaunches")
        launch_ns = _accumulated_ns("LazyFuseKernelLaunch")
        body_ns = _accumulated_ns("LazyFuseTargetLaunch")
        start = time.perf_counter_ns()
        lazyfuse.mark_step(wait=True)
        wall_ns = time.perf_counter_ns() - start
        body = _accumulated_ns("LazyFuseTargetLaunch") - body_ns if emulated else 0.0
        launched = counter_value("LazyFuseKernelLaunches") - launches
        assert launched == kernels, f"expected {kernels} launches, saw {launched}"
        step_us.append((wall_ns - body) / 1e3)
        host_ns = _accumulated_ns("LazyFuseKernelLaunch") - launch_ns - body
        launch_us.append(host_ns / 1e3 / kernels)
        del outs
    return {
        "kernels": kernels,
        "host µs per cache-hit mark_step": statistics.median(step_us[2:]),
        "host µs per launch": statistics.median(launch_us[2:]),
    }


def markdown(meta: dict, counts: list[dict], overhead: dict) -> str:
    lines = [
        f"{meta}",
        "",
        "| model | eager ops/step | lazyfuse kernels/step | fused kernels | ATen calls "
        "| aliased view groups |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in counts:
        lines.append(
            f"| {r['model']} | {r['eager ops']} | {r['lazyfuse kernels']} | {r['fused kernels']} "
            f"| {r['ATen calls']} | {r['aliased view groups']} |"
        )
    lines += [
        "",
        f"cache-hit mark_step of {overhead['kernels']} kernels: "
        f"{overhead['host µs per cache-hit mark_step']:.0f} host µs; "
        f"{overhead['host µs per launch']:.1f} host µs per launch",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--kernels", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true", help="3 rounds of 8 kernels")
    args = parser.parse_args()
    import lazyfuse

    rounds, kernels = (3, 8) if args.smoke else (args.rounds, args.kernels)
    emulate = lazyfuse.config.backing_device().type == "cpu"
    settings = lazyfuse.config.kernel_settings_as(emulate_cuda=True) if emulate else nullcontext()
    with settings:
        counts = [
            {
                "model": name,
                "eager ops": eager_ops_per_step(setup),
                **lazyfuse_kernels_per_step(setup),
            }
            for name, setup in MODELS.items()
        ]
        overhead = host_overhead(kernels, rounds, emulated=emulate)
    meta = {
        "torch": torch.__version__,
        "backing": str(lazyfuse.config.backing_device()),
        "kernels": "emulated CUDA" if emulate else "CUDA",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "host_overhead.json").write_text(
        json.dumps({"meta": meta, "counts": counts, "overhead": overhead}, indent=2)
    )
    table = markdown(meta, counts, overhead)
    (args.out / "host_overhead.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
