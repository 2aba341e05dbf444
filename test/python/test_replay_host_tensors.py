"""lazyfuse.compile(fn, replay=True) and host tensors the step reads that are
not its arguments (a closed-over CPU tensor, moved to the lazy device or used
as a 0-dim operand): a replay reads them anew, as a traced call does."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch

import lazyfuse

DEV = lazyfuse.lazy_device()
CALLS = 12

# How the step reads the host tensor `h` (4 elements, or 0-dim) into a
# 3-element lazy value.
READS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, ...]]] = {
    "moved": (lambda h: h.to(DEV), (3,)),
    "a view of it moved": (lambda h: h[1:].to(DEV), (4,)),
    "moved with a cast": (lambda h: h.to(DEV, torch.float64).float(), (3,)),
    "a 0-dim operand": (lambda h: h, ()),
}


def _eager_read(read: str, host: torch.Tensor) -> torch.Tensor:
    got = READS[read][0](host)
    return got.cpu() if got.device.type == "lazy" else got


def _run(read: str, host: torch.Tensor, change: Callable[[int], None]):
    """Each call's result, lazy (replayed) and eager; `change(call)` runs
    before each call, outside the step."""
    lazy_state = torch.zeros(3, device=DEV)
    eager_state = torch.zeros(3)
    take = READS[read][0]

    def step(x: torch.Tensor) -> torch.Tensor:
        lazy_state.add_(x * take(host))
        return lazy_state * 1

    fn = lazyfuse.compile(step, replay=True, check_every=3)
    got, expected = [], []
    for call in range(CALLS):
        change(call)
        x = torch.full((3,), float(call + 1))
        got.append(fn(x.to(DEV)).cpu())
        eager_state.add_(x * _eager_read(read, host))
        expected.append(eager_state.clone())
    return fn, got, expected


def _host(read: str) -> torch.Tensor:
    shape = READS[read][1]
    return torch.arange(1.0, 1.0 + int(np.prod(shape))) if shape else torch.tensor(2.0)


@pytest.mark.usefixtures("synchronous_steps")
@pytest.mark.parametrize("graphs", ["0", "emulate"])
@pytest.mark.parametrize("read", sorted(READS))
def test_a_host_tensor_changed_between_replays_is_read_anew(
    read: str, graphs: str, monkeypatch: pytest.MonkeyPatch
):
    # Found from outside: a closed-over CPU tensor was frozen into the
    # capture, so from the first replay on a change to it (a mask, a scale
    # the user set) was silently ignored until the periodic check.
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", graphs)
    host = _host(read)

    def change(call: int) -> None:
        if call in (4, 8):  # replays from call 2 on; the checks at 5 and 9
            host.mul_(-2)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "changed since it was captured"
        fn, got, expected = _run(read, host, change)
    for call, (a, b) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"call {call}")
    assert fn.replayed_calls >= 8, fn.last_reason
    if graphs == "emulate":
        assert fn.graph_launches > 0, fn.graph_reason


def test_a_host_tensor_in_numpy_memory_is_read_anew():
    array = np.arange(1.0, 4.0, dtype=np.float32)
    host = torch.from_numpy(array)

    def change(call: int) -> None:
        if call == 5:
            array[:] = [7.0, -1.0, 0.5]

    fn, got, expected = _run("moved", host, change)
    for call, (a, b) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"call {call}")
    assert fn.replayed_calls >= 8, fn.last_reason


@pytest.mark.parametrize("how", ["set_", ".data ="])
@pytest.mark.parametrize("read", ["moved", "a view of it moved"])
def test_a_host_tensor_given_new_memory_is_read_from_it(read: str, how: str):
    # A tensor moved as it is may be a view itself: its old memory stays
    # alive in its base.
    host = torch.arange(0.0, 5.0)[1:4] if read == "moved" else _host(read)

    def change(call: int) -> None:
        if call == 6:  # a replay's: its guards see the memory replaced
            new = torch.arange(5.0, 5.0 + host.numel())
            if how == "set_":
                host.set_(new)
            else:
                host.data = new

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn, got, expected = _run(read, host, change)
    for call, (a, b) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"call {call}")
    assert fn.replayed_calls >= 6, fn.last_reason


@pytest.mark.parametrize("when", ["before_reading_it", "after_reading_it"])
def test_a_host_tensor_the_step_updates_is_never_read_stale(when: str):
    # A replay runs none of the step's Python: a counter the step bumps on
    # the host must keep the step traced, whether bumped before or after the
    # step reads it.
    counter = torch.tensor([1.0, 2.0, 3.0])
    eager_counter = counter.clone()
    state = torch.zeros(3, device=DEV)
    eager_state = torch.zeros(3)

    def step(x: torch.Tensor) -> torch.Tensor:
        if when == "before_reading_it":
            counter.add_(1)
        state.add_(x * counter.to(DEV))
        if when == "after_reading_it":
            counter.add_(1)
        return state * 1

    fn = lazyfuse.compile(step, replay=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call in range(8):
            x = torch.full((3,), float(call + 1))
            got = fn(x.to(DEV)).cpu()
            if when == "before_reading_it":
                eager_counter.add_(1)
            eager_state.add_(x * eager_counter)
            if when == "after_reading_it":
                eager_counter.add_(1)
            torch.testing.assert_close(got, eager_state, rtol=0, atol=0, msg=f"call {call}")
    assert fn.replayed_calls == 0
    torch.testing.assert_close(counter, eager_counter, rtol=0, atol=0)


def test_a_host_tensor_changed_every_call_stays_traced_and_says_why():
    host = _host("moved")
    fn, got, expected = _run("moved", host, lambda call: host.add_(1))
    for call, (a, b) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"call {call}")
    assert fn.replayed_calls == 0
    assert "host tensor the step moves to the lazy device" in fn.last_reason


def test_a_host_tensor_made_in_each_call_still_replays():
    state = torch.zeros(3, device=DEV)

    def step(x: torch.Tensor) -> torch.Tensor:
        state.add_(x * torch.tensor([1.0, 2.0, 3.0]).to(DEV))
        return state * 1

    fn = lazyfuse.compile(step, replay=True)
    for call in range(6):
        fn(torch.full((3,), float(call + 1)).to(DEV))
    assert fn.replayed_calls == 4, fn.last_reason
    torch.testing.assert_close(state.cpu(), torch.tensor([21.0, 42.0, 63.0]))
