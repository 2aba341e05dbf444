"""Reshapes and contiguous() of lazy views alias or copy as eager's do: Note
[Eager's layout of a lazy view] (csrc/ops/view_layout.h).

Lazy tensors report contiguous strides, so ATen's reshape (which takes
`view` for lazy tensors) always aliased, where eager copies a view its
strides cannot reshape: `y = x.t().reshape(-1); y.add_(1)` wrote into x.
`Tensor.contiguous()`, which asks the strides before any dispatch, did the
same. Random view chains are reshaped and written on both devices, and the
base and the result compared.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

import lazyfuse

ViewStep = Callable[[torch.Tensor], torch.Tensor]


def _random_view(rng: random.Random, t: torch.Tensor) -> tuple[str, ViewStep] | None:
    dims = t.dim()
    choices: list[tuple[str, ViewStep]] = []
    if dims >= 2:
        a, b = rng.sample(range(dims), 2)
        choices.append((f"transpose({a}, {b})", lambda x: x.transpose(a, b)))
        perm = list(range(dims))
        rng.shuffle(perm)
        choices.append((f"permute({perm})", lambda x: x.permute(perm)))
        d1, d2 = rng.sample(range(dims), 2)
        choices.append((f"diagonal(0, {d1}, {d2})", lambda x: x.diagonal(0, d1, d2)))
    if dims >= 1:
        d = rng.randrange(dims)
        size = t.shape[d]
        if size > 1:
            start, step = rng.randrange(size - 1), rng.choice([1, 2])
            choices.append(
                (
                    f"[{d}] {start}::{step}",
                    lambda x: x[(slice(None),) * d + (slice(start, None, step),)],
                )
            )
            choices.append((f"select({d}, {start})", lambda x: x.select(d, start)))
            length = rng.randrange(1, size - start + 1)
            choices.append(
                (f"narrow({d}, {start}, {length})", lambda x: x.narrow(d, start, length))
            )
            if size % 2 == 0:
                choices.append((f"unfold({d}, 2, 2)", lambda x: x.unfold(d, 2, 2)))
        ones = [i for i in range(dims) if t.shape[i] == 1]
        if ones:
            i = rng.choice(ones)
            choices.append((f"squeeze({i})", lambda x: x.squeeze(i)))
            shape = list(t.shape)
            shape[i] = 3
            choices.append((f"expand({shape})", lambda x: x.expand(shape)))
    u = rng.randrange(dims + 1)
    choices.append((f"unsqueeze({u})", lambda x: x.unsqueeze(u)))
    if t.is_contiguous() and t.numel() > 0:
        choices.append(("view(-1)", lambda x: x.view(-1)))
    return rng.choice(choices) if choices else None


def _chain(seed: int) -> list[tuple[str, ViewStep]]:
    rng = random.Random(seed)
    t = torch.empty(2, 3, 4)
    steps: list[tuple[str, ViewStep]] = []
    for _ in range(rng.randrange(1, 4)):
        step = _random_view(rng, t)
        if step is None:
            break
        steps.append(step)
        t = step[1](t)
    return steps


ENDINGS: dict[str, ViewStep] = {
    "reshape": lambda view: view.reshape(-1),
    "flatten": lambda view: view.flatten(),
    "contiguous": lambda view: view.contiguous(),
}


def _run(
    device: torch.device,
    steps: list[tuple[str, ViewStep]],
    ends_in: str,
    mark_step: bool,
    write: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The base and the result after a write to the result, both ways round:
    the result, then the base. `write=None` (eager) decides whether to write:
    eager refuses a write to an alias of a repeating view."""
    base = torch.arange(24.0, device=device).view(2, 3, 4)
    view = base
    for _, step in steps:
        view = step(view)
    if mark_step and device.type == "lazy":
        lazyfuse.mark_step()  # the view's value is materialized; its chain is replayed
    result = ENDINGS[ends_in](view)
    if write is None:
        write = result.stride().count(0) == 0 or result.numel() <= 1
    if write:
        result.mul_(-1)
        base.add_(100)
    return base.cpu(), result.cpu(), write


@pytest.mark.parametrize("mark_step", [False, True], ids=["traced", "materialized"])
@pytest.mark.parametrize("ends_in", sorted(ENDINGS))
@pytest.mark.parametrize("seed", range(60))
def test_reshape_of_a_random_view_chain_aliases_as_in_eager(
    seed: int, ends_in: str, mark_step: bool, lazy: torch.device
) -> None:
    steps = _chain(seed)
    names = " . ".join(name for name, _ in steps)
    eager_base, eager_result, write = _run(torch.device("cpu"), steps, ends_in, mark_step)
    lazy_base, lazy_result, _ = _run(lazy, steps, ends_in, mark_step, write)
    assert torch.equal(lazy_base, eager_base), names
    assert torch.equal(lazy_result, eager_result), names


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda x: x, id="base"),
        pytest.param(lambda x: x[1:], id="rows"),
        pytest.param(lambda x: x[:, :, 1:], id="columns"),
        pytest.param(lambda x: x.permute(0, 2, 3, 1), id="permuted"),
        pytest.param(lambda x: x[:, :1].expand(2, 3, 4, 5), id="expanded"),
    ],
)
def test_contiguous_channels_last_copies_as_in_eager(make: ViewStep, lazy: torch.device) -> None:
    # Eager copies any tensor that is not already channels_last; lazy tensors
    # said they were, and returned an alias.
    results = []
    for device in (torch.device("cpu"), lazy):
        base = torch.arange(120.0, device=device).view(2, 3, 4, 5)
        view = make(base)
        result = view.contiguous(memory_format=torch.channels_last)
        result.mul_(-1)
        base.add_(100)
        results.append((base.cpu(), result.cpu(), result is view))
    (eager_base, eager_result, eager_same), (lazy_base, lazy_result, lazy_same) = results
    assert torch.equal(lazy_base, eager_base)
    assert torch.equal(lazy_result, eager_result)
    assert lazy_same == eager_same


def test_contiguous_returns_the_tensor_itself_where_eager_does(lazy: torch.device) -> None:
    x = torch.zeros(3, 4, device=lazy)
    for same in (x, x[1], x[1:], x.view(12), x.unsqueeze(0)):
        assert same.contiguous() is same
    for copied in (x.t(), x[:, 1:], x[::2], x[:1].expand(3, 4)):
        assert copied.contiguous() is not copied


def test_contiguous_keeps_autograd(lazy: torch.device) -> None:
    weight = torch.randn(3, 4, requires_grad=True)
    lazy_weight = weight.detach().to(lazy).requires_grad_()
    for w in (weight, lazy_weight):
        (w.t().contiguous() * torch.arange(12.0, device=w.device).view(4, 3)).sum().backward()
    assert lazy_weight.grad is not None and weight.grad is not None
    torch.testing.assert_close(lazy_weight.grad.cpu(), weight.grad)


def test_contiguous_of_other_tensors_is_torchs(lazy: torch.device) -> None:
    x = torch.arange(6.0).view(2, 3)
    assert x.contiguous() is x
    copy = x.t().contiguous()
    assert copy.is_contiguous() and torch.equal(copy, x.t())
    copy.zero_()
    assert torch.equal(x, torch.arange(6.0).view(2, 3))
    for t in (x.t(), x.t().to(lazy)):
        with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last"):
            t.contiguous(memory_format=torch.channels_last)


def test_a_view_eager_cannot_make_copies_as_reshape_would(lazy: torch.device) -> None:
    # Eager refuses x.t().view(-1); lazy tensors give reshape's copy, never
    # an alias that writes back.
    x = torch.arange(6.0, device=lazy).view(2, 3)
    flat = x.t().view(-1)
    flat.zero_()
    torch.testing.assert_close(x.cpu(), torch.arange(6.0).view(2, 3))
    torch.testing.assert_close(flat.cpu(), torch.zeros(6))


def test_reshape_keeps_autograd(lazy: torch.device) -> None:
    weight = torch.randn(3, 4, requires_grad=True)
    lazy_weight = weight.detach().to(lazy).requires_grad_()
    for w in (weight, lazy_weight):
        (w.t().reshape(-1) * torch.arange(12.0, device=w.device)).sum().backward()
    assert lazy_weight.grad is not None and weight.grad is not None
    torch.testing.assert_close(lazy_weight.grad.cpu(), weight.grad)


def test_contiguous_of_eager_tensors_traces_whole_under_torch_compile() -> None:
    # The wrapper is Python, which Dynamo inlines: a call of torch's C method
    # from it broke the graph.
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous() * 2 + x.contiguous(memory_format=torch.contiguous_format).sum()

    x = torch.randn(4, 5)
    compiled = torch.compile(f, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), f(x))


def test_dispatch_modes_see_no_meta_tensors_of_lazyfuse(lazy: torch.device) -> None:
    """Views, reshape, contiguous() and out= work out eager's layout on meta
    tensors, in kernels that run above the Python key; a user's
    TorchDispatchMode saw those ops, and selective checkpointing saved them."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    seen: list[str] = []

    class Devices(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            for leaf in tree_leaves((args, kwargs, out)):
                if isinstance(leaf, torch.Tensor) and leaf.device.type != "lazy":
                    seen.append(f"{func} on {leaf.device}")
            return out

    x = torch.randn(4, 6, device=lazy)
    # A dtype and op of their own: lazyfuse decides an out= call once per key.
    out = torch.empty(6, 4, dtype=torch.float64, device=lazy)
    with Devices():
        results = [
            x.t().reshape(-1),
            x.t().contiguous(),
            x[1:].flatten(),
            x.unsqueeze(0).expand(2, 4, 6).reshape(8, 6),
            x.contiguous(memory_format=torch.contiguous_format),
            torch.hypot(x.t().double(), x.t().double(), out=out),
        ]
    assert not seen, seen
    assert all(r.device.type == "lazy" for r in results)


VIEWS_OF_A_MATRIX: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mT": lambda a: a.mT,
    "corner of a larger matrix": lambda a: a[1:, 1:],
    "permute of a batch": lambda a: a.expand(2, 4, 4).permute(0, 2, 1),
    "every other row": lambda a: a[::2].mT @ a[::2],
}


@pytest.mark.parametrize("view", list(VIEWS_OF_A_MATRIX))
@pytest.mark.parametrize("op", ["det", "slogdet"])
def test_det_of_a_view_has_eagers_gradient(op: str, view: str, lazy: torch.device) -> None:
    """Eager's det and slogdet factor A.mT where A is contiguous, and their
    derivatives ask A.is_contiguous() again to read the LU. A lazy view says
    it is; its step was given the strided view, factored A, and the gradient
    came out transposed."""
    torch.manual_seed(0)
    matrix = torch.randn(4, 4, dtype=torch.float64) + 4 * torch.eye(4, dtype=torch.float64)
    grads = []
    for device in (torch.device("cpu"), lazy):
        a = matrix.clone().to(device).requires_grad_()
        x = VIEWS_OF_A_MATRIX[view](a)
        out = torch.linalg.det(x) if op == "det" else torch.linalg.slogdet(x)[1]
        out.sum().backward()
        grads.append(a.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])
