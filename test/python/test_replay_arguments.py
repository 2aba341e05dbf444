"""lazyfuse.compile(fn, replay=True) and what a step does with its tensor
arguments and returns: updates in place of a tensor argument (bound by
position), of a host argument (never replayed), returned views of the
step's state (never replayed) and one tensor returned twice."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from replay_helpers import DEV, make_batches, mlp

import lazyfuse

RETURNED_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "detach": torch.Tensor.detach,
    "t": torch.Tensor.t,
    "row": lambda w: w[0],
}


@pytest.mark.parametrize("kept", ["every_return", "from_the_fifth_call_on"])
@pytest.mark.parametrize("view", sorted(RETURNED_VIEWS))
def test_a_step_returning_a_view_of_its_state_is_not_replayed(view: str, kept: str):
    # Found from outside, two ways. Returns kept: never replayed, and the
    # reason blamed "a parameter, gradient or optimizer state replaced", as
    # each call brought the last call's view up to date. Returns dropped
    # until the fifth call: replayed, and a replay returns a new tensor, so
    # the one kept missed the next step's update, silently.
    def run(copy: bool) -> tuple[Any, list[torch.Tensor], list[torch.Tensor]]:
        torch.manual_seed(0)
        model, _, step = mlp()
        weight = model[0].weight

        def returning_a_view(x: torch.Tensor, y: torch.Tensor):
            loss = step(x, y)
            returned = RETURNED_VIEWS[view](weight)
            return loss, returned.clone() if copy else returned

        fn = lazyfuse.compile(replay=True)(returning_a_view)
        returns, got, expected = [], [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for call, (x, y) in enumerate(make_batches(7, (6, 8), (6, 4))):
                returned = fn(x.to(DEV), y.to(DEV))[1]
                got.append(returned.cpu())
                expected.append(RETURNED_VIEWS[view](weight.detach()).cpu())
                if kept == "every_return" or call >= 4:
                    returns.append((returned, len(expected) - 1))
                del returned
        # As in eager, a returned view shows the later steps; a copy does not.
        for returned, call in returns:
            got.append(returned.cpu())
            expected.append(expected[call] if copy else expected[6])
        return fn, got, expected

    fn, got, expected = run(copy=False)
    assert fn.replayed_calls == 0
    assert "returned tensor 1 is a view of a tensor the step updates" in fn.last_reason, (
        fn.last_reason
    )
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    copied, got, expected = run(copy=True)  # what the reason advises
    assert copied.replayed_calls >= 2, copied.last_reason
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


@pytest.mark.parametrize("shared", ["view_of_it_held", "view_of_a_base"])
@pytest.mark.parametrize("graphs", ["0", "emulate"])
def test_a_step_that_updates_its_argument_replays_for_each_tensor_passed(
    graphs: str, shared: str, monkeypatch: pytest.MonkeyPatch
):
    # Found from outside: a step that wrote into its tensor argument in place
    # (x.mul_(2).add_(y)) was never replayed when passed a new tensor each
    # call: "the calls wrote their results to different tensors". The write
    # now binds by position, as the argument's reads do, while the argument
    # is alone in its memory. A view of it, or it a view, still traces, so
    # that the write reaches the tensors that share it.
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", graphs)

    def update(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.mul_(2).add_(y)
        return x.sum()

    fn = lazyfuse.compile(replay=True)(update)
    # What each call passes: a new tensor, or one that shares its memory.
    passes = ["new"] * 5 + [shared] + ["new"] * 3
    replayed = []
    for i, how in enumerate(passes):
        y = torch.arange(3.0) + i
        expected_base, base = torch.ones(2, 3), torch.ones(2, 3, device=DEV)
        expected_x, x = (
            (expected_base[1], base[1])
            if how == "view_of_a_base"
            else (torch.ones(3), torch.ones(3, device=DEV))
        )
        held, expected_held = x[:2], expected_x[:2]
        if how != "view_of_it_held":
            del held, expected_held
        before = fn.replayed_calls
        total = fn(x, y.to(DEV))
        replayed.append(fn.replayed_calls > before)
        expected_total = update(expected_x, y)
        assert torch.equal(x.cpu(), expected_x), how
        assert torch.equal(total.cpu(), expected_total), how
        assert torch.equal(base.cpu(), expected_base), how
        if how == "view_of_it_held":
            assert torch.equal(held.cpu(), expected_held), how
    # A call that traces captures anew: two that agree replay again.
    assert replayed == [False] * 2 + [True] * 3 + [False] * 3 + [True], (
        replayed,
        fn.last_reason,
    )
    if graphs == "emulate":  # static memory, with the argument's result copied out
        assert fn.graph_launches >= 2, fn.graph_reason


def test_a_step_that_updates_a_host_argument_stays_traced_and_says_so():
    # Found from outside: a step that counted its calls in a CPU tensor it
    # was passed (counter.add_(1)) stopped counting once replayed, silently:
    # a replay runs the lazy graph, and a host op is not in it.
    weight = torch.ones(3, device=DEV)

    def step(x: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
        counter.add_(1)
        weight.mul_(x.to(DEV))
        return weight.sum()

    fn = lazyfuse.compile(replay=True)(step)
    counter = torch.zeros(())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(5):
            fn(torch.full((3,), 2.0), counter)
    assert float(counter) == 5
    assert torch.equal(weight.cpu(), torch.full((3,), 32.0))
    assert fn.replayed_calls == 0
    assert "updates tensor argument 1 in place on the cpu" in fn.last_reason, fn.last_reason


@pytest.mark.parametrize("graphs", ["0", "emulate"])
def test_a_tensor_returned_twice_is_one_tensor_on_a_replay(
    graphs: str, monkeypatch: pytest.MonkeyPatch
):
    # Found from outside: `return {"y": y, "again": y}` gave two tensors on a
    # replay, one in eager and in a traced call, so a write to one was lost
    # to the other.
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", graphs)
    weight = torch.ones(3, device=DEV)

    def step(x: torch.Tensor) -> dict[str, Any]:
        y = x * 2 + weight
        return {"y": y, "pair": (y.sum(), y)}

    fn = lazyfuse.compile(replay=True)(step)
    for i in range(5):
        out = fn(torch.full((3,), float(i), device=DEV))
        assert out["pair"][1] is out["y"], i
        out["y"].add_(1)
        assert torch.equal(out["pair"][1].cpu(), torch.full((3,), 2.0 * i + 2)), i
    assert fn.replayed_calls >= 3, fn.last_reason


def test_the_periodic_check_agrees_with_a_step_that_updates_its_argument():
    # The check captures over the record's own tensors; an argument the step
    # writes is bound by position, so the check must see it as well (it saw
    # the write as one to a tensor made in the call, and warned every time).
    def update(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.mul_(2).add_(y)
        return x.sum()

    fn = lazyfuse.compile(update, replay=True, check_every=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(10):
            x, expected = torch.ones(3, device=DEV), torch.ones(3)
            y = torch.arange(3.0) + i
            total = fn(x, y.to(DEV))
            assert torch.equal(total.cpu(), update(expected, y)), i
            assert torch.equal(x.cpu(), expected), i
    assert fn.replayed_calls == 6 and fn.traced_calls == 4


@pytest.mark.parametrize("graphs", ["0", "emulate"])
def test_a_host_scalar_argument_is_read_anew_by_every_replay(
    graphs: str, monkeypatch: pytest.MonkeyPatch
):
    # Found from outside: `x * scale` with `scale` a 0-dim CPU tensor argument
    # (a temperature, a loss scale) kept its first value on every replay: the
    # operand was recorded as a number made in the step, frozen.
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", graphs)

    def step(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return (x * scale).sum()

    fn = lazyfuse.compile(replay=True)(step)
    for value in [1.0, 1.0, 1.0, 2.0, 3.0, -0.5]:
        total = fn(torch.ones(3, device=DEV), torch.tensor(value))
        assert total.item() == 3 * value, value
    assert fn.replayed_calls == 4, fn.last_reason


def test_a_host_argument_read_in_python_replays_only_for_its_value():
    # Found from outside: `for _ in range(int(n))` with `n` a CPU tensor
    # argument replayed the captured loop count for every later n. A host
    # argument the graph does not read is now guarded by its value.
    def step(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        for _ in range(int(n)):
            x = x * 2
        return x.sum()

    fn = lazyfuse.compile(replay=True)(step)
    replayed = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in [1, 1, 1, 1, 3, 3, 3, 2]:
            before = fn.replayed_calls
            total = fn(torch.ones(3, device=DEV), torch.tensor(n))
            replayed.append(fn.replayed_calls > before)
            assert total.item() == 3 * 2**n, n
    assert replayed == [False, False, True, True, False, False, True, False], replayed
    assert "host tensor the step does not move to the lazy device" in fn.last_reason
