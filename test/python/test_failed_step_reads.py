"""A graph whose run fails on one step's values (an index out of range) must
not take the tensors that do not need that step down with it: in eager they
would have their values. Found from outside: after such a mark_step, reading
any tensor of that graph raised the failing step's error while the failing
tensor lived."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from conftest import FAILS_ON_VALUES_ON_THE_CPU_ONLY

pytestmark = FAILS_ON_VALUES_ON_THE_CPU_ONLY


@pytest.fixture(params=["async", "sync"])
def asynchronous(request: pytest.FixtureRequest) -> Iterator[bool]:
    with lazyfuse.config.async_execution_as(request.param == "async"):
        yield request.param == "async"


def mark_step_maybe_raising() -> None:
    # Synchronous runs raise at mark_step; asynchronous ones at the read.
    try:
        lazyfuse.mark_step()
    except IndexError as error:
        assert "embedding" in str(error) or "nll_loss" in str(error)


def test_tensors_that_do_not_need_the_failing_step_read_as_in_eager(asynchronous: bool) -> None:
    torch.manual_seed(0)
    host_w = torch.randn(10, 4)
    w = host_w.to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    bad = F.embedding(torch.tensor([1, 12]).to(w.device), w)
    scaled = w * 2 + 1
    total = w.sum()
    mark_step_maybe_raising()
    torch.testing.assert_close(scaled.cpu(), host_w * 2 + 1)
    torch.testing.assert_close(total.cpu(), host_w.sum())
    for _ in range(2):
        with pytest.raises(IndexError, match=r"aten::embedding.*index out of range"):
            bad.cpu()
    torch.testing.assert_close(scaled.cpu(), host_w * 2 + 1)  # read twice, same value
    del bad
    more = scaled + w
    lazyfuse.mark_step()
    torch.testing.assert_close(more.cpu(), host_w * 3 + 1)


def test_a_training_step_with_a_bad_target_keeps_the_unrelated_values(asynchronous: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    host_x = torch.randn(2, 4)
    device = lazyfuse.lazy_device()
    lazy_model = torch.nn.Linear(4, 3).to(device)
    lazy_model.load_state_dict(model.state_dict())
    x = host_x.to(device)
    features = (x * 3).relu()
    loss = F.cross_entropy(lazy_model(x), torch.tensor([0, 5]).to(device))
    loss.backward()
    mark_step_maybe_raising()
    torch.testing.assert_close(features.cpu(), (host_x * 3).relu())
    with pytest.raises(IndexError, match=r"nll_loss.*out of bounds"):
        loss.item()
    with pytest.raises(IndexError, match=r"nll_loss.*out of bounds"):
        lazy_model.weight.grad.cpu()  # needs the failing step: no value to give
    # The weights were not written by that step: they read, and train on.
    torch.testing.assert_close(lazy_model.weight.detach().cpu(), model.weight.detach())
    lazy_model.zero_grad(set_to_none=True)
    del loss
    good = F.cross_entropy(lazy_model(x), torch.tensor([0, 2]).to(device))
    good.backward()
    lazyfuse.mark_step()
    expected = F.cross_entropy(model(host_x), torch.tensor([0, 2]))
    expected.backward()
    torch.testing.assert_close(good.cpu(), expected.detach())
    torch.testing.assert_close(lazy_model.weight.grad.cpu(), model.weight.grad)


@pytest.mark.parametrize("read", ["cpu", "item", "print"])
def test_a_failed_read_raises_the_same_error_when_read_again(read: str) -> None:
    # The read's own sync used to leave the tensor an empty buffer in place
    # of its IR: a second read raised LTC's "async operation is in flight".
    w = torch.randn(10, 4).to(lazyfuse.lazy_device())
    bad = F.embedding(torch.tensor([12]).to(w.device), w).sum()
    for _ in range(3):
        with pytest.raises(IndexError, match=r"aten::embedding.*index out of range"):
            {"cpu": bad.cpu, "item": bad.item, "print": lambda: str(bad)}[read]()
    torch.testing.assert_close((w * 0).sum().cpu(), torch.tensor(0.0))
