"""A graph computes what was traced, whatever the thread that runs it is
doing. mark_step or a read may run inside a CPU autocast region, a
TorchDispatchMode (FlopCounterMode, a logging mode) or inference mode, and
on the CPU stream the run takes the caller's thread-local state along. The
steps a graph runs on backing-device tensors must not be cast by that
autocast, nor seen by that mode (csrc/ltc/backing_ops_guard.h)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch._lazy.config
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import lazyfuse


class OpLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


STATES: dict[str, Callable[[], Any]] = {
    "autocast_cpu_bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "lazyfuse_autocast_bf16": lambda: lazyfuse.autocast(dtype=torch.bfloat16),
    "dispatch_mode": OpLog,
    "inference_mode": torch.inference_mode,
    "saved_tensors_hooks": lambda: torch.autograd.graph.saved_tensors_hooks(
        lambda t: t, lambda t: t
    ),
}


@pytest.fixture(params=[False, True], ids=["synchronous", "asynchronous"])
def asynchronous(request: pytest.FixtureRequest) -> Iterator[bool]:
    with lazyfuse.config.async_execution_as(request.param):
        yield request.param


def traced_step(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ weight).sum(1) + weight.mean()


@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("run_by", ["mark_step", "read"])
def test_a_graph_run_inside_a_thread_state_computes_what_was_traced(
    state: str, run_by: str, asynchronous: bool, lazy: torch.device
) -> None:
    weight, x = torch.randn(48, 48), torch.randn(16, 48)
    expected = traced_step(weight, x)
    lazy_weight = weight.to(lazy)
    lazyfuse.mark_step(wait=True)
    got = traced_step(lazy_weight, x.to(lazy))
    with STATES[state]() as entered:
        if run_by == "mark_step":
            lazyfuse.mark_step()
            lazyfuse.wait_device_ops()
        else:
            read = got.cpu()
    if run_by == "mark_step":
        read = got.cpu()
    torch.testing.assert_close(read, expected)  # bfloat16 matmuls missed by about 0.1
    if isinstance(entered, OpLog):
        # The read's own copy is the mode's to see; the graph's steps are not.
        assert entered.ops == ([] if run_by == "mark_step" else ["aten._to_copy.default"])
    # The parameter is still the training step's to update in place.
    lazy_weight.add_(1)
    lazyfuse.mark_step()
    torch.testing.assert_close(lazy_weight.cpu(), weight + 1)


def test_an_eager_fallback_inside_cpu_autocast_keeps_the_lazy_dtype(lazy: torch.device) -> None:
    # An op without a lowering runs eagerly on the backing device. CPU
    # autocast is not the lazy device's: there the op must keep its dtype.
    x = torch.randn(6, 8)
    torch._lazy.config.set_force_fallback("aten::mm")
    try:
        with (
            torch.autocast("cpu", dtype=torch.bfloat16),
            pytest.warns(UserWarning, match="eagerly"),
        ):
            got = torch.mm(x.to(lazy), x.t().to(lazy))
            lazyfuse.mark_step()
    finally:
        torch._lazy.config.set_force_fallback("")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), x @ x.t())


def _batched_products(t: torch.Tensor, sync: Callable[[], None]) -> torch.Tensor:
    # A batched matmul alive at the sync, which planning reads as a view of
    # its root through meta tensors (csrc/runtime/result_aliases.cpp).
    products = t @ t.transpose(-1, -2)
    if t.device.type == "lazy":
        sync()
    return products.sin()


TRANSFORMS: dict[str, Callable[[Callable[[torch.Tensor], torch.Tensor], torch.Tensor], Any]] = {
    "grad": lambda f, x: torch.func.grad(lambda t: f(t).square().sum())(x[0]),
    "vmap(grad)": lambda f, x: torch.func.vmap(torch.func.grad(lambda t: f(t).square().sum()))(x),
    "vmap": lambda f, x: torch.func.vmap(f)(x),
    "jvp": lambda f, x: torch.func.jvp(f, (x,), (torch.ones_like(x),))[1],
    "vjp": lambda f, x: (lambda out, pull: pull(torch.ones_like(out))[0])(*torch.func.vjp(f, x)),
}
SYNCS: dict[str, Callable[[], None]] = {
    "lazyfuse.mark_step": lazyfuse.mark_step,
    "torch._lazy.mark_step": torch._lazy.mark_step,
}


@pytest.mark.parametrize("sync", list(SYNCS))
@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_a_sync_inside_a_functorch_transform_matches_eager(
    transform: str, sync: str, lazy: torch.device
) -> None:
    # Compiling there ran planning's meta tensors through the transform, which
    # wrapped them: "Cannot access storage of TensorWrapper" (OpInfo's
    # wrapper_set_seed marks a step inside the op it wraps).
    x = torch.randn(2, 3, 4, 5)
    expected = TRANSFORMS[transform](lambda t: _batched_products(t, SYNCS[sync]), x)
    got = TRANSFORMS[transform](lambda t: _batched_products(t, SYNCS[sync]), x.to(lazy))
    torch.testing.assert_close(got.cpu(), expected)


FACTORIES: dict[str, Callable[[torch.device], torch.Tensor]] = {
    "zeros": lambda d: torch.zeros(3, 4, device=d),
    "ones": lambda d: torch.ones(3, 4, device=d),
    "full": lambda d: torch.full((3, 4), 2.0, device=d),
    "arange": lambda d: torch.arange(12.0, device=d).view(3, 4),
    "empty, then filled": lambda d: torch.empty(3, 4, device=d).fill_(1.5),
    "eye": lambda d: torch.eye(3, 4, device=d),
    "a CPU tensor moved": lambda d: torch.arange(12.0).view(3, 4).to(d),
    "zeros_like a CPU tensor": lambda d: torch.zeros_like(torch.ones(3, 4), device=d),
}


@pytest.mark.parametrize("factory", list(FACTORIES))
def test_a_tensor_made_under_a_dispatch_mode_takes_views_and_writes(
    factory: str, lazy: torch.device
) -> None:
    # Under a mode a lazy factory returned a bare lazy tensor, which no view
    # could be taken of, and whose views' writes would not reach it.
    def program(device: torch.device) -> list[torch.Tensor]:
        made = FACTORIES[factory](device)
        view = made.t()[1:]
        view.mul_(3.0)
        made[0].add_(1.0)
        return [made, view, made.sum(0)]

    with OpLog() as mode:
        got = [t.cpu() for t in program(lazy)]
    assert mode.ops, "the mode saw the ops"
    for lazy_value, eager_value in zip(got, program(torch.device("cpu")), strict=True):
        torch.testing.assert_close(lazy_value, eager_value)


def test_flop_counter_around_a_training_step_matches_eager(lazy: torch.device) -> None:
    # The common use of a mode: counting a step's FLOPs. The model makes
    # tensors as it runs (a causal mask, positions).
    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(8, 24)
            self.position = torch.nn.Embedding(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(x.shape[1], device=x.device)
            q, k, v = self.qkv(x + self.position(positions)).chunk(3, -1)
            q = q @ torch.eye(8, device=x.device)  # its backward takes the eye's transpose
            mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()
            scores = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
            return scores.softmax(-1) @ v

    def step(device: torch.device) -> tuple[int, list[torch.Tensor]]:
        torch.manual_seed(0)
        model = Attention().to(device)
        x = torch.randn(2, 5, 8).to(device)
        with FlopCounterMode(display=False) as counter:
            model(x).square().mean().backward()
        return counter.get_total_flops(), [p.grad.cpu() for p in model.parameters()]

    lazy_flops, lazy_grads = step(lazy)
    eager_flops, eager_grads = step(torch.device("cpu"))
    assert lazy_flops == eager_flops
    for lazy_grad, eager_grad in zip(lazy_grads, eager_grads, strict=True):
        torch.testing.assert_close(lazy_grad, eager_grad)
