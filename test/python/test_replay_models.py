"""lazyfuse.compile(step, replay=True) on training steps: the replayed run
gives the traced run's losses, parameters and optimizer state, bit for bit."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from replay_helpers import (
    DEV,
    STEPS,
    Build,
    assert_replays_like_traced,
    cnn,
    make_batches,
    mlp,
    run,
    training_step,
    transformer,
)

import lazyfuse

pytestmark = pytest.mark.usefixtures("synchronous_steps")


def testmlp_with_sgd_momentum_replays_bit_identical():
    fn = assert_replays_like_traced(mlp, make_batches(STEPS, (6, 8), (6, 4)))
    assert fn.traced_calls <= 3


def testcnn_with_batchnorm_switched_to_eval_replays_bit_identical():
    def switch(i: int, objects: Any) -> None:
        if i == 9:
            objects[0].eval()

    fn = assert_replays_like_traced(
        cnn, make_batches(STEPS, (4, 1, 8, 8), (4,), classes=10), between=switch, min_replays=12
    )
    assert fn.traced_calls <= 6  # two captures per mode, plus the first


# Changes between calls that change what the step's Python computes but no
# tensor the step binds: each replays like traced steps, never on the old
# capture. Found from outside: a frozen layer kept training under replay.
_BETWEEN_CALLS: dict[str, Callable[[int, Any], None]] = {
    "a layer frozen, then unfrozen": lambda i, objects: (
        [p.requires_grad_(i < 6 or i >= 12) for p in objects[0][0].parameters()]
        if i in (6, 12)
        else None
    ),
    "a forward hook added, then removed": lambda i, objects: (
        _HOOKS.append(objects[0][0].register_forward_hook(lambda m, a, out: out * 0.5))
        if i == 6
        else _HOOKS.pop().remove()
        if i == 12
        else None
    ),
    "a gradient hook added": lambda i, objects: (
        objects[0][3].weight.register_hook(lambda g: g.clamp(-1e-3, 1e-3)) if i == 6 else None
    ),
    "a global forward pre-hook added, then removed": lambda i, objects: (
        _HOOKS.append(
            torch.nn.modules.module.register_module_forward_pre_hook(
                lambda m, a: (a[0] * 2,) if isinstance(m, torch.nn.Linear) else None
            )
        )
        if i == 6
        else _HOOKS.pop().remove()
        if i == 12
        else None
    ),
}
_HOOKS: list[Any] = []


@pytest.mark.parametrize("change", list(_BETWEEN_CALLS))
def test_a_change_between_calls_replays_like_traced_steps(change: str):
    fn = assert_replays_like_traced(
        mlp, make_batches(STEPS, (6, 8), (6, 4)), between=_BETWEEN_CALLS[change], min_replays=8
    )
    assert fn.traced_calls >= 5, "the change was replayed on the old capture"


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
    assert_replays_like_traced(
        transformer,
        make_batches(STEPS, (3, 5, 16), (3, 4)),
        between=_step_lr_every_call(5),
        min_replays=15,
    )


def test_a_scheduler_stepped_inside_the_step_is_not_frozen():
    def build():
        model, opt, step = transformer()
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)

        def step_and_schedule(x, y):
            loss = step(x, y)
            sched.step()
            return loss

        return model, opt, step_and_schedule

    with pytest.warns(UserWarning, match="StepLR.step.. ran inside the step"):
        fn = assert_replays_like_traced(build, make_batches(8, (3, 5, 16), (3, 4)), min_replays=0)
    assert fn.replayed_calls == 0


def _adam(lr: float = 1e-2) -> tuple[torch.nn.Module, Any, Callable[..., Any]]:
    model = torch.nn.Linear(8, 4).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    return model, opt, training_step(model, opt)


def test_default_adam_is_not_frozen_and_says_why():
    with pytest.warns(
        UserWarning, match=r"cannot be replayed.*aten::\w+, made at .*replay_helpers.py:\d+ in step"
    ):
        fn = assert_replays_like_traced(_adam, make_batches(STEPS, (6, 8), (6, 4)), min_replays=0)
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

    fn = assert_replays_like_traced(
        mlp, make_batches(STEPS, (6, 8), (6, 4)), between=change, min_replays=8
    )
    assert fn.traced_calls >= 7  # the first capture, then two per change


def _tanh_mlp() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    model = model.to(DEV)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)


def test_gradient_accumulation_over_four_micro_steps():
    def build():
        model, opt = _tanh_mlp()

        def micro_step(x, y):
            loss = F.mse_loss(model(x), y) / 4
            loss.backward()
            return loss

        return model, opt, micro_step

    def optimizer_every_fourth(i: int, objects: Any) -> None:
        if i % 4 == 3:
            objects[1].step()
            objects[1].zero_grad()

    assert_replays_like_traced(
        build, make_batches(4 * 8, (6, 8), (6, 4)), between=optimizer_every_fourth, min_replays=8
    )


def test_gradient_accumulation_inside_the_step():
    def build():
        model, opt = _tanh_mlp()

        def step(x, y):
            opt.zero_grad()
            for k in range(4):
                (F.mse_loss(model(x[k]), y[k]) / 4).backward()
            opt.step()
            return model[0].weight.grad.sum()

        return model, opt, step

    assert_replays_like_traced(build, make_batches(STEPS, (4, 6, 8), (4, 6, 4)))


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
    batches = make_batches(STEPS, (6, 8), (6, 4))
    for i in (5, 12):  # overflowing steps: skipped, and the scale backs off
        batches[i] = (batches[i][0] * float("inf"), batches[i][1])
    return batches


def test_float16_step_with_grad_scaler_replays_bit_identical():
    assert_replays_like_traced(
        _float16_with_grad_scaler(lazyfuse.amp.GradScaler), _batches_with_infs(), min_replays=15
    )


def test_lazyfuse_grad_scaler_gives_torch_grad_scaler_values():
    batches = _batches_with_infs()
    torch_losses, torch_state, _, _ = run(
        _float16_with_grad_scaler(torch.amp.GradScaler), batches, False
    )
    losses, state, _, _ = run(_float16_with_grad_scaler(lazyfuse.amp.GradScaler), batches, False)
    for a, b in zip(torch_losses, losses, strict=True):
        assert torch.equal(a, b) or not torch.isfinite(a).all()
    for a, b in zip(torch_state, state, strict=True):
        assert torch.equal(a, b)


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
        assert_replays_like_traced(build, batches, min_replays=5)


@pytest.mark.parametrize(
    "build, x_shape, y_shape, classes",
    [
        (mlp, (6, 8), (6, 4), 0),
        (cnn, (4, 1, 8, 8), (4,), 10),
        (transformer, (3, 5, 16), (3, 4), 0),
    ],
    ids=["mlp_sgd_momentum", "cnn_batchnorm", "transformer_adamw"],
)
def test_a_replay_updates_every_tensor_in_its_own_memory(
    build: Build, x_shape: tuple[int, ...], y_shape: tuple[int, ...], classes: int
):
    """A CUDA graph of the step keeps the addresses it was captured with, so
    every parameter, buffer and optimizer state a replay updates must stay
    where it is (and the peak then holds one copy of them). A parameter and
    its base come out of a step as one tensor held twice; the graph reads
    one, and once counted that as a second reader, so biases moved."""
    torch.manual_seed(0)
    model, opt, step = build()
    fn = lazyfuse.compile(step, replay=True)
    batches = make_batches(6, x_shape, y_shape, classes)
    for x, y in batches[:5]:
        fn(x.to(DEV), y.to(DEV))
    assert fn.replayed_calls >= 2, fn.last_reason
    updated = list(model.parameters()) + list(model.buffers())
    updated += [t for state in opt.state.values() for t in state.values() if torch.is_tensor(t)]
    # Not 0-dim values (Adam's step, BatchNorm's count): host scalars, passed
    # to kernels by value, which a CUDA graph would freeze whatever their
    # memory (docs/performance.md, round 5).
    updated = [t for t in updated if t.dim() > 0]
    before = [lazyfuse.debug.data_address(t) for t in updated]
    fn(*(t.to(DEV) for t in batches[5]))
    after = [lazyfuse.debug.data_address(t) for t in updated]
    moved = [tuple(t.shape) for t, a, b in zip(updated, before, after, strict=True) if a != b]
    assert fn.replayed_calls >= 3, fn.last_reason
    assert not moved, f"a replay moved these tensors to new memory: {moved}"
