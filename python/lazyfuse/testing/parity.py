"""Parity checks of a user's code on the lazy device against eager PyTorch."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import nn

import lazyfuse

# Per dtype (rtol, atol): what the project's own model and fuzz tests allow.
# Fused kernels add in another order than ATen, so float results may differ
# in their last bits; half types carry about three decimal digits.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (2e-2, 2e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-6, 1e-6),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-6, 1e-6),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """The default (rtol, atol) for `dtype`; exact for integers and bool."""
    return TOLERANCES.get(dtype, (0.0, 0.0))


@dataclass
class _Run:
    """What one lazy run left behind, for the failure message."""

    fallbacks: dict[str, int]
    kernel_launches: int

    def describe(self) -> str:
        fallbacks = (
            ", ".join(f"{op} ({n}x)" for op, n in sorted(self.fallbacks.items()))
            if self.fallbacks
            else "none"
        )
        kernels = (
            f"yes ({self.kernel_launches} launches)" if self.kernel_launches else "no (ATen steps)"
        )
        return f"eager fallbacks in the lazy run: {fallbacks}; fused kernels ran: {kernels}"


def _counters() -> tuple[dict[str, int], int]:
    return (
        dict(lazyfuse.metrics.fallback_counts()),
        lazyfuse.metrics.counter_value("LazyFuseKernelLaunches"),
    )


def _since(before: tuple[dict[str, int], int]) -> _Run:
    fallbacks, launches = _counters()
    grown = {op: n - before[0].get(op, 0) for op, n in fallbacks.items()}
    return _Run({op: n for op, n in grown.items() if n > 0}, max(launches - before[1], 0))


def _compare(
    where: str,
    lazy_value: object,
    eager_value: object,
    rtol: float | None,
    atol: float | None,
    run: _Run,
) -> None:
    """Raises AssertionError naming `where` if the two values differ."""
    if not isinstance(eager_value, torch.Tensor):
        if lazy_value != eager_value:
            raise AssertionError(
                f"lazyfuse.testing: {where} differs from eager: lazy {lazy_value!r}, eager "
                f"{eager_value!r}.\n{run.describe()}"
            )
        return
    if not isinstance(lazy_value, torch.Tensor):
        raise AssertionError(
            f"lazyfuse.testing: {where} is a tensor in eager but {type(lazy_value).__name__} on "
            f"the lazy device.\n{run.describe()}"
        )
    got = lazy_value.detach().cpu()
    expected = eager_value.detach().cpu()
    default_rtol, default_atol = tolerance(expected.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    problem = None
    if got.shape != expected.shape or got.dtype != expected.dtype:
        problem = (
            f"lazy gives {got.dtype}{list(got.shape)}, eager {expected.dtype}{list(expected.shape)}"
        )
    elif not torch.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
        problem = _largest_differences(got, expected)
    if problem is not None:
        raise AssertionError(
            f"lazyfuse.testing: {where} differs from eager (rtol={rtol}, atol={atol}): "
            f"{problem}.\n{run.describe()}"
        )


def _largest_differences(got: torch.Tensor, expected: torch.Tensor) -> str:
    if not got.is_floating_point() and not got.is_complex():
        got, expected = got.double(), expected.double()
    difference = (got - expected).abs().double()
    difference = torch.where(torch.isnan(got) & torch.isnan(expected), 0.0, difference)
    difference = torch.nan_to_num(difference, nan=float("inf"))
    relative = difference / expected.abs().double().clamp_min(torch.finfo(torch.float64).tiny)
    mismatched = int((difference > 0).sum())
    parts = [f"{mismatched} of {got.numel()} elements differ"]
    for name, values in (("absolute", difference), ("relative", relative)):
        flat = int(values.reshape(-1).argmax())
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), got.shape))
        parts.append(
            f"largest {name} difference {float(values.reshape(-1)[flat]):.3g} at index "
            f"{index} (lazy {got.reshape(-1)[flat].item()}, eager "
            f"{expected.reshape(-1)[flat].item()})"
        )
    return "; ".join(parts)


def _copy_to(value: object, device: torch.device) -> object:
    """A copy of every tensor and module in `value` on `device`; leaf tensors
    that require grad stay leaves that require grad."""

    def move(leaf: object) -> object:
        if isinstance(leaf, torch.Tensor):
            moved = leaf.detach().clone().to(device)
            return moved.requires_grad_(leaf.requires_grad)
        if isinstance(leaf, nn.Module):
            return copy.deepcopy(leaf).to(device)
        return leaf

    return pytree.tree_map(move, value)


def _modules_in(value: object) -> list[nn.Module]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, nn.Module)]


def _grad_inputs(args: object, kwargs: object) -> list[tuple[str, torch.Tensor]]:
    """Tensor arguments that require grad, named as the call passed them."""
    named = []
    for prefix, value in (("args", args), ("kwargs", kwargs)):
        leaves, _ = pytree.tree_flatten_with_path(value)
        named += [
            (prefix + pytree.keystr(path), leaf)
            for path, leaf in leaves
            if isinstance(leaf, torch.Tensor) and leaf.requires_grad
        ]
    return named


def _backward(outputs: object, seed: int) -> bool:
    """Backpropagates a fixed random weighting of every differentiable
    output, so each element's gradient is checked. False if none is."""
    differentiable = [
        leaf
        for leaf in pytree.tree_leaves(outputs)
        if isinstance(leaf, torch.Tensor) and leaf.requires_grad and leaf.is_floating_point()
    ]
    if not differentiable:
        return False
    generator = torch.Generator().manual_seed(seed)
    total = sum(
        (out * torch.randn(out.shape, generator=generator).to(out.device, out.dtype)).sum()
        for out in differentiable
    )
    total.backward()  # type: ignore[union-attr]
    return True


def assert_matches_eager(
    fn: Callable[..., Any],
    *args: Any,
    rtol: float | None = None,
    atol: float | None = None,
    check_grad: bool = True,
    seed: int = 0,
    **kwargs: Any,
) -> None:
    """Runs ``fn(*args, **kwargs)`` on CPU copies of its tensor and module
    arguments and on lazy copies, and asserts both give the same outputs (any
    pytree), gradients of inputs that require grad, and gradients of the
    parameters of every ``nn.Module`` among ``fn`` and the arguments.
    Tolerances default per dtype (``tolerance``); ``rtol``/``atol`` override
    them. Both runs start from ``torch.manual_seed(seed)``."""
    lazy = lazyfuse.lazy_device()
    cpu = torch.device("cpu")
    eager_call = _copy_to((fn, args, kwargs), cpu)
    lazy_call = _copy_to((fn, args, kwargs), lazy)
    lazyfuse.mark_step()
    before = _counters()
    results = []
    for device, (call, call_args, call_kwargs) in ((cpu, eager_call), (lazy, lazy_call)):
        torch.manual_seed(seed)
        outputs = call(*call_args, **call_kwargs)
        backward = check_grad and _backward(outputs, seed)
        if device == lazy:
            lazyfuse.mark_step()
        results.append((outputs, backward, call, call_args, call_kwargs))
    run = _since(before)
    (eager_out, eager_backward, *eager_rest), (lazy_out, _, *lazy_rest) = results
    eager_leaves, spec = pytree.tree_flatten_with_path(eager_out)
    lazy_leaves = pytree.tree_leaves(lazy_out)
    if len(lazy_leaves) != len(eager_leaves):
        raise AssertionError(
            f"lazyfuse.testing: fn returned {len(eager_leaves)} leaves in eager but "
            f"{len(lazy_leaves)} on the lazy device.\n{run.describe()}"
        )
    for (path, eager_leaf), lazy_leaf in zip(eager_leaves, lazy_leaves, strict=True):
        _compare(f"output{pytree.keystr(path)}", lazy_leaf, eager_leaf, rtol, atol, run)
    if not eager_backward:
        return
    for (name, eager_input), (_, lazy_input) in zip(
        _grad_inputs(*eager_rest[1:]), _grad_inputs(*lazy_rest[1:]), strict=True
    ):
        _compare(f"gradient of {name}", lazy_input.grad, eager_input.grad, rtol, atol, run)
    for eager_module, lazy_module in zip(
        _modules_in(eager_rest), _modules_in(lazy_rest), strict=True
    ):
        for (name, eager_param), (_, lazy_param) in zip(
            eager_module.named_parameters(), lazy_module.named_parameters(), strict=True
        ):
            _compare(f"gradient of {name}", lazy_param.grad, eager_param.grad, rtol, atol, run)


def default_loss(model: nn.Module, batch: object) -> torch.Tensor:
    """A dict batch is a HF-style model's keyword arguments, labels included,
    and the output's ``.loss`` is the loss. An ``(inputs, target)`` pair is
    scored with cross-entropy for integer targets, else mean squared error."""
    if isinstance(batch, dict):
        return model(**batch).loss
    inputs, target = batch  # type: ignore[misc]
    output = model(inputs)
    if target.is_floating_point():
        return F.mse_loss(output, target)
    return F.cross_entropy(output, target)


def assert_trains_like_eager(
    model_fn: Callable[[], nn.Module],
    batches: Sequence[object] | Iterable[object],
    optimizer_fn: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
    steps: int = 5,
    loss_fn: Callable[[nn.Module, object], torch.Tensor] = default_loss,
    warmup_steps: int = 2,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> None:
    """Trains ``model_fn()`` for ``steps`` steps with ``optimizer_fn`` on the
    CPU and on the lazy device, from the same seed and the same batches
    (cycled), and asserts equal losses and final parameters. Fails if any
    graph compiles after ``warmup_steps`` steps (the optimizer's state
    appears in step 2, so 2 by default), naming the cause from the compile
    log."""
    data = list(batches)
    lazy = lazyfuse.lazy_device()
    losses: dict[str, list[torch.Tensor]] = {}
    models: dict[str, nn.Module] = {}
    late_compiles: list[dict[str, object]] = []
    lazyfuse.mark_step()
    before = _counters()
    for device in (torch.device("cpu"), lazy):
        torch.manual_seed(seed)
        model = model_fn().to(device)
        optimizer = optimizer_fn(model.parameters())
        step_losses = []
        for step in range(steps):
            if device == lazy and step == warmup_steps:
                lazyfuse.debug.clear_compile_log()
            batch = _copy_to(data[step % len(data)], device)
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            if device == lazy:
                lazyfuse.mark_step()
            step_losses.append(loss.detach())
        if device == lazy and steps > warmup_steps:
            late_compiles = list(lazyfuse.debug.compile_log())
        losses[device.type] = step_losses
        models[device.type] = model
    run = _since(before)
    for step, (lazy_loss, eager_loss) in enumerate(zip(losses["lazy"], losses["cpu"], strict=True)):
        _compare(f"loss of step {step}", lazy_loss, eager_loss, rtol, atol, run)
    for (name, eager_param), (_, lazy_param) in zip(
        models["cpu"].named_parameters(), models["lazy"].named_parameters(), strict=True
    ):
        _compare(f"parameter {name} after {steps} steps", lazy_param, eager_param, rtol, atol, run)
    if late_compiles:
        causes = "; ".join(
            f"{entry.get('cause')} (at {entry.get('call_site')})" for entry in late_compiles
        )
        raise AssertionError(
            f"lazyfuse.testing: {len(late_compiles)} graph(s) compiled after the first "
            f"{warmup_steps} steps, so every step would pay for compiling: {causes}.\n"
            f"{run.describe()}"
        )
