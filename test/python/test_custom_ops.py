"""torch.library custom ops on lazy tensors. Their implementations run below
functionalization, where a view of a lazy tensor cannot be recorded; lazyfuse
runs them with functionalization re-applied (csrc/ops/functionalized_composite.h).
Each case is checked against the same op in eager."""

from __future__ import annotations

import itertools

import pytest
import torch

import lazyfuse

COMPOSITE_RUNS = "LazyFuseFunctionalizedComposite"


@torch.library.custom_op("lftest::stack_halves", mutates_args=())
def stack_halves(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Writes into slices of a fresh buffer, as chunked kernels do."""
    out = torch.empty(x.shape[0] + y.shape[0], *x.shape[1:], dtype=x.dtype, device=x.device)
    out.narrow(0, 0, x.shape[0]).copy_(x * 2)
    out[x.shape[0] :].copy_(y + 1)
    out[:, 0].mul_(-1)
    return out


@torch.library.custom_op("lftest::chunked_rowsum", mutates_args=())
def chunked_rowsum(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Accumulates chunk by chunk into views; returns two results."""
    total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    squares = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[1], chunk):
        part = x[:, start : start + chunk]
        total.add_(part.sum(1))
        squares.view(-1, 1).add_((part * part).sum(1, keepdim=True))
    return total, squares


@chunked_rowsum.register_fake
def _(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape[0]), x.new_empty(x.shape[0])


def _chunked_rowsum_backward(
    ctx: object, grad_total: torch.Tensor, grad_squares: torch.Tensor
) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
    return grad_total[:, None] + 2 * x * grad_squares[:, None], None


def _chunked_rowsum_setup(ctx: object, inputs: tuple[object, ...], output: object) -> None:
    ctx.save_for_backward(inputs[0])  # type: ignore[attr-defined]


chunked_rowsum.register_autograd(_chunked_rowsum_backward, setup_context=_chunked_rowsum_setup)


@torch.library.custom_op("lftest::interleave", mutates_args=())
def interleave(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Takes a tensor list and writes through strided views."""
    first = tensors[0]
    out = first.new_empty(first.shape[0] * len(tensors), *first.shape[1:])
    for index, tensor in enumerate(tensors):
        out[index :: len(tensors)] = tensor
    return out


@torch.library.custom_op("lftest::checked_scale", mutates_args=())
def checked_scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    if factor <= 0:
        raise ValueError(f"lftest::checked_scale: factor must be positive, got {factor}")
    out = torch.empty_like(x)
    out[...] = x * factor
    return out


@pytest.fixture
def kernels(engine: str) -> None:
    """ATen steps only, and fused kernels (on a GPU, or emulated)."""


def test_custom_op_writing_into_views_matches_eager(lazy: torch.device, kernels: None) -> None:
    x, y = torch.randn(3, 4), torch.randn(2, 4)
    got = stack_halves(x.to(lazy), y.to(lazy))
    torch.testing.assert_close(got.cpu(), stack_halves(x, y))
    assert lazyfuse.metrics.counter_value(COMPOSITE_RUNS) == 1
    assert lazyfuse.metrics.executed_fallback_ops() == []


def test_custom_op_gradients_match_eager(lazy: torch.device, kernels: None) -> None:
    x = torch.randn(4, 10, requires_grad=True)
    lazy_x = x.detach().to(lazy).requires_grad_()
    total, squares = chunked_rowsum(lazy_x, 3)
    (total * 2 + squares).sum().backward()
    expected_total, expected_squares = chunked_rowsum(x, 3)
    (expected_total * 2 + expected_squares).sum().backward()
    torch.testing.assert_close(total.cpu(), expected_total)
    torch.testing.assert_close(squares.cpu(), expected_squares)
    assert lazy_x.grad is not None and x.grad is not None
    torch.testing.assert_close(lazy_x.grad.cpu(), x.grad)
    assert lazyfuse.metrics.executed_fallback_ops() == []


def test_custom_op_taking_a_tensor_list(lazy: torch.device) -> None:
    parts = [torch.randn(2, 3) for _ in range(3)]
    got = interleave([part.to(lazy) for part in parts])
    torch.testing.assert_close(got.cpu(), interleave(parts))


def test_custom_op_in_a_training_step_compiles_once(lazy: torch.device) -> None:
    weight = torch.randn(4, 4, device=lazy, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.1)
    compiles = []
    for _ in range(3):
        data = torch.randn(2, 4).to(lazy)
        total, squares = chunked_rowsum(data @ weight, 3)
        (total + squares).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        lazyfuse.mark_step()
        compiles.append(lazyfuse.metrics.counter_value("UncachedCompile"))
    assert compiles[2] == compiles[1], f"the repeated step recompiled: {compiles}"


def test_error_inside_a_custom_op_leaves_the_process_usable(lazy: torch.device) -> None:
    x = torch.randn(3).to(lazy)
    with pytest.raises(ValueError, match="lftest::checked_scale: factor must be positive"):
        checked_scale(x, -1.0)
    torch.testing.assert_close(checked_scale(x, 2.0).cpu(), x.cpu() * 2)


_late_ops = itertools.count()


def _define_late_op() -> object:
    name = f"lftest::late_{next(_late_ops)}"

    @torch.library.custom_op(name, mutates_args=())
    def late(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        out[1:].copy_(x[:-1])
        return out

    return late


def test_custom_op_defined_after_lazy_data_runs_after_mark_step(lazy: torch.device) -> None:
    x = torch.arange(4.0).to(lazy)
    late = _define_late_op()
    lazyfuse.mark_step()
    torch.testing.assert_close(late(x).cpu(), torch.tensor([0.0, 0.0, 1.0, 2.0]))


def test_custom_op_defined_just_before_its_first_call_works_from_the_second(
    lazy: torch.device,
) -> None:
    """Nothing of lazyfuse runs between its definition and its first call; the
    refusal says what happened, and the second call works."""
    x = torch.arange(4.0).to(lazy)
    late = _define_late_op()
    with pytest.raises(RuntimeError, match="an op defined later works from its next call"):
        late(x)
    torch.testing.assert_close(late(x).cpu(), torch.tensor([0.0, 0.0, 1.0, 2.0]))


@torch.library.custom_op("lftest::scale_first_row_", mutates_args=("x",))
def scale_first_row_(x: torch.Tensor, factor: float) -> None:
    x[0].mul_(factor)


@torch.library.custom_op("lftest::scale_rows_", mutates_args=("xs",), device_types="cpu")
def scale_rows_(xs: list[torch.Tensor], factor: float) -> torch.Tensor:
    """A device kernel only: on lazy tensors it runs eagerly, below
    functionalization. Writes a list and returns a new tensor."""
    for x in xs:
        x[0].mul_(factor)
    return torch.stack([x.sum() for x in xs])


WRITERS = {
    "composite": lambda x, f: scale_first_row_(x, f),
    "device_kernel": lambda x, f: scale_rows_([x], f),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_custom_op_that_writes_its_argument_matches_eager(
    lazy: torch.device, writer: str
) -> None:
    """torch's functionalization refuses custom ops that write their
    arguments (mutates_args); lazyfuse functionalizes them on lazy tensors.
    The write reaches the tensor, its base when it is a view, and the views
    held of it, as in eager."""
    torch.manual_seed(0)
    expected = torch.randn(4, 3)
    x = expected.to(lazy)
    held, expected_held = x[1:], expected[1:]
    WRITERS[writer](expected[1:], 3.0)
    WRITERS[writer](x[1:], 3.0)
    WRITERS[writer](expected, -2.0)
    WRITERS[writer](x, -2.0)
    lazyfuse.mark_step()
    torch.testing.assert_close(x.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(held.cpu(), expected_held, rtol=0, atol=0)


def test_a_composite_custom_op_that_writes_is_recorded_in_the_graph(lazy: torch.device) -> None:
    x = torch.ones(2, 3).to(lazy)
    lazyfuse.mark_step()
    fallbacks = lazyfuse.metrics.counter_value("aten::mul_.Tensor")
    before = lazyfuse.metrics.counter_value(COMPOSITE_RUNS)
    scale_first_row_(x, 2.0)
    y = x + 1
    lazyfuse.mark_step()
    torch.testing.assert_close(y.cpu(), torch.tensor([[3.0] * 3, [2.0] * 3]))
    assert lazyfuse.metrics.counter_value(COMPOSITE_RUNS) > before
    assert lazyfuse.metrics.counter_value("aten::mul_.Tensor") == fallbacks


def test_a_custom_op_writing_a_list_returns_eagers_result(lazy: torch.device) -> None:
    expected = [torch.arange(6.0).reshape(2, 3), torch.ones(2, 2)]
    xs = [t.to(lazy) for t in expected]
    result = scale_rows_(xs, 2.0)
    expected_result = scale_rows_(expected, 2.0)
    lazyfuse.mark_step()
    torch.testing.assert_close(result.cpu(), expected_result)
    for got, want in zip(xs, expected, strict=True):
        torch.testing.assert_close(got.cpu(), want)


def test_functionalize_outside_lazy_tensors_still_refuses_a_writing_op() -> None:
    """torch.func.functionalize on CPU tensors: torch's refusal, unchanged."""

    def f(x: torch.Tensor) -> torch.Tensor:
        scale_first_row_(x, 2.0)
        return x

    with pytest.raises(RuntimeError, match="lftest::scale_first_row_"):
        torch.func.functionalize(f)(torch.ones(2, 3))


def test_torch_compile_still_auto_functionalizes_a_writing_op() -> None:
    """lazyfuse's kernel for such ops is on the lazy autograd key: a
    Functionalize kernel would keep torch.compile from auto_functionalize."""

    def f(x: torch.Tensor) -> torch.Tensor:
        scale_first_row_(x, 2.0)
        return x + 1

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(torch.ones(2, 3))
    torch.testing.assert_close(got, torch.tensor([[3.0] * 3, [2.0] * 3]))


def test_a_writing_op_on_a_tensor_that_requires_grad_writes_as_in_eager(
    lazy: torch.device,
) -> None:
    """torch registers no derivative for an op that writes its arguments:
    eager writes a leaf that requires grad without complaint."""
    expected = torch.ones(2, 3, requires_grad=True)
    x = torch.ones(2, 3).to(lazy).requires_grad_()
    scale_first_row_(expected, 2.0)
    scale_first_row_(x, 2.0)
    lazyfuse.mark_step()
    torch.testing.assert_close(x.detach().cpu(), expected.detach())
