"""LeNet-5 on the lazy device, next to eager CPU (the Ratex walkthrough).

    python -m lazyfuse.demo

Trains LeNet-5 for 10 epochs on fake data made with torch, once eagerly on the
CPU and once on lazyfuse.lazy_device(), and prints the loss per epoch of both,
a per-phase timing table for the first 3 mini-batches, and a metrics summary.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

import lazyfuse

EPOCHS = 10
BATCHES_PER_EPOCH = 4
BATCH_SIZE = 8
TIMED_BATCHES = 3
PHASES = [
    "outputs = model(inputs)",
    "loss = criterion(outputs, labels)",
    "loss.backward()",
    "optimizer.step()",
    "lazyfuse.mark_step()",
]


class LeNet5(nn.Module):
    """LeNet-5 as in ../shared/seeds/ratex-lazy-tensor-lenet.md."""

    def __init__(self, input_shape: int = 28, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5, padding=2, bias=False)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5, bias=False)
        self.linear1 = nn.Linear(((input_shape // 2 - 4) // 2) ** 2 * 16, 120)
        self.linear2 = nn.Linear(120, 84)
        self.linear3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.avg_pool2d(torch.relu(self.conv1(x)), (2, 2), (2, 2))
        out = F.avg_pool2d(torch.relu(self.conv2(out)), (2, 2), (2, 2))
        out = torch.flatten(out, 1)
        return self.linear3(self.linear2(self.linear1(out)))


def criterion(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    return F.nll_loss(F.log_softmax(pred, dim=-1), true)


def fake_data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """torchvision has no CPU build to depend on, so the images are made here."""
    g = torch.Generator().manual_seed(0)
    return [
        (
            torch.rand(BATCH_SIZE, 1, 28, 28, generator=g),
            torch.randint(0, 10, (BATCH_SIZE,), generator=g),
        )
        for _ in range(BATCHES_PER_EPOCH)
    ]


def timed(times: list[float], fn: Callable[[], object]) -> object:
    start = time.perf_counter()
    result = fn()
    times.append((time.perf_counter() - start) * 1e3)
    return result


def train(model: nn.Module, device: torch.device) -> tuple[list[float], list[list[float]]]:
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = fake_data()
    epoch_losses: list[float] = []
    phase_times: list[list[float]] = []
    lazy = device.type == "lazy"
    for _ in range(EPOCHS):
        running = 0.0
        for inputs, labels in data:
            times: list[float] = []
            optimizer.zero_grad()
            inputs, labels = inputs.to(device), labels.to(device)
            outputs = timed(times, lambda x=inputs: model(x))
            loss = timed(times, lambda out=outputs, y=labels: criterion(out, y))
            timed(times, loss.backward)
            timed(times, optimizer.step)
            timed(times, lazyfuse.mark_step if lazy else (lambda: None))
            if len(phase_times) < TIMED_BATCHES:
                phase_times.append(times)
            running += loss.item() * inputs.size(0)
        epoch_losses.append(running / (BATCH_SIZE * BATCHES_PER_EPOCH))
    return epoch_losses, phase_times


def main() -> None:
    torch.manual_seed(0)
    model = LeNet5()
    backing = lazyfuse.config.backing_device()
    print(f"lazyfuse demo: LeNet-5, {EPOCHS} epochs, backing device {backing}")
    lazyfuse.metrics.reset()
    eager_losses, eager_times = train(copy.deepcopy(model), torch.device("cpu"))
    lazy_losses, lazy_times = train(model, lazyfuse.lazy_device())

    print(f"\n{'epoch':>7} {'eager cpu loss':>15} {'lazyfuse loss':>14}")
    for epoch, (e, z) in enumerate(zip(eager_losses, lazy_losses, strict=True)):
        print(f"{epoch:>3}/{EPOCHS - 1:<3} {e:>15.4f} {z:>14.4f}")

    for batch in range(TIMED_BATCHES):
        print(f"\nMini-batch {batch + 1} (ms)     {'PyTorch CPU':>12} {'lazyfuse':>10}")
        for phase, e, z in zip(PHASES, eager_times[batch], lazy_times[batch], strict=True):
            eager_cell = "N/A" if phase.startswith("lazyfuse") else f"{e:.2f}"
            print(f"{phase:<36} {eager_cell:>10} {z:>10.2f}")

    counters = lazyfuse.metrics.counters()
    print("\nmetrics summary")
    for name in ["MarkStep", "UncachedCompile", "CachedCompile", lazyfuse.metrics.GRAPHS_EXECUTED]:
        print(f"  {name:<24} {counters.get(name, 0)}")
    steps = lazyfuse.metrics.steps_per_graph()
    if steps:
        print(f"  {'steps per graph':<24} {int(steps[-1])}")
    fallbacks = lazyfuse.metrics.fallback_counts()
    print(f"  {'eager fallbacks':<24} {fallbacks or 'none'}")
    worst = max(abs(e - z) for e, z in zip(eager_losses, lazy_losses, strict=True))
    print(f"\nlargest loss difference lazy vs eager: {worst:.2e}")


if __name__ == "__main__":
    main()
