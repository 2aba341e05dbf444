"""When lazy graphs execute: only on mark_step or when a value is read, once
per read, and from the compile cache when the graph was seen before."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import torch

import lazyfuse
from conftest import ON_CUDA, graphs_executed


def pending(lazy: torch.device) -> torch.Tensor:
    x = torch.arange(6, dtype=torch.float32).to(lazy)
    return (x * 2 + 1).sum()


def test_nothing_executes_before_mark_step(lazy: torch.device) -> None:
    y = pending(lazy)
    z = torch.relu(y - 3) * y
    assert graphs_executed() == 0
    lazyfuse.mark_step()
    assert graphs_executed() == 1
    assert z.cpu().item() == (36.0 - 3) * 36.0


def test_print_executes_once(lazy: torch.device) -> None:
    y = pending(lazy)
    with redirect_stdout(io.StringIO()) as out:
        print(y)
    assert "36." in out.getvalue()
    assert graphs_executed() == 1


def test_cpu_executes_once(lazy: torch.device) -> None:
    y = pending(lazy)
    assert y.cpu().item() == 36.0
    assert graphs_executed() == 1


def test_item_executes_once(lazy: torch.device) -> None:
    y = pending(lazy)
    assert y.item() == 36.0
    assert graphs_executed() == 1


def test_bool_in_if_executes_once(lazy: torch.device) -> None:
    y = pending(lazy)
    took_branch = False
    if y:  # a tensor used directly as the condition
        took_branch = True
    assert took_branch
    assert graphs_executed() == 1


def test_reading_metadata_does_not_execute(lazy: torch.device) -> None:
    x = torch.randn(3, 4).to(lazy)
    y = torch.mm(x, x.t())
    assert y.shape == (3, 3)
    assert y.dtype == torch.float32
    assert y.device.type == "lazy"
    assert y.dim() == 2 and y.numel() == 9
    assert graphs_executed() == 0


def test_second_identical_step_hits_the_cache(lazy: torch.device) -> None:
    w = torch.randn(4, 4).to(lazy)
    lazyfuse.mark_step()

    def step(data: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.mm(data.to(lazy), w)).sum()

    first = step(torch.randn(2, 4))
    lazyfuse.mark_step()
    uncached = lazyfuse.metrics.counter_value("UncachedCompile")
    cached = lazyfuse.metrics.counter_value("CachedCompile")
    assert uncached >= 1

    nodes_before = None
    second = step(torch.randn(2, 4))
    nodes_before = lazyfuse.debug.nodes_created()
    lazyfuse.mark_step()
    # Running a cached graph lowers nothing and creates no IR nodes.
    assert lazyfuse.debug.nodes_created() == nodes_before
    assert lazyfuse.metrics.counter_value("UncachedCompile") == uncached
    assert lazyfuse.metrics.counter_value("CachedCompile") == cached + 1
    assert first.item() != second.item()


def test_changing_a_scalar_does_not_recompile(lazy: torch.device) -> None:
    x = torch.randn(8).to(lazy)
    lazyfuse.mark_step()
    results = []
    for lr in (0.1, 0.01, 0.001, 0.5):
        results.append(x * lr + lr)
        lazyfuse.mark_step()
        if lr == 0.1:
            uncached = lazyfuse.metrics.counter_value("UncachedCompile")
    assert lazyfuse.metrics.counter_value("UncachedCompile") == uncached
    for lr, r in zip((0.1, 0.01, 0.001, 0.5), results, strict=True):
        torch.testing.assert_close(r.cpu(), x.cpu() * lr + lr)


def test_mark_step_counts_and_program_is_inspectable(lazy: torch.device, engine: str) -> None:
    # A shape no other test uses, so this graph is compiled, not cached.
    x = torch.ones(17, 3).to(lazy)
    y = torch.exp(x * 0.0).sum(1)
    lazyfuse.mark_step()
    assert lazyfuse.metrics.counter_value("MarkStep") == 1
    text = lazyfuse.debug.last_program()
    assert "aten::exp" in text and "[reduction]" in text and "Float[17]" in text
    # Steps run: the program's three ATen calls, or one fused kernel for all.
    fused = ON_CUDA or engine != "aten"
    assert lazyfuse.metrics.steps_per_graph()[-1] == (1 if fused else 3)
    torch.testing.assert_close(y.cpu(), torch.full((17,), 3.0))


def test_lazy_linear_materialises_on_the_lazy_device(lazy: torch.device) -> None:
    # Created on the lazy device; nn.Module.to() cannot keep a parameter
    # uninitialised across devices whose tensors are not shallow-copy
    # compatible (torch limitation, listed in the README).
    layer = torch.nn.LazyLinear(3, device=lazy)
    x = torch.randn(2, 5)
    out = layer(x.to(lazy))
    assert layer.weight.shape == (3, 5)
    assert layer.weight.device.type == "lazy"
    eager = torch.nn.functional.linear(x, layer.weight.detach().cpu(), layer.bias.detach().cpu())
    torch.testing.assert_close(out.cpu(), eager)
    assert lazyfuse.metrics.fallback_counts() == {}


def test_graphs_that_differ_only_in_wiring_compile_apart(lazy: torch.device) -> None:
    # Same-shape inputs that are also graph outputs used to give
    # where(m, v, x) and where(m, x, v) one hash, and so one cached Program.
    def run(swap: bool) -> int:
        x = torch.tensor(-8).to(lazy)
        m = torch.tensor(True).to(lazy)
        v = torch.tensor(5).to(lazy)
        r = torch.where(m, x, v) if swap else torch.where(m, v, x)
        lazyfuse.mark_step()
        return int(r.item())

    assert run(swap=False) == 5
    assert run(swap=True) == -8
    assert run(swap=False) == 5


def test_optional_operands_keep_their_role(lazy: torch.device) -> None:
    # clamp(x, min=b) and clamp(x, max=b) have the same operands; which
    # optional is present must stay part of IR reuse and of the graph hash.
    x, b = torch.arange(6.0), torch.full((6,), 2.5)
    for _ in range(2):
        low = torch.clamp(x.to(lazy), b.to(lazy), None)
        lazyfuse.mark_step()
        high = torch.clamp(x.to(lazy), None, b.to(lazy))
        lazyfuse.mark_step()
        torch.testing.assert_close(low.cpu(), torch.clamp(x, b, None))
        torch.testing.assert_close(high.cpu(), torch.clamp(x, None, b))


def test_a_read_runs_every_pending_value_once(lazy: torch.device) -> None:
    x = torch.arange(6, dtype=torch.float32).to(lazy)
    hidden = x * 2 + 1
    unrelated = torch.ones(3).to(lazy) * 5
    assert hidden.sum().item() == 36.0
    assert graphs_executed() == 1
    # Both were computed by that read's graph: reading them runs none.
    assert hidden.cpu().tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    assert unrelated.cpu().tolist() == [5.0, 5.0, 5.0]
    assert graphs_executed() == 1


def test_a_loop_that_reads_its_loss_without_mark_step_stays_one_graph_size(
    lazy: torch.device,
) -> None:
    def train(device: torch.device) -> tuple[list[float], torch.nn.Module]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        ).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x = torch.randn(32, 8).to(device)
        losses = []
        for _ in range(8):
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())  # no mark_step
        return losses, model

    eager_losses, eager_model = train(torch.device("cpu"))
    lazy_losses, lazy_model = train(lazy)
    # Each read ran the whole iteration, so the next one starts from values:
    # one graph per iteration, of one size, not one that grows by an
    # iteration each time and computes every earlier update again.
    steps = lazyfuse.metrics.steps_per_graph()
    assert len(steps) == 8 and len(set(steps[2:])) == 1, steps
    torch.testing.assert_close(lazy_losses, eager_losses)
    for eager_p, lazy_p in zip(eager_model.parameters(), lazy_model.parameters(), strict=True):
        torch.testing.assert_close(lazy_p.detach().cpu(), eager_p.detach())
