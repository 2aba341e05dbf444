"""What tracing an op costs the host: no Python. A lazy op shapes its IR node
in C++ (a meta kernel or a shape function); a Python meta kernel or
decomposition on that path costs some 10 us a node, and every node a trace
cannot reuse pays it: a new shape's whole step, the first step. The view
*_copy ops paid it in their torchgen shape inference (a clone on meta, whose
empty_like has a Python meta kernel), 110 calls and 5 ms of a Transformer
step's 10 ms trace at a new length."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import lazyfuse
from python_kernels import python_kernel_calls


@pytest.fixture(autouse=True)
def _every_node_built() -> Iterator[None]:
    # With IR reuse on, a node seen last step is recycled and never shaped;
    # off, each op builds its node, as at a new shape.
    previous = lazyfuse.config.reuse_ir()
    lazyfuse.config.set_reuse_ir(False)
    yield
    lazyfuse.config.set_reuse_ir(previous)
    lazyfuse.mark_step()


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "view": lambda x: x.view(4, 30),
    "reshape": lambda x: x.reshape(-1),
    "t": lambda x: x[0].t(),
    "transpose": lambda x: x.transpose(0, 2),
    "permute": lambda x: x.permute(2, 0, 1),
    "expand": lambda x: x[:, :1].expand(4, 5, 6),
    "select": lambda x: x.select(1, 2),
    "slice": lambda x: x[:, 1:4:2],
    "narrow": lambda x: x.narrow(2, 1, 3),
    "squeeze": lambda x: x[:, :1].squeeze(),
    "squeeze.dim": lambda x: x[:, :1].squeeze(1),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "as_strided": lambda x: x.as_strided((3, 3), (6, 1), 2),
    "diagonal": lambda x: x.diagonal(0, 1, 2),
    "unfold": lambda x: x.unfold(2, 2, 1),
    "split": lambda x: x.split(2, dim=2)[1],
    "unbind": lambda x: x.unbind(0)[3],
}


def _long(values: object, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long, device=like.device)


OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "stack": lambda x: torch.stack([x, x * 2], dim=-1),
    "index_select": lambda x: x.index_select(1, torch.tensor([4, 0, 4], device=x.device)),
    "var": lambda x: x.var(1, keepdim=True),
    "std": lambda x: x.std((0, 2)),
    "var_mean": lambda x: torch.stack(torch.var_mean(x, -1)),
    "std_mean": lambda x: torch.stack(torch.std_mean(x, None, correction=0)),
    "logsumexp": lambda x: x.logsumexp((1, 2)),
    "nansum": lambda x: x.nansum(0),
    "prod": lambda x: x.prod() + x.prod(1).sum(),
    "index": lambda x: x[_long([2, 0, 3], x)],
    "index, a middle dim": lambda x: x[:, _long([[4], [1]], x)],
    "index, adjacent dims": lambda x: x[:, _long([4, 1], x), _long([[0], [5]], x)],
    "index, apart": lambda x: x[_long([3, 0], x), :, _long([[5], [1], [2]], x)],
    "index, 0-dim": lambda x: x[:, :, _long(2, x)],
    "index_put": lambda x: x.index_put((_long([1, 3], x),), x[0] * 2),
    "index_put, accumulate": lambda x: torch.ops.aten.index_put(
        x, [_long([1, 1], x), None, _long([0, 2], x)], x[0, :, 0], True
    ),
}


def _read(view: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: view(x) * 2  # a view read by an op, as in a model


TRACED = {**{f"view {name}": _read(view) for name, view in VIEWS.items()}, **OPS}


@pytest.mark.parametrize("name", TRACED)
def test_an_op_is_shaped_without_python(name: str, lazy: torch.device) -> None:
    x = torch.randn(4, 5, 6)
    lazy_x = x.to(lazy)
    lazyfuse.mark_step()
    with python_kernel_calls() as calls:
        out = TRACED[name](lazy_x)
    assert not calls, f"{name} ran Python kernels while tracing: {dict(calls)}"
    torch.testing.assert_close(out.cpu(), TRACED[name](x))


def test_shaped_ops_still_name_the_problem(lazy: torch.device) -> None:
    x = torch.randn(4, 5, device=lazy)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        torch.stack([x, x[:2]])
    with pytest.raises(RuntimeError, match="stack expects a non-empty TensorList"):
        torch.stack([])
    with pytest.raises(IndexError, match="out of range"):
        torch.stack([x, x], dim=3)
    with pytest.raises(IndexError, match="out of range"):
        x.index_select(2, torch.tensor([0], device=lazy))
    with pytest.raises(IndexError, match="too many indices"):
        x[_long([0], x), _long([0], x), _long([0], x)]
    with pytest.raises(IndexError, match="shape mismatch"):
        x[_long([0, 1], x), _long([0, 1, 2], x)]
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x.index_put((_long([0, 1], x),), x[:, :3].t())
    with pytest.raises(RuntimeError, match="appears multiple times"):
        x.var((0, 0))
    with pytest.raises(IndexError, match="out of range"):
        x.logsumexp(4)
    torch.testing.assert_close(torch.stack([x, x], 1).cpu(), torch.stack([x.cpu()] * 2, 1))


def test_a_view_with_bad_arguments_still_names_the_problem(lazy: torch.device) -> None:
    x = torch.randn(4, 5, device=lazy)
    with pytest.raises(RuntimeError, match="shape '\\[3, 3\\]' is invalid for input of size 20"):
        x.view(3, 3)
    with pytest.raises(IndexError, match="out of range"):
        x.transpose(0, 5)
    # The process stays usable.
    torch.testing.assert_close((x.t() + 1).cpu(), x.cpu().t() + 1)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.attention = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.norm(self.conv(x))), 2)
        x = self.attention(x.flatten(2).transpose(1, 2))
        return self.head(x.mean(1))


def test_a_training_step_traces_without_python_kernels(lazy: torch.device) -> None:
    torch.manual_seed(0)
    model = _Block().to(lazy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(2, 3, 8, 8).to(lazy), torch.tensor([1, 3]).to(lazy)
    for _ in range(2):  # the second step traces with the optimizer's state made
        optimizer.zero_grad()
        # Autograd runs a lazy backward on this thread, where the hook sees it.
        with python_kernel_calls() as calls:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        lazyfuse.mark_step()
        assert not calls, f"the step ran Python kernels while tracing: {dict(calls)}"
    assert torch.isfinite(loss.cpu())
    model.eval()  # batch norm from its running statistics
    with python_kernel_calls() as calls:
        out = model(x)
    assert not calls, f"the forward in eval mode ran Python kernels: {dict(calls)}"
    assert torch.isfinite(out.cpu()).all()
