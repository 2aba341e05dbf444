"""Matrix products that every reader transposes are computed transposed
(fusion/transposed_matmuls.h): a Linear weight's gradient comes out in the
weight's layout, as eager's mm backward makes it, so the optimizer reads it
contiguous. Values are checked against eager on every engine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import lazyfuse
from conftest import REFERENCE_DEVICE
from fuzz_ops import matmul_transposed


def products(program: str) -> list[str]:
    """The output shape of each aten::mm step, as the program prints it."""
    return re.findall(r"%\d+:(\w+\[[\d,]*\]) = aten::mm\(", program)


def mlp(device: torch.device | str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3, bias=False)).to(device)


def test_a_weights_gradient_comes_out_in_the_weights_layout(
    lazy: torch.device, engine: str
) -> None:
    x = torch.randn(5, 8)
    model, reference = mlp(lazy), mlp(REFERENCE_DEVICE)
    model(x.to(lazy)).square().sum().backward()
    reference(x.to(REFERENCE_DEVICE)).square().sum().backward()
    lazyfuse.mark_step()
    program = lazyfuse.debug.last_program()
    # Both weights' gradients, [6,8] and [3,6], are the products themselves.
    assert "Float[6,8]" in products(program) and "Float[3,6]" in products(program), program
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu())
        torch.testing.assert_close(p.grad.t().cpu(), q.grad.t().cpu())


def test_training_with_momentum_matches_eager(lazy: torch.device, engine: str) -> None:
    model, reference = mlp(lazy), mlp(REFERENCE_DEVICE)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, reference)]
    torch.manual_seed(1)
    for _ in range(4):
        x = torch.randn(5, 8)
        for m, opt, device in zip(
            (model, reference), optimizers, (lazy, REFERENCE_DEVICE), strict=True
        ):
            opt.zero_grad()
            m(x.to(device)).square().mean().backward()
            opt.step()
        lazyfuse.mark_step()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.cpu(), q.cpu())
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu())


@pytest.mark.parametrize("shape", [[5, 3], [1, 7], [7, 1], [0, 4], [4, 0], [33, 17]])
@pytest.mark.parametrize("variant", range(4))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_products_read_transposed(
    lazy: torch.device, engine: str, shape: list[int], variant: int, dtype: torch.dtype
) -> None:
    # Variants: read only transposed; with a transposed pointwise operand;
    # read both ways (kept as it is); transposed with a transposed operand.
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    got = matmul_transposed(x.to(lazy), variant)
    lazyfuse.mark_step()
    torch.testing.assert_close(got.cpu(), matmul_transposed(x.to(REFERENCE_DEVICE), variant).cpu())


def test_a_product_and_its_transpose_both_held(lazy: torch.device, engine: str) -> None:
    # The product becomes a view of the transposed one, made from it when read.
    a, b = torch.randn(4, 6), torch.randn(6, 5)
    product = a.to(lazy) @ b.to(lazy)
    transposed = product.t()
    lazyfuse.mark_step()
    assert "derived: result" in lazyfuse.debug.last_program()
    torch.testing.assert_close(transposed.cpu(), (a @ b).t())
    torch.testing.assert_close(product.cpu(), a @ b)
    product.add_(1)  # the view sees the write, as in eager
    torch.testing.assert_close(transposed.cpu(), (a @ b + 1).t())


def test_a_transpose_only_a_matmul_reads_stays_a_view(lazy: torch.device, engine: str) -> None:
    a, b = torch.randn(5, 3), torch.randn(5, 4)
    out = (a.to(lazy) * 2).t() @ b.to(lazy)
    plan = lazyfuse.debug.fusion_plan(out)
    # No kernel writes the transposed copy: the matmul reads the view.
    assert re.search(r"\[view\]: aten::t_copy", plan), plan
    torch.testing.assert_close(out.cpu(), (a * 2).t() @ b)


def test_switch_keeps_the_recorded_layout() -> None:
    # LAZYFUSE_TRANSPOSED_MATMULS=0: the weight's gradient is the transpose
    # of a [8,6] product again, and still right.
    code = textwrap.dedent(
        """
        import re, torch, lazyfuse
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 6)
        x = torch.randn(5, 8)
        model(x).sum().backward()
        expected = model.weight.grad
        model.weight.grad = None
        model.to(lazyfuse.lazy_device())
        model(x.to(lazyfuse.lazy_device())).sum().backward()
        lazyfuse.mark_step()
        torch.testing.assert_close(model.weight.grad.cpu(), expected)
        print(re.findall(r"%\\d+:(\\w+\\[[\\d,]*\\]) = aten::mm\\(",
                         lazyfuse.debug.last_program()))
        """
    )
    env = {**os.environ, "LAZYFUSE_TRANSPOSED_MATMULS": "0"}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[-2] == "['Float[8,6]']", run.stdout
