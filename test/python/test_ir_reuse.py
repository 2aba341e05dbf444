"""IR reuse (LTC's TrieCache, on by default): a repeated step recycles the
last step's nodes, and recycling never changes what a graph computes."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import lazyfuse


@pytest.fixture(autouse=True)
def _reuse_on():
    previous = lazyfuse.config.reuse_ir()
    lazyfuse.config.set_reuse_ir(True)
    yield
    lazyfuse.config.set_reuse_ir(previous)


def test_reuse_is_on_by_default() -> None:
    import subprocess
    import sys

    code = "import lazyfuse; print(lazyfuse.config.reuse_ir())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_swapped_same_shape_inputs_are_not_taken_for_each_other(lazy: torch.device) -> None:
    # masked_fill traces its inputs in a different order when the fill value
    # is a tensor; equal-shape device data used to compare equal, so the
    # recycled where() read self and value swapped.
    x, mask = torch.tensor(1.5), torch.tensor(True)
    for value in (10, torch.tensor(-8.0), torch.tensor(-8.0), 3):
        lazy_value = value.to(lazy) if isinstance(value, torch.Tensor) else value
        out = torch.masked_fill(x.to(lazy), mask.to(lazy), lazy_value)
        lazyfuse.mark_step()
        assert out.cpu().item() == torch.masked_fill(x, mask, value).item()


def test_where_with_operands_in_either_order(lazy: torch.device) -> None:
    a, b = torch.randn(8), torch.randn(8)
    mask = torch.rand(8) > 0.5
    for first, second in ((a, b), (b, a), (a, b), (b, a)):
        out = torch.where(mask.to(lazy), first.to(lazy), second.to(lazy))
        lazyfuse.mark_step()
        torch.testing.assert_close(out.cpu(), torch.where(mask, first, second))


def test_tensor_kept_across_steps_is_never_recycled(lazy: torch.device) -> None:
    # weight keeps its device-data node as its IR value from step to step, as
    # BatchNorm's running statistics do in eval mode; fresh inputs of the
    # same shape must get nodes of their own.
    weight = torch.randn(4)
    lazy_weight = weight.to(lazy)
    for step in range(4):
        x = torch.full((4,), float(step))
        first = x.to(lazy) * lazy_weight if step % 2 else lazy_weight * x.to(lazy)
        second = torch.ones(4).to(lazy) + lazy_weight
        lazyfuse.mark_step()
        torch.testing.assert_close(first.cpu(), x * weight)
        torch.testing.assert_close(second.cpu(), 1 + weight)


def test_signed_zero_scalars_are_distinct(lazy: torch.device) -> None:
    x = torch.tensor([1.0, -1.0])
    for scale in (0.0, -0.0, 0.0):
        out = 1.0 / (x.to(lazy) * scale)
        lazyfuse.mark_step()
        torch.testing.assert_close(out.cpu(), 1.0 / (x * scale))


COMPLEX_SCALAR_USES = {
    "add 0j": lambda t: t + 0j,
    "add 1+0j": lambda t: t + (1 + 0j),
    "mul 1+0j": lambda t: t * (1 + 0j),
    "pad with 1+0j": lambda t: torch.constant_pad_nd(t, (1, 1), 1 + 0j),
    "fill_ 0j": lambda t: t.clone().fill_(0j),
    "masked_fill 1+0j": lambda t: t.masked_fill(t.real > 0, 1 + 0j),
    "real plus 0j": lambda t: t.real + 0j,
}


@pytest.mark.parametrize("use", COMPLEX_SCALAR_USES.values(), ids=COMPLEX_SCALAR_USES.keys())
def test_complex_scalar_attributes(lazy: torch.device, use) -> None:
    # A complex 0 or 1 becomes a Scalar node's attribute; torch::lazy::Hash of
    # a complex Scalar recursed until the process died of a stack overflow.
    x = torch.randn(3, 4, dtype=torch.complex64)
    for _ in range(2):  # the second round recycles the nodes
        out = use(x.to(lazy))
        lazyfuse.mark_step()
        torch.testing.assert_close(out.cpu(), use(x))


def test_numbers_of_different_types_are_distinct(lazy: torch.device) -> None:
    x = torch.tensor([1.5, -2.0])
    lazy_x = x.to(lazy)
    outs = [lazy_x + 0j, lazy_x + 0, lazy_x + 0.0, lazy_x.long() + 0, lazy_x * 1j, lazy_x * 1]
    lazyfuse.mark_step()
    for out, expected in zip(
        outs, [x + 0j, x + 0, x + 0.0, x.long() + 0, x * 1j, x * 1], strict=True
    ):
        torch.testing.assert_close(out.cpu(), expected)


def test_steady_training_step_builds_no_new_nodes(lazy: torch.device) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(lazy)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    created = []
    for _ in range(5):
        before = lazyfuse.debug.nodes_created()
        optimizer.zero_grad()
        F.cross_entropy(model(x.to(lazy)), y.to(lazy)).backward()
        optimizer.step()
        lazyfuse.mark_step()
        created.append(lazyfuse.debug.nodes_created() - before)
    # The first two steps differ (no momentum buffer yet); then nothing new.
    assert created[0] > 0
    assert created[3:] == [0, 0], created


def test_device_data_held_stays_flat_across_many_shapes(lazy: torch.device) -> None:
    # The TrieCache keeps a graph's nodes for every shape ever traced. Their
    # data is released at the end of a step, and the step's walk covers only
    # nodes that still hold data: once it covered every node ever made, so a
    # step's cost grew with the number of shapes seen.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(lazy)

    def held_after_step(batch: int) -> int:
        F.cross_entropy(model(torch.randn(batch, 8).to(lazy)), torch.zeros(batch).long().to(lazy))
        lazyfuse.mark_step()
        data = lazyfuse.metrics.metric_data("LazyFuseDeviceDataHeld")
        assert data is not None
        return int(data[2][-1][1])

    early = [held_after_step(batch) for batch in range(2, 6)]
    late = [held_after_step(batch) for batch in range(6, 46)]
    assert max(late) <= max(early), (early, late)
