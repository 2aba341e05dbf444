"""Random ops run in the graph, draw from torch's default generator (seeded by
torch.manual_seed), and are checked statistically."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazyfuse

# yaml (full_codegen) ops covered here rather than by an exact comparison; the
# random ops themselves are written by hand (see csrc/ops/random.cpp).
RANDOM_OPS = {"native_dropout_backward"}

N = 200_000


def no_fallback() -> None:
    assert lazyfuse.metrics.fallback_counts() == {}


def test_manual_seed_makes_runs_reproducible(lazy: torch.device) -> None:
    draws = []
    for _ in range(2):
        torch.manual_seed(7)
        u = torch.rand(6, device=lazy)
        n = torch.randn(6, device=lazy)
        lazyfuse.mark_step()
        draws.append((u.cpu(), n.cpu()))
    torch.testing.assert_close(draws[0], draws[1])
    assert not torch.equal(draws[0][0], torch.rand(6))
    no_fallback()


def test_a_value_read_twice_is_drawn_once(lazy: torch.device) -> None:
    # Reading one tensor runs its graph; the rest of the step runs it again
    # later. Both runs must see the same random numbers.
    layer = torch.nn.Linear(5, 3, device=lazy)
    x = torch.randn(2, 5)
    out = layer(x.to(lazy)).cpu()
    weight, bias = layer.weight.detach().cpu(), layer.bias.detach().cpu()
    torch.testing.assert_close(out, torch.nn.functional.linear(x, weight, bias))
    no_fallback()


def test_uniform_and_normal_statistics(lazy: torch.device) -> None:
    torch.manual_seed(0)
    u = torch.empty(N, device=lazy).uniform_(-1.0, 3.0)
    n = torch.empty(N, device=lazy).normal_(2.0, 0.5)
    lazyfuse.mark_step()
    u, n = u.cpu(), n.cpu()
    assert u.min() >= -1.0 and u.max() < 3.0
    assert abs(u.mean().item() - 1.0) < 0.02
    assert abs(u.var().item() - 16 / 12) < 0.03
    assert abs(n.mean().item() - 2.0) < 0.01
    assert abs(n.std().item() - 0.5) < 0.01
    no_fallback()


def test_bernoulli_rates(lazy: torch.device) -> None:
    torch.manual_seed(0)
    probs = torch.full((N,), 0.3).to(lazy)
    drawn = torch.bernoulli(probs)
    fixed = torch.empty(N, device=lazy).bernoulli_(0.8)
    lazyfuse.mark_step()
    assert set(drawn.cpu().unique().tolist()) <= {0.0, 1.0}
    assert abs(drawn.cpu().mean().item() - 0.3) < 0.01
    assert abs(fixed.cpu().mean().item() - 0.8) < 0.01
    no_fallback()


def test_dropout_forward_and_backward(lazy: torch.device) -> None:
    torch.manual_seed(0)
    x = torch.ones(N).to(lazy).requires_grad_()
    y = F.dropout(x, p=0.25, training=True)
    y.sum().backward()
    lazyfuse.mark_step()
    out, grad = y.detach().cpu(), x.grad.cpu()
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.75))
    # The gradient passes exactly where the forward kept the element.
    torch.testing.assert_close(grad, out)
    no_fallback()


def test_each_step_draws_new_numbers_from_one_cached_graph(lazy: torch.device) -> None:
    torch.manual_seed(0)
    x = torch.ones(64).to(lazy)
    lazyfuse.mark_step()
    masks = []
    for _ in range(3):
        masks.append(F.dropout(x, p=0.5, training=True))
        lazyfuse.mark_step()
        if len(masks) == 1:
            uncached = lazyfuse.metrics.counter_value("UncachedCompile")
    assert lazyfuse.metrics.counter_value("UncachedCompile") == uncached
    first, second, third = (m.cpu() for m in masks)
    assert not torch.equal(first, second) and not torch.equal(second, third)


def test_private_generator_is_a_clear_error(lazy: torch.device) -> None:
    survivor = torch.ones(3).to(lazy) * 2
    with pytest.raises(RuntimeError, match=r"aten::uniform.*torch.Generator.*manual_seed"):
        torch.empty(3, device=lazy).uniform_(generator=torch.Generator())
    lazyfuse.mark_step()
    torch.testing.assert_close(survivor.cpu(), torch.full((3,), 2.0))
