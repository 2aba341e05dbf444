"""What data parallelism costs per step: DDP over 2 Gloo ranks on this
machine against one process, for eager CPU and for lazyfuse, one core per
rank.

    python bench/ddp_overhead.py [--steps 100] [--repeats 3] [--models mlp,lenet5] [--out DIR]
    python bench/ddp_overhead.py --smoke      # a few steps: checks the script runs

Each engine trains each bench/models.py setup with DDP, first in 1 process,
then in 2 (the same per-rank batch, so each rank does the same work), and
times a run of steps as a training loop sees it: lazyfuse's mark_step()
returns before its graph has run. The overhead is the 2-rank step's time
minus the 1-rank step's: the
all-reduces and the waiting on the slower rank. The target (issue "Data-
parallel training on torch.distributed") is lazyfuse's overhead at most
eager's plus 10%. Each rank is pinned to its own core, so neither engine's
1-rank run borrows the core its partner needs in the 2-rank run.

Writes ddp_overhead.json and ddp_overhead.md. Timings belong here, never in
tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.models import MODELS  # noqa: E402

WARMUP = 4  # a replayed step captures on its first calls
# lazyfuse-replay: a replayed step (lazyfuse.compile(replay=True)) that
# averages gradients with lazyfuse.distributed.optimizer_step, not DDP.
ENGINES = ("eager", "lazyfuse", "lazyfuse-replay")


def join_gloo_on_own_core(rank: int, world: int, store: str) -> None:
    """Joins the Gloo group on loopback, pinned to one core with one thread.
    One core per rank, in both runs: a 1-rank run must not borrow the core
    its partner uses in the 2-rank run, or contention counts as overhead."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[rank % len(cores)]})
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )


def rank_main(
    rank: int, world: int, store: str, engine: str, model: str, steps: int, out: str
) -> None:
    join_gloo_on_own_core(rank, world, store)
    if engine.startswith("lazyfuse"):
        import lazyfuse

        device = lazyfuse.lazy_device()
        mark_step, finish = lazyfuse.mark_step, lazyfuse.wait_device_ops
    else:
        device = torch.device("cpu")

        def mark_step() -> None:
            pass

        finish = mark_step

    setup = MODELS[model]
    torch.manual_seed(0)
    network = setup.make_model().to(device)
    optimizer = setup.make_optimizer(list(network.parameters()))
    batches = [(x.to(device), y.to(device)) for x, y in setup.batches(2)]
    if engine == "lazyfuse-replay":
        # DDP's reducer keeps its buckets in C++, out of a replay's reach: the
        # replayed step averages gradients with lazyfuse.distributed instead.
        @lazyfuse.compile(replay=True)
        def replayed_step(x: torch.Tensor, y: torch.Tensor) -> None:
            optimizer.zero_grad()
            F.cross_entropy(network(x), y).backward()
            lazyfuse.distributed.optimizer_step(optimizer)

        def train(count: int) -> None:
            for step in range(count):
                replayed_step(*batches[step % len(batches)])
            finish()
    else:
        ddp = DistributedDataParallel(network)

        def train(count: int) -> None:
            for step in range(count):
                x, y = batches[step % len(batches)]
                optimizer.zero_grad()
                F.cross_entropy(ddp(x), y).backward()
                optimizer.step()
                mark_step()
            finish()

    train(WARMUP)
    dist.barrier()
    # A training loop's throughput: mark_step() returns before its graph has
    # run, so the next step's trace overlaps it, as in a user's loop.
    start = time.perf_counter()
    train(steps)
    seconds_per_step = (time.perf_counter() - start) / steps
    if rank == 0:
        Path(out).write_text(json.dumps(seconds_per_step))
    dist.barrier()
    dist.destroy_process_group()
    # Eager DDP over Gloo sometimes aborts in static destructors at exit
    # ("terminate called without an active exception", no lazyfuse in the
    # process); the results are written, so skip them.
    os._exit(0)


def step_time(engine: str, model: str, world: int, steps: int, repeats: int) -> float:
    """Seconds per step, the lowest over `repeats` fresh launches: two
    processes on a small shared machine are noisy, and noise only adds."""
    return min(launch(engine, model, world, steps) for _ in range(repeats))


def launch(engine: str, model: str, world: int, steps: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "seconds.json")
        mp.start_processes(
            rank_main,
            args=(world, os.path.join(directory, "store"), engine, model, steps, out),
            nprocs=world,
            start_method="spawn",
        )
        return float(json.loads(Path(out).read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="mlp,lenet5")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true", help="a few steps, one model")
    args = parser.parse_args()
    steps = 3 if args.smoke else args.steps
    repeats = 1 if args.smoke else args.repeats
    models = ["mlp"] if args.smoke else args.models.split(",")
    rows = []
    for model in models:
        row: dict[str, object] = {"model": model}
        for engine in ENGINES:
            one = step_time(engine, model, 1, steps, repeats)
            two = step_time(engine, model, 2, steps, repeats)
            row[f"{engine} 1 rank ms"] = round(one * 1e3, 3)
            row[f"{engine} 2 ranks ms"] = round(two * 1e3, 3)
            row[f"{engine} overhead ms"] = round((two - one) * 1e3, 3)
        eager_overhead = float(row["eager overhead ms"])  # type: ignore[arg-type]
        for engine in ENGINES[1:]:
            lazy_overhead = float(row[f"{engine} overhead ms"])  # type: ignore[arg-type]
            row[f"{engine} ÷ eager overhead"] = (
                round(lazy_overhead / eager_overhead, 2) if eager_overhead > 0 else None
            )
            row[f"{engine} target met"] = lazy_overhead <= max(eager_overhead, 0.0) * 1.1
        rows.append(row)
        print(row, flush=True)
    write_rows(args.out, "ddp_overhead", {"steps": steps, "rows": rows})


def write_rows(out: Path, name: str, report: dict) -> None:
    """Writes `report` as <name>.json, and its rows as a table in <name>.md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    rows = report["rows"]
    columns = list(rows[0])
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows),
    ]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
