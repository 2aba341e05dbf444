"""A replayed step as one CUDA graph (csrc/ltc/static_step.h): a graph keeps
the memory it was captured with, so arguments are copied into the step's own
buffers, updated tensors take their results in their own memory, and results
with no such home are copied out. On a CUDA backing device the tests launch
real graphs; elsewhere LAZYFUSE_CUDA_GRAPHS=emulate runs the same static
memory with the step's own run where a graph would launch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from replay_helpers import (
    DEV,
    STEPS,
    assert_replays_like_traced,
    cnn,
    make_batches,
    training_step,
    transformer,
)

import lazyfuse

pytestmark = pytest.mark.usefixtures("synchronous_steps")

ON_CUDA = lazyfuse.config.backing_device().type == "cuda"


@pytest.fixture(autouse=True)
def graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", "auto" if ON_CUDA else "emulate")
    yield


def _mlp() -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(
        DEV
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt, training_step(model, opt)


def _transformer() -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    return transformer(dropout=0.0)  # dropout's seeds keep a step from being one graph


@pytest.mark.parametrize(
    "build, x_shape, y_shape, classes",
    [
        (_mlp, (6, 8), (6, 4), 0),
        (cnn, (4, 1, 8, 8), (4,), 10),
        (_transformer, (3, 5, 16), (3, 4), 0),
    ],
    ids=["mlp_sgd_momentum", "cnn_batchnorm", "transformer_capturable_adamw"],
)
def test_training_steps_launched_as_graphs_match_traced_steps(
    build: Any, x_shape: tuple[int, ...], y_shape: tuple[int, ...], classes: int
) -> None:
    fn = assert_replays_like_traced(build, make_batches(STEPS, x_shape, y_shape, classes))
    # Traced twice, one plain replay, then every call one launch.
    assert fn.graph_launches >= STEPS - 5, fn.graph_reason


def _launched(fn: Any, batches: list, between: Callable[[int], None] | None = None) -> list:
    losses = []
    for i, (x, y) in enumerate(batches):
        losses.append(fn(x.to(DEV), y.to(DEV)))
        if between is not None:
            between(i)
    return losses


def test_returned_losses_are_not_overwritten_by_later_launches() -> None:
    """A graph writes each launch's results over the last one's memory: a
    loss the user keeps must be a copy."""
    batches = make_batches(10, (6, 8), (6, 4))
    torch.manual_seed(0)
    _, _, step = _mlp()
    kept = _launched(lazyfuse.compile(step), batches)
    torch.manual_seed(0)
    _, _, step = _mlp()
    fn = lazyfuse.compile(step, replay=True)
    launched = _launched(fn, batches)
    assert fn.graph_launches >= 5, fn.graph_reason
    for a, b in zip(kept, launched, strict=True):
        assert torch.equal(a.cpu(), b.cpu())


def test_a_kept_detach_drops_the_graph_and_keeps_its_values() -> None:
    """A launch writes an updated parameter in its own memory; a detach()
    kept by the user shares that memory, so the step replays as usual."""
    torch.manual_seed(0)
    model, _, step = _mlp()
    fn = lazyfuse.compile(step, replay=True)
    weight = model[0].weight
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def keep(i: int) -> None:
        if i == 6:
            held = weight.detach()
            kept.append((held, held.cpu().clone()))

    _launched(fn, make_batches(10, (6, 8), (6, 4)), keep)
    assert fn.graph_launches >= 3, fn.graph_reason
    held, value = kept[0]
    assert torch.equal(held.cpu(), value)
    assert not torch.equal(weight.detach().cpu(), value)  # the steps went on


def test_a_parameter_changed_between_steps_is_read_anew() -> None:
    """An in-place update by the user gives the parameter new memory: the
    graph is dropped, the step replays on the new value, then graphs again."""
    batches = make_batches(12, (6, 8), (6, 4))

    def halve(model: torch.nn.Module) -> Callable[[int], None]:
        def between(i: int) -> None:
            if i == 5:
                with torch.no_grad():
                    model[2].bias.mul_(0.5)

        return between

    results = []
    for replay in (False, True):
        torch.manual_seed(0)
        model, _, step = _mlp()
        fn = lazyfuse.compile(step, replay=True) if replay else lazyfuse.compile(step)
        losses = _launched(fn, batches, halve(model))
        results.append(([loss.cpu() for loss in losses], model[0].weight.detach().cpu()))
    (traced_losses, traced_weight), (losses, weight) = results
    assert all(torch.equal(a, b) for a, b in zip(traced_losses, losses, strict=True))
    assert torch.equal(traced_weight, weight)
    assert fn.graph_launches >= 6, fn.graph_reason


def test_a_step_with_dropout_replays_without_a_graph_and_says_why() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fn = lazyfuse.compile(training_step(model, opt), replay=True)
    _launched(fn, make_batches(8, (4, 8), (4, 8)))
    assert fn.replayed_calls >= 4, fn.last_reason
    assert fn.graph_launches == 0
    assert "random numbers" in fn.graph_reason


def test_graphs_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", "0")
    torch.manual_seed(0)
    _, _, step = _mlp()
    fn = lazyfuse.compile(step, replay=True)
    _launched(fn, make_batches(8, (6, 8), (6, 4)))
    assert fn.replayed_calls >= 4 and fn.graph_launches == 0


def test_an_unknown_graphs_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", "yes")
    with pytest.raises(ValueError, match="LAZYFUSE_CUDA_GRAPHS='yes'"):
        lazyfuse.compile(lambda x: x, replay=True)


def _accumulating_run(replay: bool, batches: list) -> tuple[list, list, Any]:
    """A step without zero_grad (gradients accumulate), with zero_grad()
    between steps 6 and 7, the old gradients kept by the user."""
    torch.manual_seed(0)
    model, opt, _ = _mlp()
    kept: list[torch.Tensor | None] = []

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    def reset(i: int) -> None:
        if i == 6:
            kept.extend(p.grad for p in model.parameters())
            opt.zero_grad()

    fn = lazyfuse.compile(step, replay=True) if replay else lazyfuse.compile(step)
    losses = [loss.cpu() for loss in _launched(fn, batches, reset)]
    return losses, [p.grad.cpu() for p in model.parameters()], fn


def test_a_gradient_reset_between_steps_is_made_anew() -> None:
    """A step that accumulates into .grad updates it in its own memory; after
    zero_grad() the parameters' new gradients must come from the step, not
    from the old ones the user kept."""
    batches = make_batches(12, (6, 8), (6, 4))
    traced_losses, traced_grads, _ = _accumulating_run(False, batches)
    losses, grads, fn = _accumulating_run(True, batches)
    assert all(torch.equal(a, b) for a, b in zip(traced_losses, losses, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(traced_grads, grads, strict=True))
    assert fn.graph_launches >= 4, fn.graph_reason


def test_an_argument_with_pending_ir_is_synced_and_launched() -> None:
    """`x.to(dev) * 2` reaches the step as IR: it is computed, then the
    graph launches, as a replay syncs such an argument."""
    torch.manual_seed(0)
    _, _, step = _mlp()
    fn = lazyfuse.compile(step, replay=True)
    for x, y in make_batches(10, (6, 8), (6, 4)):
        fn(x.to(DEV) * 2, y.to(DEV))
    assert fn.graph_launches >= 6, fn.graph_reason
