"""Training steps of eager and lazyfuse alternating in one process.

    python bench/alternating.py --models mlp,lenet5,transformer
    python bench/alternating.py --replay   # also lazyfuse.compile(step, replay=True)
    LAZYFUSE_TRANSPOSED_MATMULS=0 python bench/alternating.py   # the same, one rewrite off

The harness (python -m bench) runs each engine in its own process. On a
shared VM whose speed drifts by 30 % between minutes, two processes can land
in different minutes. Here eager and lazyfuse take turns in blocks of steps
(bench/models.py's setups, on the CPU backing device), so both meet the same
drift, and the ratio of their medians is the figure. It also reports the
median time lazyfuse's graph took to run (LazyFuseExecute), without the
trace. To compare two lazyfuse settings, run the script once under each.
With --replay a third engine takes its turn: the whole step replayed, its
Adam capturable with a tensor lr (the default Adam's bias corrections are
new Python numbers each step, which a replay must not freeze), as the
harness's lazyfuse-replay-cpu engine runs it.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lazyfuse  # noqa: E402
from bench.models import MODELS  # noqa: E402


def training_step(
    model_name: str, device: torch.device, replay: bool = False
) -> Callable[[], None]:
    setup = MODELS[model_name]
    torch.manual_seed(0)
    model = setup.make_model().to(device)
    optimizer = setup.make_optimizer(list(model.parameters()))
    if replay and isinstance(optimizer, torch.optim.Adam):
        lr = torch.tensor(optimizer.defaults["lr"], device=device)
        optimizer = type(optimizer)(list(model.parameters()), lr=lr, capturable=True)
    batches = [(x.to(device), y.to(device)) for x, y in setup.batches()]
    lazy = device.type == "lazy"
    count = 0

    def train(x: torch.Tensor, y: torch.Tensor) -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    replayed = lazyfuse.compile(train, replay=True) if replay else None

    def step() -> None:
        nonlocal count
        x, y = batches[count % len(batches)]
        count += 1
        if replayed is not None:
            replayed(x, y)
            return
        train(x, y)
        if lazy:
            lazyfuse.mark_step()

    return step


def median_step_us(step: Callable[[], None], steps: int) -> float:
    lazyfuse.mark_step(wait=True)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    lazyfuse.mark_step(wait=True)
    return (time.perf_counter() - start) / steps * 1e6


def measure(
    model_name: str, rounds: int, steps: int, warmup: int, replay: bool = False
) -> dict[str, float]:
    engines = {
        "eager": training_step(model_name, torch.device("cpu")),
        "lazyfuse": training_step(model_name, lazyfuse.lazy_device()),
    }
    if replay:
        engines["replay"] = training_step(model_name, lazyfuse.lazy_device(), replay=True)
    for step in engines.values():
        for _ in range(warmup):
            step()
    lazyfuse.mark_step(wait=True)
    lazyfuse.metrics.clear_metrics()
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, step in engines.items():
            times[name].append(median_step_us(step, steps))
    eager, lazy = statistics.median(times["eager"]), statistics.median(times["lazyfuse"])
    # The graph's run alone, without the trace: what a change to planning or
    # kernels moves, with less of the trace's noise.
    data = lazyfuse.metrics.metric_data("LazyFuseExecute")
    runs = [value / 1e3 for _, value in data[2]] if data else []
    figures = {
        "eager_us": eager,
        "lazyfuse_us": lazy,
        "lazyfuse_speed_vs_eager": eager / lazy,
        "lazyfuse_execute_us": statistics.median(runs) if runs else 0.0,
    }
    if replay:
        replayed = statistics.median(times["replay"])
        figures["replay_us"] = replayed
        figures["replay_speed_vs_eager"] = eager / replayed
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp,lenet5,transformer")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--smoke", action="store_true", help="2 rounds of 3 steps")
    parser.add_argument("--out", type=Path, help="write alternating.json here")
    parser.add_argument("--replay", action="store_true", help="also time the replayed step")
    options = parser.parse_args()
    if lazyfuse.config.backing_device().type != "cpu":
        print("bench/alternating.py times the CPU backing device", file=sys.stderr)
        return 2
    rounds, steps, warmup = (2, 3, 2) if options.smoke else (options.rounds, options.steps, 20)
    report = {}
    for name in options.models.split(","):
        report[name] = measure(name, rounds, steps, warmup, options.replay)
        figures = report[name]
        print(
            f"{name}: eager {figures['eager_us']:.0f} us, lazyfuse {figures['lazyfuse_us']:.0f} us"
            f" a step; lazyfuse at {figures['lazyfuse_speed_vs_eager']:.2f}x eager's speed;"
            f" its graph runs {figures['lazyfuse_execute_us']:.0f} us of the step"
        )
        if options.replay:
            print(
                f"{name}: replayed {figures['replay_us']:.0f} us a step, at"
                f" {figures['replay_speed_vs_eager']:.2f}x eager's speed"
            )
    if options.out is not None:
        options.out.mkdir(parents=True, exist_ok=True)
        (options.out / "alternating.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
