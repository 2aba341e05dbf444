"""Can a replayed step be one CUDA graph? A probe for issue "Trace once,
replay every step", item 5, before lazyfuse captures graphs itself.

    python bench/cuda_graph_probe.py [--steps 50] [--out DIR]
    python bench/cuda_graph_probe.py --smoke   # CPU: the twin comparison only

For the MLP, LeNet-5 and Transformer setups of bench/models.py it wraps one
replayed call (`lazyfuse.compile(step, replay=True)`) in `torch.cuda.graph`
and reports, per model:
- whether the capture ran, and as a replay (the step's Python not run);
- whether K graph launches leave the parameters a twin model gets from K
  plain replays (bitwise, then the largest difference): a replay binds the
  data its tensors hold *now*, and a graph keeps the addresses it saw at
  capture, so they agree only while every result lands where the next call
  reads it (donation in place);
- steps per second: eager, plain replay, graph launches.

The step reads one fixed batch, as a graph needs static inputs. Nothing here
is lazyfuse's own CUDA-graph support; the figures say whether building it on
the replay path pays, and what breaks first. Timings belong here, never in
tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gpu_training import make_step, steps_per_second, synchronize  # noqa: E402
from bench.models import MODELS, TrainingSetup  # noqa: E402


def updated_tensors(params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> list:
    state = [t for entry in optimizer.state.values() for t in entry.values() if torch.is_tensor(t)]
    return params + state


def moved_by_a_call(call: Callable[[], None], tensors: list[torch.Tensor]) -> list[tuple]:
    """The shapes of `tensors` that one call leaves in new memory: a graph
    would go on reading their old memory."""
    import lazyfuse

    before = [lazyfuse.debug.data_address(t) for t in tensors]
    call()
    after = [lazyfuse.debug.data_address(t) for t in tensors]
    return [tuple(t.shape) for t, a, b in zip(tensors, before, after, strict=True) if a != b]


def probe(name: str, setup: TrainingSetup, steps: int, smoke: bool) -> dict[str, object]:
    device = torch.device("cpu" if smoke else "cuda")
    row: dict[str, object] = {"model": name}
    warm_up = 6  # two traced calls capture; the rest replay
    plain = make_step(setup, "lazyfuse-replay", device)
    graphed = make_step(setup, "lazyfuse-replay", device)
    plain_params = list(plain.fn.model.parameters())
    graphed_params = list(graphed.fn.model.parameters())
    for _ in range(warm_up):
        plain()
        graphed()
    row["replaying"] = graphed.replayed_calls > 0
    if not row["replaying"]:
        row["error"] = f"never replayed: {graphed.last_reason}"
        return row
    row["moved by a replay"] = moved_by_a_call(
        plain, updated_tensors(plain_params, plain.fn.optimizer)
    )
    graphed()  # the twins stay in step
    replays_before = graphed.replayed_calls
    launch: Callable[[], None]
    if smoke:
        launch = graphed  # no graph on the CPU: checks the comparison itself
        row["captured"] = "skipped (--smoke)"
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            graphed()  # torch's advice: one call on the capture's stream first
            plain()  # and the twin keeps its count
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                graphed()
        except Exception as error:  # noqa: BLE001 - what breaks first is the finding
            row["captured"] = False
            row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
            return row
        row["captured"] = True
        launch = graph.replay
    row["capture was a replay"] = graphed.replayed_calls == replays_before + (0 if smoke else 2)
    checked = 3
    for _ in range(checked):
        launch()
        plain()
    synchronize(device)
    differences = [
        (a.cpu().double() - b.cpu().double()).abs().max().item()
        for a, b in zip(plain_params, graphed_params, strict=True)
    ]
    row["bitwise after 3"] = all(d == 0 for d in differences)
    row["max difference after 3"] = max(differences)
    row["replay steps/s"] = steps_per_second(plain, steps, device)
    row["graph steps/s"] = steps_per_second(launch, steps, device)
    if not smoke:
        row["eager steps/s"] = steps_per_second(make_step(setup, "eager", device), steps, device)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true", help="CPU, no graph: the comparison only")
    args = parser.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        print("bench/cuda_graph_probe.py needs a CUDA GPU (or --smoke); none is visible.")
        return 0
    rows = []
    for name in args.models.split(","):
        try:
            row = probe(name, MODELS[name], 3 if args.smoke else args.steps, args.smoke)
        except Exception as error:  # noqa: BLE001 - one model's failure is a result
            row = {"model": name, "error": f"{type(error).__name__}: {str(error)[:300]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_graph_probe.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
