"""Training resumed from a checkpoint, against eager: Note [Running
statistics written behind functionalization] (csrc/ops/running_statistics.h).

Found from outside: after `load_state_dict`, which swapped each parameter
and buffer with a detached alias of itself (lazyfuse had turned PyTorch's
swap-on-conversion on for the whole process), a BatchNorm step's running
statistics read right through the buffer but stale through `detach()`, so
`state_dict()`, and every checkpoint saved after resuming, held the
statistics from before the resumed steps. Both are mended: the write
reaches every view, and `load_state_dict` copies in place again.

Also found from outside: `torch.load(f, map_location=lazy_device)` raised
"don't know how to restore data location"; it loads onto the lazy device
(python/lazyfuse/serialization.py)."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable

import pytest
import torch
from torch import nn

import lazyfuse


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 6, bias=False), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))


def _batch(step: int, device: torch.device) -> torch.Tensor:
    return (torch.full((4, 3), float(step + 1)) * torch.arange(4.0).view(4, 1)).to(device)


def _train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    steps: int,
    replay: bool,
) -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    run: Callable[[torch.Tensor], torch.Tensor] = (
        lazyfuse.compile(step, replay=True) if replay and device.type == "lazy" else step
    )
    for k in range(steps):
        run(_batch(k, device))
        if device.type == "lazy":
            lazyfuse.mark_step()


def _resumed(device: torch.device, replay: bool) -> list[torch.Tensor]:
    init = _model()
    model = copy.deepcopy(init).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    _train(model, optimizer, device, 3, replay)
    saved = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, saved)
    saved.seek(0)
    # As a script written for CUDA loads: onto the device it trains on.
    checkpoint = torch.load(saved, map_location=device, weights_only=True)
    resumed = copy.deepcopy(init).to(device)
    resumed_optimizer = torch.optim.SGD(resumed.parameters(), lr=0.05, momentum=0.9)
    resumed.load_state_dict(checkpoint["model"])
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    taken_before = resumed[1].running_mean[:3]
    _train(resumed, resumed_optimizer, device, 4, replay)
    momentum = resumed_optimizer.state_dict()["state"][0]["momentum_buffer"]
    return [
        *(value.cpu() for value in resumed.state_dict().values()),
        resumed[1].running_var.cpu(),
        taken_before.cpu(),
        momentum.cpu(),
    ]


@pytest.mark.parametrize("replay", [False, True], ids=["traced", "replayed"])
def test_a_resumed_run_saves_what_eager_saves(replay: bool, lazy: torch.device) -> None:
    for got, expected in zip(
        _resumed(lazy, replay), _resumed(torch.device("cpu"), False), strict=True
    ):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("through", ["a base", "a loaded buffer", "a buffer swapped in by loading"])
def test_every_view_of_a_running_statistic_sees_the_step(through: str, lazy: torch.device) -> None:
    def statistics(device: torch.device) -> list[torch.Tensor]:
        norm = nn.BatchNorm1d(4).to(device)
        swapping = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(through.endswith("by loading"))
        try:
            if through != "a base":
                norm.load_state_dict(nn.BatchNorm1d(4).state_dict())
        finally:
            torch.__future__.set_swap_module_params_on_conversion(swapping)
        before = [norm.running_mean[1:], norm.running_var.detach(), norm.running_var.t()]
        norm(_batch(0, device).repeat(1, 2)[:, :4])
        after = [norm.running_mean.detach(), norm.state_dict()["running_var"]]
        return [t.cpu() for t in (*before, *after)]

    for got, expected in zip(statistics(lazy), statistics(torch.device("cpu")), strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("location", ["device", "lazy", "lazy:0"])
def test_load_maps_onto_the_lazy_device(location: str, lazy: torch.device) -> None:
    torch.manual_seed(0)
    shared = torch.randn(3)
    weight = nn.Parameter(torch.randn(2, 3))
    frozen = nn.Parameter(torch.randn(2), requires_grad=False)
    saved = io.BytesIO()
    leaf = torch.randn(2, requires_grad=True)
    torch.save(
        {"a": shared, "again": shared, "w": [weight, (frozen, 7)], "step": 5, "leaf": leaf}, saved
    )
    saved.seek(0)
    loaded = torch.load(saved, map_location=lazy if location == "device" else location)
    assert loaded["step"] == 5
    assert loaded["again"] is loaded["a"]
    loaded_weight, (loaded_frozen, seven) = loaded["w"][0], loaded["w"][1]
    assert seven == 7
    assert isinstance(loaded_weight, nn.Parameter) and loaded_weight.requires_grad
    assert isinstance(loaded_frozen, nn.Parameter) and not loaded_frozen.requires_grad
    assert loaded["leaf"].is_leaf and loaded["leaf"].requires_grad
    for got, expected in [(loaded["a"], shared), (loaded_weight, weight), (loaded_frozen, frozen)]:
        assert got.device == lazy
        torch.testing.assert_close(got.cpu(), expected.detach())


def test_load_maps_a_whole_module_onto_the_lazy_device(lazy: torch.device) -> None:
    model = _model()
    saved = io.BytesIO()
    torch.save(model, saved)
    saved.seek(0)
    loaded = torch.load(saved, map_location=lazy, weights_only=False)
    assert {p.device for p in loaded.parameters()} == {lazy}
    x = _batch(1, torch.device("cpu"))
    torch.testing.assert_close(loaded.eval()(x.to(lazy)).cpu(), model.eval()(x))


def test_a_storage_mapped_to_the_lazy_device_by_name_raises(lazy: torch.device) -> None:
    saved = io.BytesIO()
    torch.save(torch.ones(2), saved)
    saved.seek(0)
    with pytest.raises(RuntimeError, match="lazyfuse: torch.load cannot map a storage"):
        torch.load(saved, map_location={"cpu": "lazy"})
    saved.seek(0)
    torch.testing.assert_close(torch.load(saved, map_location=lazy).cpu(), torch.ones(2))
