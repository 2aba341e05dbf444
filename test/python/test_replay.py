"""lazyfuse.compile(fn, replay=True): a replayed step gives the traced step's
values, bit for bit, and traces again whenever a guard changes."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import lazyfuse

DEV = lazyfuse.lazy_device()
STEPS = 20

Build = Callable[[], tuple[torch.nn.Module, Any, Callable[..., Any]]]


def _batches(n: int, x_shape: tuple[int, ...], y_shape: tuple[int, ...], classes: int = 0) -> list:
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        x = torch.randn(x_shape, generator=gen)
        y = (
            torch.randint(0, classes, y_shape, generator=gen)
            if classes
            else torch.randn(y_shape, generator=gen)
        )
        out.append((x, y))
    return out


def _state(model: torch.nn.Module, opt: Any) -> list[torch.Tensor]:
    tensors = [t.detach().cpu() for t in model.state_dict().values()]
    if opt is not None:
        for state in opt.state_dict()["state"].values():
            tensors += [v.detach().cpu() for v in state.values() if isinstance(v, torch.Tensor)]
    return tensors


def _run(
    build: Build, batches: list, replay: bool, between: Callable[[int, Any], None] | None = None
):
    torch.manual_seed(0)
    model, opt, step = build()
    calls = [0]

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return step(*args)

    fn = lazyfuse.compile(counted, replay=True) if replay else lazyfuse.compile(counted)
    torch.manual_seed(2)  # dropout draws from here on
    losses = []
    for i, (x, y) in enumerate(batches):
        losses.append(fn(x.to(DEV), y.to(DEV)).detach().cpu())
        if between is not None:
            between(i, (model, opt))
    return losses, _state(model, opt), calls[0], fn


def _assert_replays_like_traced(build: Build, batches: list, between=None, min_replays: int = 10):
    traced_losses, traced_state, _, _ = _run(build, batches, False, between)
    losses, state, calls, fn = _run(build, batches, True, between)
    for step, (a, b) in enumerate(zip(traced_losses, losses, strict=True)):
        assert torch.equal(a, b) or (a.isnan().all() and b.isnan().all()), (
            f"loss differs at step {step}: {a} vs {b}"
        )
    assert len(traced_state) == len(state)
    for a, b in zip(traced_state, state, strict=True):
        assert torch.equal(a, b)
    assert fn.replayed_calls >= min_replays, fn.last_reason
    assert calls == fn.traced_calls  # the body runs only when traced
    return fn


def _mlp() -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 4)
    ).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


def test_mlp_with_sgd_momentum_replays_bit_identical():
    fn = _assert_replays_like_traced(_mlp, _batches(STEPS, (6, 8), (6, 4)))
    assert fn.traced_calls <= 3


def _cnn() -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 3 * 3, 10),
    ).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


def test_cnn_with_batchnorm_switched_to_eval_replays_bit_identical():
    def switch(i: int, objects: Any) -> None:
        if i == 9:
            objects[0].eval()

    fn = _assert_replays_like_traced(
        _cnn, _batches(STEPS, (4, 1, 8, 8), (4,), classes=10), between=switch, min_replays=12
    )
    assert fn.traced_calls <= 6  # two captures per mode, plus the first


def _transformer() -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Sequential(
        torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True),
        torch.nn.Linear(16, 4),
    ).to(DEV)
    opt = torch.optim.AdamW(
        model.parameters(), lr=torch.tensor(1e-2, device=DEV), capturable=True, weight_decay=0.01
    )

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x)[:, 0], y)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


def _step_lr_every_call(step_size: int) -> Callable[[int, Any], None]:
    schedulers: dict[int, Any] = {}

    def scheduler_step(i: int, objects: Any) -> None:
        opt = objects[1]
        if id(opt) not in schedulers:
            schedulers[id(opt)] = torch.optim.lr_scheduler.StepLR(opt, step_size, gamma=0.3)
        schedulers[id(opt)].step()

    return scheduler_step


def test_transformer_with_capturable_adamw_and_scheduler_replays_bit_identical():
    # The scheduler fills the tensor lr: the step reads it, so nothing is frozen.
    _assert_replays_like_traced(
        _transformer,
        _batches(STEPS, (3, 5, 16), (3, 4)),
        between=_step_lr_every_call(5),
        min_replays=15,
    )


def test_a_scheduler_stepped_inside_the_step_is_not_frozen():
    def build():
        model, opt, step = _transformer()
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)

        def step_and_schedule(x, y):
            loss = step(x, y)
            sched.step()
            return loss

        return model, opt, step_and_schedule

    with pytest.warns(UserWarning, match="StepLR.step.. ran inside the step"):
        fn = _assert_replays_like_traced(build, _batches(8, (3, 5, 16), (3, 4)), min_replays=0)
    assert fn.replayed_calls == 0


def _adam(lr: float = 1e-2) -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Linear(8, 4).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


def test_default_adam_is_not_frozen_and_says_why():
    with pytest.warns(
        UserWarning, match=r"cannot be replayed.*aten::\w+, made at .*test_replay.py:\d+"
    ):
        fn = _assert_replays_like_traced(_adam, _batches(STEPS, (6, 8), (6, 4)), min_replays=0)
    assert fn.replayed_calls == 0
    assert "capturable=True" in fn.last_reason


@pytest.mark.parametrize("how", ["scheduler", "user"])
def test_a_float_lr_changed_mid_run_is_never_stale(how: str):
    scheduler_step = _step_lr_every_call(7)

    def change(i: int, objects: Any) -> None:
        if how == "scheduler":
            scheduler_step(i, objects)
        elif i in (6, 13):
            opt = objects[1]
            for group in opt.param_groups:
                group["lr"] *= 0.3

    fn = _assert_replays_like_traced(
        _mlp, _batches(STEPS, (6, 8), (6, 4)), between=change, min_replays=8
    )
    assert fn.traced_calls >= 7  # the first capture, then two per change


def test_gradient_accumulation_over_four_micro_steps():
    def build():
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)
        ).to(DEV)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)

        def micro_step(x, y):
            loss = F.mse_loss(model(x), y) / 4
            loss.backward()
            return loss

        return model, opt, micro_step

    def optimizer_every_fourth(i: int, objects: Any) -> None:
        if i % 4 == 3:
            objects[1].step()
            objects[1].zero_grad()

    _assert_replays_like_traced(
        build, _batches(4 * 8, (6, 8), (6, 4)), between=optimizer_every_fourth, min_replays=8
    )


def test_gradient_accumulation_inside_the_step():
    def build():
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)
        ).to(DEV)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)

        def step(x, y):
            opt.zero_grad()
            for k in range(4):
                (F.mse_loss(model(x[k]), y[k]) / 4).backward()
            opt.step()
            return model[0].weight.grad.sum()

        return model, opt, step

    _assert_replays_like_traced(build, _batches(STEPS, (4, 6, 8), (4, 6, 4)))


def _replayed_mlp():
    torch.manual_seed(0)
    model, opt, step = _mlp()
    fn = lazyfuse.compile(replay=True)(step)
    batches = [(x.to(DEV), y.to(DEV)) for x, y in _batches(8, (6, 8), (6, 4))]
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
    model, opt, step = _mlp()
    scale = {"value": 1.0}

    def scaled_step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x) * scale["value"], y)
        loss.backward()
        opt.step()
        return loss

    fn = lazyfuse.compile(scaled_step, replay=True, check_every=4)
    batches = [(x.to(DEV), y.to(DEV)) for x, y in _batches(12, (6, 8), (6, 4))]
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
    model, opt, step = _mlp()

    def step_with_item(x, y):
        loss = step(x, y)
        return loss.item()

    fn = lazyfuse.compile(step_with_item, replay=True)
    with pytest.warns(UserWarning, match="ran 2 graphs"):
        for x, y in _batches(6, (6, 8), (6, 4)):
            assert isinstance(fn(x.to(DEV), y.to(DEV)), float)
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


def _float16_with_grad_scaler(scaler_class: type) -> Build:
    def build():
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
        ).to(DEV)
        opt = torch.optim.Adam(
            model.parameters(), lr=torch.tensor(1e-2, device=DEV), capturable=True
        )
        scaler = scaler_class("lazy", init_scale=2.0**10, growth_interval=3)
        model.scaler = scaler  # type: ignore[assignment]  # so the test can read its scale

        def step(x, y):
            opt.zero_grad()
            with lazyfuse.autocast(dtype=torch.float16):
                loss = F.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss

        return model, opt, step

    return build


def _batches_with_infs() -> list:
    batches = _batches(STEPS, (6, 8), (6, 4))
    for i in (5, 12):  # overflowing steps: skipped, and the scale backs off
        batches[i] = (batches[i][0] * float("inf"), batches[i][1])
    return batches


def test_float16_step_with_grad_scaler_replays_bit_identical():
    _assert_replays_like_traced(
        _float16_with_grad_scaler(lazyfuse.amp.GradScaler), _batches_with_infs(), min_replays=15
    )


def test_lazyfuse_grad_scaler_gives_torch_grad_scaler_values():
    batches = _batches_with_infs()
    torch_losses, torch_state, _, _ = _run(
        _float16_with_grad_scaler(torch.amp.GradScaler), batches, False
    )
    losses, state, _, _ = _run(_float16_with_grad_scaler(lazyfuse.amp.GradScaler), batches, False)
    for a, b in zip(torch_losses, losses, strict=True):
        assert torch.equal(a, b) or not torch.isfinite(a).all()
    for a, b in zip(torch_state, state, strict=True):
        assert torch.equal(a, b)


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


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_hugging_face_models_replay_bit_identical(kind: str):
    transformers = pytest.importorskip("transformers", reason="scripts/setup_env.sh installs it")

    def build():
        if kind == "gpt2":
            config = transformers.GPT2Config(
                n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=16
            )
            model = transformers.GPT2LMHeadModel(config)
        else:
            config = transformers.LlamaConfig(
                num_hidden_layers=2,
                hidden_size=32,
                intermediate_size=64,
                num_attention_heads=2,
                num_key_value_heads=1,
                vocab_size=100,
                max_position_embeddings=16,
            )
            model = transformers.LlamaForCausalLM(config)
        model = model.to(DEV)
        opt = torch.optim.AdamW(
            model.parameters(), lr=torch.tensor(1e-3, device=DEV), capturable=True
        )

        def step(ids, labels):
            opt.zero_grad()
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            return loss

        return model, opt, step

    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(8):
        ids = torch.randint(0, 100, (2, 12), generator=gen)
        batches.append((ids, ids))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' own notices
        _assert_replays_like_traced(build, batches, min_replays=5)


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
