"""Training steps on a GPU, side by side: what issue "On a real GPU" asks that
bench/fused_kernels.py does not measure.

    python bench/gpu_training.py [--steps 20] [--out bench/results]
    python bench/gpu_training.py --smoke       # CPU, tiny: checks the script runs

For the MLP, LeNet-5 and Transformer setups of bench/models.py it reports
steps per second and kernels launched per step for eager, torch.compile
(default and reduce-overhead; the model and loss compiled, the optimizer
eager) and lazyfuse; the peak CUDA memory of an Adam step on a 100M-parameter
MLP, eager next to lazyfuse; and the host µs of a cache-hit mark_step of a
100-op graph. Writes gpu_training.json and gpu_training.md. Timings belong
here, never in tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fused_kernels import count_kernels  # noqa: E402
from bench.models import MODELS, TrainingSetup  # noqa: E402

ENGINES = ("eager", "compile", "compile-reduce-overhead", "lazyfuse", "lazyfuse-replay")


class GPT2Block(nn.Module):
    """Pre-norm causal self-attention and a GELU MLP, GPT-2's layer."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, width))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2Shaped(nn.Module):
    """GPT-2 small's shape: 12 layers, 768 wide, 12 heads, vocabulary 50257."""

    def __init__(self, layers: int = 12, width: int = 768, vocab: int = 50257) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(1024, width)
        self.blocks = nn.Sequential(*[GPT2Block(width, width // 64) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.blocks(self.tokens(ids) + self.positions(positions))
        return self.head(self.ln(x)).flatten(0, 1)


class GPT2Setup(TrainingSetup):
    def batches(self, count: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(0)
        batch, seq = self.input_shape
        return [
            (
                torch.randint(0, 50257, (batch, seq), generator=g),
                torch.randint(0, 50257, (batch * seq,), generator=g),
            )
            for _ in range(count)
        ]


GPT2 = GPT2Setup(
    "GPT-2 small's shape (12 layers, 768 wide), sequence 256, batch 8, AdamW",
    GPT2Shaped,
    lambda params: torch.optim.AdamW(params, lr=1e-4),
    (8, 256),
)


def make_step(setup: TrainingSetup, engine: str, device: torch.device) -> Callable[[], None]:
    import lazyfuse

    on = lazyfuse.lazy_device() if engine.startswith("lazyfuse") else device
    torch.manual_seed(0)
    model = setup.make_model().to(on)
    optimizer = setup.make_optimizer(list(model.parameters()))
    if engine == "lazyfuse-replay" and isinstance(optimizer, torch.optim.Adam):
        # The default Adam hands the graph new Python numbers each step (bias
        # corrections), which a replay must not freeze.
        lr = torch.tensor(optimizer.defaults["lr"], device=on)
        optimizer = type(optimizer)(list(model.parameters()), lr=lr, capturable=True)
    x, y = (t.to(on) for t in setup.batches(1)[0])

    def loss_of(inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(inputs), labels)

    if engine.startswith("compile"):
        mode = "reduce-overhead" if engine.endswith("reduce-overhead") else "default"
        loss_of = torch.compile(loss_of, mode=mode)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_of(x, y).backward()
        optimizer.step()
        if engine == "lazyfuse":
            lazyfuse.mark_step()

    step.model, step.optimizer = model, optimizer  # type: ignore[attr-defined]
    if engine == "lazyfuse-replay":
        return lazyfuse.compile(step, replay=True)

    return step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
    else:
        import lazyfuse

        lazyfuse.wait_device_ops()


def steps_per_second(
    step: Callable[[], None], steps: int, device: torch.device, windows: int = 1
) -> tuple[float, list[float], int]:
    """The median rate of `windows` back-to-back windows of `steps` steps,
    each window's rate, and the garbage collections of Python's oldest
    generation while they ran: a full collection in a 20-step window of a
    1.5 ms step is the kind of pause that makes one reading disagree."""
    for _ in range(4):  # a replayed step captures on its first calls
        step()
    synchronize(device)
    full_collections = gc.get_stats()[2]["collections"]
    rates = []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        rates.append(steps / (time.perf_counter() - start))
    return statistics.median(rates), rates, gc.get_stats()[2]["collections"] - full_collections


def bench_training(
    device: torch.device,
    models: dict[str, TrainingSetup],
    engines: list[str],
    steps: int,
    windows: int = 1,
) -> list[dict]:
    rows = []
    for name, setup in models.items():
        for engine in engines:
            row: dict[str, object] = {"model": name, "engine": engine}
            try:
                step = make_step(setup, engine, device)
                row["steps/s"], windows_read, row["full gcs"] = steps_per_second(
                    step, steps, device, windows
                )
                if windows > 1:
                    row["windows steps/s"] = [round(rate, 1) for rate in windows_read]
                if hasattr(step, "replayed_calls"):
                    row["replayed calls"] = step.replayed_calls
                    row["graph launches"] = step.graph_launches
                    if step.graph_launches == 0:
                        row["not one graph"] = step.graph_reason
                if device.type == "cuda":
                    row["kernels/step"] = count_kernels(step)
            except Exception as error:  # noqa: BLE001 - one engine's failure is a result
                row["error"] = f"{type(error).__name__}: {str(error)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def adam_peak_memory(width: int, layers: int) -> dict[str, object]:
    """Peak CUDA bytes of one Adam step once its state is allocated: eager,
    a traced lazyfuse step, and a replayed one (a CUDA graph launch from its
    fourth call, whose memory pool holds the results it copies home)."""
    result: dict[str, object] = {"parameters": layers * (width * width + width)}
    import lazyfuse

    for engine in ("eager", "lazyfuse", "lazyfuse-replay"):
        result.update(_adam_step_peak(engine, width, layers))
        gc.collect()  # the replayed step's graph and its pool
        lazyfuse.mark_step()
        torch.cuda.empty_cache()
    return result


def _adam_step_peak(engine: str, width: int, layers: int) -> dict[str, object]:
    import lazyfuse

    on = lazyfuse.lazy_device() if engine.startswith("lazyfuse") else torch.device("cuda")
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(on)
    if engine == "lazyfuse-replay":
        lr = torch.tensor(1e-4, device=on)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, capturable=True)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(64, width, device=on)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()
        if engine == "lazyfuse":
            lazyfuse.mark_step()

    run = lazyfuse.compile(step, replay=True) if engine == "lazyfuse-replay" else step
    calls = 6 if engine == "lazyfuse-replay" else 2
    for attempt in range(calls):
        if attempt == calls - 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        run()
    torch.cuda.synchronize()
    result: dict[str, object] = {
        f"{engine} peak MiB": torch.cuda.max_memory_allocated() / 2**20,
        f"{engine} reserved MiB": torch.cuda.max_memory_reserved() / 2**20,
    }
    if engine == "lazyfuse-replay":
        result["graph launches"] = run.graph_launches  # type: ignore[attr-defined]
    return result


def cache_hit_mark_step_us(nodes: int, rounds: int) -> float:
    """Host µs of mark_step for a graph already compiled: hashing, cache
    lookup, binding and launching, not the device's run time."""
    import lazyfuse

    x = torch.randn(16, device=lazyfuse.lazy_device())
    lazyfuse.mark_step()
    samples = []
    for _ in range(rounds + 3):
        y = x
        for k in range(nodes):
            y = y * 1.0001 if k % 2 else y + 0.5
        start = time.perf_counter()
        lazyfuse.mark_step()
        samples.append(time.perf_counter() - start)
        lazyfuse.wait_device_ops()
        del y
    return statistics.median(samples[3:]) * 1e6


def markdown(meta: dict, rows: list[dict], memory: dict | None, mark_step_us: float) -> str:
    lines = [f"{meta}", "", "| model | engine | steps/s | kernels/step |", "|---|---|---:|---:|"]
    for r in rows:
        rate = f"{r['steps/s']:.1f}" if "steps/s" in r else r.get("error", "")
        lines.append(f"| {r['model']} | {r['engine']} | {rate} | {r.get('kernels/step', '')} |")
    if memory:
        lines += [
            "",
            "| Adam step, parameters | eager peak MiB | lazyfuse peak MiB "
            "| replayed (one graph) peak MiB |",
            "|---:|---:|---:|---:|",
            f"| {memory['parameters']:,} | {memory['eager peak MiB']:.0f} "
            f"| {memory['lazyfuse peak MiB']:.0f} "
            f"| {memory['lazyfuse-replay peak MiB']:.0f} |",
        ]
    lines += ["", f"cache-hit mark_step of a 100-op graph: {mark_step_us:.1f} host µs"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--windows", type=int, default=1, help="time this many windows of --steps; report each"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--smoke", action="store_true", help="CPU, eager and lazyfuse, 2 steps")
    parser.add_argument("--models", default=",".join(MODELS), help=f"of {[*MODELS, 'gpt2']}")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"of {list(ENGINES)}")
    parser.add_argument("--no-memory", action="store_true", help="skip the Adam peak memory")
    args = parser.parse_args()
    import lazyfuse

    models = {name: {**MODELS, "gpt2": GPT2}[name] for name in args.models.split(",")}
    engines = args.engines.split(",")
    if args.smoke:
        device, steps = torch.device("cpu"), 2
        engines = [e for e in engines if not e.startswith("compile")]
    elif torch.cuda.is_available():
        device, steps = torch.device("cuda"), args.steps
    else:
        print("bench/gpu_training.py needs a CUDA GPU (or --smoke); none is visible to torch.")
        return 0
    meta = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "backing": lazyfuse._C._backing_device(),
        "steps": steps,
        "windows": args.windows,
    }
    rows = bench_training(device, models, engines, steps, args.windows)
    memory = adam_peak_memory(4096, 6) if device.type == "cuda" and not args.no_memory else None
    mark_step_us = cache_hit_mark_step_us(100, 3 if args.smoke else 50)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"meta": meta, "training": rows, "adam_memory": memory, "mark_step_us": mark_step_us}
    (args.out / "gpu_training.json").write_text(json.dumps(report, indent=2))
    table = markdown(meta, rows, memory, mark_step_us)
    (args.out / "gpu_training.md").write_text(table)
    print(table)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
