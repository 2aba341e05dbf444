"""What the replay tests share: seeded batches, a training run traced or
replayed, and the bit-for-bit comparison of the two."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import lazyfuse

DEV = lazyfuse.lazy_device()
STEPS = 20

Build = Callable[[], tuple[torch.nn.Module, Any, Callable[..., Any]]]


def make_batches(
    n: int, x_shape: tuple[int, ...], y_shape: tuple[int, ...], classes: int = 0
) -> list:
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        x = torch.randn(x_shape, generator=gen)
        y = (
            torch.randint(0, classes, y_shape, generator=gen)
            if classes
            else torch.randn(y_shape, generator=gen)
        )
        out.append((x, y))
    return out


def training_state(model: torch.nn.Module, opt: Any) -> list[torch.Tensor]:
    tensors = [t.detach().cpu() for t in model.state_dict().values()]
    if opt is not None:
        for state in opt.state_dict()["state"].values():
            tensors += [v.detach().cpu() for v in state.values() if isinstance(v, torch.Tensor)]
    return tensors


def run(
    build: Build, batches: list, replay: bool, between: Callable[[int, Any], None] | None = None
):
    torch.manual_seed(0)
    model, opt, step = build()
    calls = [0]

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return step(*args)

    fn = lazyfuse.compile(counted, replay=True) if replay else lazyfuse.compile(counted)
    torch.manual_seed(2)  # dropout draws from here on
    losses = []
    for i, (x, y) in enumerate(batches):
        losses.append(fn(x.to(DEV), y.to(DEV)).detach().cpu())
        if between is not None:
            between(i, (model, opt))
    return losses, training_state(model, opt), calls[0], fn


def assert_replays_like_traced(build: Build, batches: list, between=None, min_replays: int = 10):
    traced_losses, traced_state, _, _ = run(build, batches, False, between)
    losses, state, calls, fn = run(build, batches, True, between)
    for step, (a, b) in enumerate(zip(traced_losses, losses, strict=True)):
        assert torch.equal(a, b) or (a.isnan().all() and b.isnan().all()), (
            f"loss differs at step {step}: {a} vs {b}"
        )
    assert len(traced_state) == len(state)
    for a, b in zip(traced_state, state, strict=True):
        assert torch.equal(a, b)
    assert fn.replayed_calls >= min_replays, fn.last_reason
    assert calls == fn.traced_calls  # the body runs only when traced
    return fn


def training_step(
    model: torch.nn.Module, opt: Any, loss_fn: Callable[..., torch.Tensor] = F.mse_loss
) -> Callable[..., torch.Tensor]:
    """zero_grad, loss, backward, optimizer step; returns the loss."""

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def mlp() -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 4)
    ).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt, training_step(model, opt)


def cnn() -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 3 * 3, 10),
    ).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return model, opt, training_step(model, opt, F.cross_entropy)


def transformer(dropout: float = 0.1) -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Sequential(
        torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=dropout, batch_first=True),
        torch.nn.Linear(16, 4),
    ).to(DEV)
    opt = torch.optim.AdamW(
        model.parameters(), lr=torch.tensor(1e-2, device=DEV), capturable=True, weight_decay=0.01
    )

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x)[:, 0], y)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step
