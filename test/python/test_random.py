"""Random ops run in the graph, draw from torch's default generator (seeded by
torch.manual_seed), and are checked statistically."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazyfuse

# yaml ops covered here rather than by an exact comparison.
RANDOM_OPS = {
    "bernoulli",
    "bernoulli.p",
    "native_dropout",
    "native_dropout_backward",
    "uniform",
    "normal_functional",
}

N = 200_000


def no_fallback() -> None:
    assert lazyfuse.metrics.fallback_counts() == {}


def test_rand_and_randn_are_seeded_like_eager(lazy: torch.device) -> None:
    torch.manual_seed(7)
    eager = (torch.rand(6), torch.randn(6))
    torch.manual_seed(7)
    u = torch.rand(6, device=lazy)
    lazyfuse.mark_step()
    n = torch.randn(6, device=lazy)
    lazyfuse.mark_step()
    # On the CPU backing device the graph draws from the very generator
    # eager uses, in the same order.
    if lazyfuse.config.backing_device().type == "cpu":
        torch.testing.assert_close(u.cpu(), eager[0])
        torch.testing.assert_close(n.cpu(), eager[1])
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
