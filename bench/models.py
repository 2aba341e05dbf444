"""The training workloads: small models whose steps are host-bound on purpose,
so the lazy device's per-step overhead shows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


class LeNet5(nn.Module):
    """LeCun et al. 1998, with ReLU and max pooling, on 28x28 grey images."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class EncoderClassifier(nn.Module):
    """One Transformer encoder layer over a sequence, mean-pooled into a class."""

    def __init__(self, d_model: int = 128, heads: int = 4, ff: int = 256) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d_model, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x).mean(dim=1))


@dataclass(frozen=True)
class TrainingSetup:
    title: str
    make_model: Callable[[], nn.Module]
    make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer]
    input_shape: tuple[int, ...]

    def batches(self, count: int = 4) -> list[Batch]:
        g = torch.Generator().manual_seed(0)
        return [
            (
                torch.randn(self.input_shape, generator=g),
                torch.randint(0, 10, (self.input_shape[0],), generator=g),
            )
            for _ in range(count)
        ]


def _sgd(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def _adam(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3)


def _mlp() -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(784, 256),
        nn.ReLU(),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Linear(256, 10),
    )


MODELS: dict[str, TrainingSetup] = {
    "mlp": TrainingSetup("MLP 784-256-256-10, batch 64, SGD momentum", _mlp, _sgd, (64, 1, 28, 28)),
    "lenet5": TrainingSetup("LeNet-5, batch 32, SGD momentum", LeNet5, _sgd, (32, 1, 28, 28)),
    "transformer": TrainingSetup(
        "Transformer encoder layer (d=128, 4 heads, ff 256), seq 32, batch 8, Adam",
        EncoderClassifier,
        _adam,
        (8, 32, 128),
    ),
}


def cycle(batches: list[Batch]) -> Iterator[Batch]:
    while True:
        yield from batches
