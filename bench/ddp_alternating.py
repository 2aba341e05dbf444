"""What the all-reduce costs a data-parallel step, measured inside one
2-rank launch, with the engines taking turns.

    python bench/ddp_alternating.py [--rounds 15] [--steps 20] [--models mlp,lenet5] [--out DIR]
    python bench/ddp_alternating.py --smoke   # 2 rounds of 3 steps: checks the script runs

bench/ddp_overhead.py subtracts a 1-rank launch from a 2-rank launch, and on a
shared 2-core VM those land in different minutes: two of its runs read the
same engine's overhead 1.06 and 3.31 ms. Here both ranks build, for each
engine, the step that communicates and the same step that does not (DDP
under `no_sync()`; a replayed step with `optimizer.step()` in place of
`lazyfuse.distributed.optimizer_step`). Each round times a block of each,
engine after engine, so every engine meets the same drift and the same
partner rank. A round's overhead is the communicating step's time minus
the silent one's; the figures are medians over rounds, and the ratio that
counts (issue "Data-parallel training on torch.distributed": at most 1.1)
is the median of the rounds' lazyfuse ÷ eager overheads.

Writes ddp_alternating.json and ddp_alternating.md. Timings belong here,
never in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ddp_overhead import ENGINES, WARMUP, join_gloo_on_own_core, write_rows  # noqa: E402
from bench.models import MODELS  # noqa: E402


def make_steps(engine: str, model: str) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """(communicating, silent): each runs `count` steps and waits for them."""
    import lazyfuse

    lazy = engine.startswith("lazyfuse")
    device = lazyfuse.lazy_device() if lazy else torch.device("cpu")
    setup = MODELS[model]
    batches = [(x.to(device), y.to(device)) for x, y in setup.batches(2)]

    def finish() -> None:
        if lazy:
            lazyfuse.wait_device_ops()

    def variant(communicates: bool) -> Callable[[int], None]:
        torch.manual_seed(0)
        network = setup.make_model().to(device)
        optimizer = setup.make_optimizer(list(network.parameters()))
        if engine == "lazyfuse-replay":

            @lazyfuse.compile(replay=True)
            def replayed(x: torch.Tensor, y: torch.Tensor) -> None:
                optimizer.zero_grad()
                F.cross_entropy(network(x), y).backward()
                if communicates:
                    lazyfuse.distributed.optimizer_step(optimizer)
                else:
                    optimizer.step()

            def run_replayed(count: int) -> None:
                for step in range(count):
                    replayed(*batches[step % len(batches)])
                finish()

            return run_replayed
        ddp = DistributedDataParallel(network)

        def run(count: int) -> None:
            for step in range(count):
                x, y = batches[step % len(batches)]
                optimizer.zero_grad()
                # no_sync() keeps DDP's forward and hooks but skips the all-reduce.
                with contextlib.nullcontext() if communicates else ddp.no_sync():
                    F.cross_entropy(ddp(x), y).backward()
                optimizer.step()
                if lazy:
                    lazyfuse.mark_step()
            finish()

        return run

    return variant(True), variant(False)


def rank_main(rank: int, store: str, model: str, rounds: int, steps: int, out: str) -> None:
    join_gloo_on_own_core(rank, 2, store)
    pairs = {engine: make_steps(engine, model) for engine in ENGINES}
    for communicating, silent in pairs.values():
        communicating(WARMUP)
        silent(WARMUP)
    overheads: dict[str, list[float]] = {engine: [] for engine in ENGINES}
    for _ in range(rounds):
        for engine, (communicating, silent) in pairs.items():
            seconds = []
            for run in (communicating, silent):
                dist.barrier()
                start = time.perf_counter()
                run(steps)
                seconds.append((time.perf_counter() - start) / steps)
            overheads[engine].append(seconds[0] - seconds[1])
    if rank == 0:
        Path(out).write_text(json.dumps(overheads))
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)  # as bench/ddp_overhead.py: Gloo may abort in static destructors


def measure(model: str, rounds: int, steps: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "overheads.json")
        mp.start_processes(
            rank_main,
            args=(os.path.join(directory, "store"), model, rounds, steps, out),
            nprocs=2,
            start_method="spawn",
        )
        return json.loads(Path(out).read_text())


def summarize(model: str, overheads: dict[str, list[float]]) -> dict[str, object]:
    row: dict[str, object] = {"model": model}
    for engine in ENGINES:
        row[f"{engine} overhead ms"] = round(statistics.median(overheads[engine]) * 1e3, 3)
    for engine in ENGINES[1:]:
        ratios = [
            lazy / eager
            for lazy, eager in zip(overheads[engine], overheads["eager"], strict=True)
            if eager > 0
        ]
        ratio = statistics.median(ratios) if ratios else None
        row[f"{engine} ÷ eager"] = round(ratio, 2) if ratio is not None else None
        if len(ratios) >= 4:
            quartiles = statistics.quantiles(ratios, n=4)
            row[f"{engine} ÷ eager, quartiles"] = f"{quartiles[0]:.2f}-{quartiles[2]:.2f}"
        row[f"{engine} target met"] = ratio is not None and ratio <= 1.1
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--models", default="mlp,lenet5")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true", help="2 rounds of 3 steps, the MLP")
    args = parser.parse_args()
    rounds, steps = (2, 3) if args.smoke else (args.rounds, args.steps)
    models = ["mlp"] if args.smoke else args.models.split(",")
    rows = []
    for model in models:
        rows.append(summarize(model, measure(model, rounds, steps)))
        print(rows[-1], flush=True)
    write_rows(args.out, "ddp_alternating", {"rounds": rounds, "steps": steps, "rows": rows})


if __name__ == "__main__":
    main()
