"""lazyfuse.compile(fn, replay=True): what a replay binds, guards and
freezes, and when it traces again. Training parity is test_replay_models.py."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from replay_helpers import DEV, make_batches, mlp

import lazyfuse


def _replayed_mlp():
    torch.manual_seed(0)
    model, opt, step = mlp()
    fn = lazyfuse.compile(replay=True)(step)
    batches = [(x.to(DEV), y.to(DEV)) for x, y in make_batches(8, (6, 8), (6, 4))]
    for x, y in batches[:3]:
        fn(x, y)
    assert fn.replayed_calls == 0 and fn.traced_calls == 3
    return model, opt, fn, batches


def test_returned_tensors_and_held_copies_keep_their_values():
    model, _, fn, batches = _replayed_mlp()
    weight = model[0].weight
    held_alias = weight.detach()
    held_copy = weight.detach().clone()
    copy_value = held_copy.cpu()
    losses = [fn(x, y) for x, y in batches[3:]]
    assert fn.replayed_calls == len(losses)
    values = [loss.cpu() for loss in losses]
    assert len({float(v) for v in values}) == len(values)  # each its own step's loss
    assert [float(v) for v in values] == [float(loss.cpu()) for loss in losses]
    assert torch.equal(held_copy.cpu(), copy_value)
    # A detached alias shares the parameter's memory, as in eager.
    assert torch.equal(held_alias.cpu(), weight.cpu())


def test_a_freed_bound_tensor_traces_again():
    model, opt, fn, batches = _replayed_mlp()
    fn(*batches[3])
    assert fn.replayed_calls == 1
    del opt.state[model[0].weight]["momentum_buffer"]  # the step reads it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(*batches[4])  # momentum starts anew, as in a traced step
    assert fn.replayed_calls == 1 and fn.traced_calls == 4
    assert "momentum_buffer" in opt.state[model[0].weight]


@pytest.mark.parametrize(
    "change",
    [
        "argument_shape",
        "argument_dtype",
        "default_dtype",
        "autocast",
        "eval",
        "new_parameter",
        "hyperparameter",
        "pending_input",
        "frozen_parameter",
        "argument_requires_grad",
        "forward_hook",
    ],
)
def test_every_guard_change_traces_again(change: str):
    model, opt, fn, batches = _replayed_mlp()
    x, y = batches[3]
    fn(x, y)
    assert fn.replayed_calls == 1
    traced = fn.traced_calls
    restore = None
    if change == "argument_shape":
        x, y = x[:3], y[:3]
    elif change == "argument_dtype":
        x, y = x.double(), y.double()
        model.double()
    elif change == "default_dtype":
        torch.set_default_dtype(torch.float64)
    elif change == "autocast":
        restore = lazyfuse.autocast()
    elif change == "eval":
        model.eval()
    elif change == "new_parameter":
        model[0].weight = torch.nn.Parameter(model[0].weight.detach() * 0.5)
    elif change == "hyperparameter":
        opt.param_groups[0]["momentum"] = 0.5
    elif change == "pending_input":
        with torch.no_grad():
            model[0].weight.mul_(0.5)
    elif change == "frozen_parameter":
        model[0].weight.requires_grad_(False)
    elif change == "argument_requires_grad":
        x = x.detach().requires_grad_()
    elif change == "forward_hook":
        model[1].register_forward_hook(lambda module, args, out: out * 2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if restore is not None:
                with restore:
                    fn(x, y)
            else:
                fn(x, y)
    finally:
        torch.set_default_dtype(torch.float32)
    if change == "pending_input":
        # Synced first, then replayed: the step reads the new weight.
        assert fn.traced_calls == traced and fn.replayed_calls == 2
    else:
        assert fn.traced_calls == traced + 1, change


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_grad_mode_change_traces_again(mode: str):
    model = torch.nn.Linear(4, 2).to(DEV)
    fn = lazyfuse.compile(lambda x: model(x).sum(), replay=True)
    x = torch.randn(3, 4, device=DEV)
    results = [fn(x) for _ in range(3)]
    assert fn.replayed_calls == 1
    assert results[1].requires_grad and not results[2].requires_grad  # replayed: no grad_fn
    with torch.no_grad() if mode == "no_grad" else torch.inference_mode():
        fn(x)
    assert fn.traced_calls == 3


def test_a_changed_value_no_guard_sees_is_caught_by_the_periodic_check():
    model, opt, step = mlp()
    scale = {"value": 1.0}

    def scaled_step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x) * scale["value"], y)
        loss.backward()
        opt.step()
        return loss

    fn = lazyfuse.compile(scaled_step, replay=True, check_every=4)
    batches = [(x.to(DEV), y.to(DEV)) for x, y in make_batches(12, (6, 8), (6, 4))]
    for x, y in batches[:6]:
        fn(x, y)
    assert fn.replayed_calls == 3 and fn.traced_calls == 3  # momentum buffers made on call 1
    scale["value"] = 3.0  # frozen into the capture; no guard looks at it
    fn(*batches[6])  # replay 4 of 4: the stale value
    with pytest.warns(UserWarning, match="changed since it was captured"):
        fn(*batches[7])
    assert fn.traced_calls == 4
    fn(*batches[8])  # captured again: it agrees with the check's capture
    fn(*batches[9])
    assert fn.traced_calls == 5 and fn.replayed_calls == 5


def test_a_step_that_reads_a_value_midway_is_not_replayed():
    model, opt, step = mlp()

    def step_with_item(x, y):
        loss = step(x, y)
        scale = 2.0 if loss.item() > 0 else 1.0  # runs the step so far
        return loss * scale  # and this runs as a second graph

    fn = lazyfuse.compile(step_with_item, replay=True)
    with pytest.warns(UserWarning, match="ran 2 graphs"):
        for x, y in make_batches(6, (6, 8), (6, 4)):
            assert fn(x.to(DEV), y.to(DEV)).device.type == "lazy"
    assert fn.replayed_calls == 0


def test_replay_rejects_region_options():
    with pytest.raises(ValueError, match="replay=True"):
        lazyfuse.compile(lambda: None, replay=True, full_graph=True)
    with pytest.raises(ValueError, match="check_every"):
        lazyfuse.compile(lambda: None, replay=True, check_every=0)


def test_dropout_draws_fresh_numbers_on_every_replay():
    torch.manual_seed(0)
    x = torch.ones(64, device=DEV)

    def drop(x):
        return F.dropout(x, 0.5)

    fn = lazyfuse.compile(drop, replay=True)
    masks = [fn(x).cpu() for _ in range(6)]
    assert fn.replayed_calls == 4
    assert len({tuple(m.tolist()) for m in masks}) == 6
    torch.manual_seed(0)
    traced = lazyfuse.compile(drop)
    assert all(torch.equal(traced(x).cpu(), m) for m in masks)


def test_a_replayed_step_called_while_another_traces_is_part_of_its_graph():
    model = torch.nn.Linear(4, 4).to(DEV)
    inner = lazyfuse.compile(lambda x: model(x).relu(), replay=True)
    outer = lazyfuse.compile(lambda x: inner(x).sum() * 2, replay=True)
    x = torch.randn(3, 4, device=DEV)
    expected = (
        torch.nn.functional.linear(x.cpu(), model.weight.cpu(), model.bias.cpu()).relu().sum() * 2
    )
    for _ in range(4):
        torch.testing.assert_close(outer(x).cpu(), expected)
    assert outer.replayed_calls == 2 and inner.traced_calls == 0


def test_the_readme_example_runs_and_replays():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Replaying a training step", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    counts = re.search(r"(\d+) calls traced, (\d+) replayed", done.stdout)
    assert counts is not None, done.stdout
    assert int(counts[2]) >= 190 and int(counts[1]) + int(counts[2]) == 200


def test_a_tensor_the_step_stores_follows_replays_across_checks():
    model = torch.nn.Linear(4, 4).to(DEV)
    kept: dict[str, torch.Tensor] = {}

    def step(x):
        out = model(x).relu()
        kept["last"] = out * 2  # a Python side effect: a replay writes into the kept tensor
        return out

    fn = lazyfuse.compile(step, replay=True, check_every=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no check may find a difference
        for i in range(14):
            x = torch.full((2, 4), float(i), device=DEV)
            out = fn(x)
            torch.testing.assert_close(kept["last"].cpu(), out.cpu() * 2)
    assert fn.replayed_calls >= 9


def test_debug_level_one_says_why_a_call_was_traced(monkeypatch, capsys):
    monkeypatch.setattr(lazyfuse.replay, "_DEBUG", 1)
    model = torch.nn.Linear(4, 4).to(DEV)
    fn = lazyfuse.compile(lambda x: model(x).sum(), replay=True, check_every=2)
    for rows in (2, 2, 2, 2, 2, 3):
        fn(torch.ones(rows, 4, device=DEV))
    err = capsys.readouterr().err
    assert "captured; replays from the next call" in err
    assert "traced: the periodic check (every 2 replays)" in err
    assert "traced: tensor argument 0 changed its metadata" in err
    assert "replayed" not in err.replace("replay=True", "").replace("replays", "")


@pytest.mark.parametrize("assign", [False, True])
def test_load_state_dict_is_seen_by_the_next_call(assign: bool):
    model = torch.nn.Linear(4, 3).to(DEV)
    fn = lazyfuse.compile(lambda x: model(x) * 2, replay=True)
    x = torch.randn(2, 4)
    for _ in range(3):
        fn(x.to(DEV))
    assert fn.replayed_calls == 1
    other = torch.nn.Linear(4, 3)
    expected = (other(x) * 2).detach()
    # assign=True keeps the loaded tensors' device: load lazy ones.
    state = {k: v.to(DEV) for k, v in other.state_dict().items()} if assign else other.state_dict()
    weight = model.weight
    model.load_state_dict(state, assign=assign)
    for _ in range(4):
        torch.testing.assert_close(fn(x.to(DEV)).cpu(), expected)
    if not assign:
        # Copied into the same parameters, as PyTorch does by default: one
        # call traces (the guard on their values), and the rest replay.
        assert model.weight is weight
        assert (fn.traced_calls, fn.replayed_calls) == (3, 4)
    else:
        # New parameter objects: the step is captured again, then replays.
        assert model.weight is not weight
        assert fn.traced_calls <= 5 and fn.replayed_calls >= 2


def _step_reading_a_closure(weight: torch.Tensor) -> Callable[..., torch.Tensor]:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2 + y + weight

    return step


# (what the captured calls were passed, given the closure's tensor; what a
# later call is passed): the graph read one datum for two uses when
# captured, so a later call whose uses differ must trace. Found from
# outside: these replays read the wrong tensor.
_BINDINGS = {
    "one tensor for two arguments": (lambda w: (w, w), lambda a, b: (a, b)),
    "an argument read through a closure too": (lambda w: (w, w * 0), lambda a, b: (a, b)),
    "an argument sharing a closure's data": (lambda w: (w.detach(), w * 0), lambda a, b: (a, b)),
    "two tensors, then one for both": (lambda w: (w * 3, w * 4), lambda a, b: (a, a)),
}


@pytest.mark.parametrize("binding", list(_BINDINGS))
def test_arguments_that_shared_data_when_captured_replay_only_if_they_still_do(binding: str):
    captured, later = _BINDINGS[binding]
    weight = torch.ones(3, device=DEV)
    step = _step_reading_a_closure(weight)
    fn = lazyfuse.compile(step, replay=True)
    first = captured(weight)
    for _ in range(3):
        fn(*first)
    assert fn.replayed_calls == 1, fn.last_reason
    args = later(torch.full((3,), 10.0, device=DEV), torch.full((3,), 100.0, device=DEV))
    got = fn(*args).cpu()
    torch.testing.assert_close(got, step(*args).cpu(), rtol=0, atol=0)
    # Arguments that vary from call to call still replay.
    fn = lazyfuse.compile(step, replay=True)
    calls = [tuple(torch.randn(3, device=DEV) for _ in range(2)) for _ in range(5)]
    for call in calls:
        torch.testing.assert_close(fn(*call).cpu(), step(*call).cpu())
    assert fn.replayed_calls == 3


def _write_through_a_view(buffer: torch.Tensor, x: torch.Tensor) -> None:
    buffer[1:3] = buffer[1:3] * 0.5 + x[1:3]


def _write_the_base_of_a_held_view(buffer: torch.Tensor, x: torch.Tensor) -> None:
    buffer.mul_(0.5).add_(x)


@pytest.mark.parametrize(
    "write", [_write_through_a_view, _write_the_base_of_a_held_view], ids=["view", "base"]
)
def test_a_replay_keeps_a_tensor_and_its_views_in_step(write: Callable[..., None]):
    # Found from outside: functionalization applies a write to the tensors
    # that share its storage only when each is next read, after the step's
    # graph. The capture ran without that work, so every replay computed the
    # write and put it nowhere: the buffer (or the view held of it) kept the
    # value of the last traced call.
    xs = [torch.full((3, 4), float(i + 1)) for i in range(6)]
    expected = torch.zeros(3, 4)
    buffer = torch.zeros(3, 4, device=DEV)
    row, expected_row = buffer[1], expected[1]
    fn = lazyfuse.compile(replay=True)(lambda x: write(buffer, x))
    for x in xs:
        write(expected, x)
        fn(x.to(DEV))
        assert torch.equal(buffer.cpu(), expected)
        assert torch.equal(row.cpu(), expected_row)
    assert fn.replayed_calls >= 3, fn.last_reason
