"""PyTorch's ModuleInfo samples (torch.testing's module_db), lazy against eager
CPU: every nn module, in training and eval mode where they differ, moved to
the lazy device with ``.to()`` as a user would, must give eager's outputs,
gradients (of its parameters and its inputs) and buffers.

Found from outside: a lazy module (``nn.LazyLinear``, ``nn.LazyConv2d``,
``nn.LazyBatchNorm1d``) moved with ``.to(lazy)`` lost its uninitialized
parameters, and its first call failed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch.nn.parameter import UninitializedTensorMixin
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_flatten, tree_map

import lazyfuse

RANDOM_REASON = (
    "draws random numbers, which lazy tensors draw from a generator of their own, "
    "not eager's (README, 'Notes for PyTorch users')"
)
RANDOM_MODULES = ("Dropout", "RReLU", "FractionalMaxPool")


def _case(info: Any) -> Any:
    name = info.module_cls.__name__
    marks = (
        [pytest.mark.skip(reason=RANDOM_REASON)] if any(r in name for r in RANDOM_MODULES) else []
    )
    return pytest.param(info, marks=marks, id=name)


def leaf_copies(device: torch.device | str, values: Any) -> Any:
    """The tensors of `values` as new leaves on `device`, each requiring grad
    as its source does: a sample's inputs may be non-leaf tensors."""

    def copy_one(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().to(device).requires_grad_(value.requires_grad)
        return value

    return tree_map(copy_one, values)


def on_cpu(values: Any) -> Any:
    return tree_map(lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v, values)


def has_uninitialized(module: torch.nn.Module) -> bool:
    tensors = list(module.parameters()) + list(module.buffers())
    return any(isinstance(t, UninitializedTensorMixin) for t in tensors)


def weighted_sum(outputs: list[torch.Tensor], device: torch.device | str) -> torch.Tensor:
    return sum(
        (v * torch.linspace(-1, 1, v.numel()).reshape(v.shape).to(device)).sum() for v in outputs
    )


def gradients(module: torch.nn.Module, inputs: Any) -> list[torch.Tensor | None]:
    tensors = [t for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)]
    return [p.grad for p in module.parameters()] + [t.grad for t in tensors if t.requires_grad]


def check_sample(info: Any, sample: Any, training: bool) -> str | None:
    """What differs between eager and lazy for one sample, or None."""
    torch.manual_seed(0)
    try:
        eager = info.module_cls(*sample.constructor_input.args, **sample.constructor_input.kwargs)
    except Exception:
        return None  # a sample of a constructor this torch refuses
    eager.train(training)
    device = lazyfuse.lazy_device()
    lazy = copy.deepcopy(eager).to(device)
    forward = (sample.forward_input.args, sample.forward_input.kwargs)
    if has_uninitialized(eager):
        # A first call makes the parameters, each engine with its own random
        # numbers; the lazy module then takes eager's.
        args, kwargs = leaf_copies("cpu", forward)
        eager(*args, **kwargs)
        args, kwargs = leaf_copies(device, forward)
        lazy(*args, **kwargs)
        lazy.load_state_dict(eager.state_dict())
    eager_inputs, lazy_inputs = leaf_copies("cpu", forward), leaf_copies(device, forward)
    try:
        expected = eager(*eager_inputs[0], **eager_inputs[1])
    except Exception as error:
        expected = error
    try:
        got = lazy(*lazy_inputs[0], **lazy_inputs[1])
        on_cpu(got)
    except Exception as error:
        got = error
    if isinstance(expected, Exception) or isinstance(got, Exception):
        if type(expected) is not type(got):
            return f"eager gave {expected!r:.100}, lazy {got!r:.300}"
        return None
    try:
        torch.testing.assert_close(
            on_cpu(got), on_cpu(expected), atol=1e-4, rtol=1e-4, equal_nan=True
        )
    except AssertionError as error:
        return f"forward: {error}"
    expected_outputs = [v for v in tree_flatten(expected)[0] if isinstance(v, torch.Tensor)]
    expected_outputs = [v for v in expected_outputs if v.requires_grad]
    if not expected_outputs:
        return None
    got_outputs = [
        v for v in tree_flatten(got)[0] if isinstance(v, torch.Tensor) and v.requires_grad
    ]
    weighted_sum(expected_outputs, "cpu").backward()
    weighted_sum(got_outputs, device).backward()
    try:
        torch.testing.assert_close(
            on_cpu(gradients(lazy, lazy_inputs)),
            gradients(eager, eager_inputs),
            atol=1e-4,
            rtol=1e-4,
            equal_nan=True,
        )
        torch.testing.assert_close(
            on_cpu(list(lazy.buffers())),
            list(eager.buffers()),
            atol=1e-4,
            rtol=1e-4,
            equal_nan=True,
        )
    except AssertionError as error:
        return f"backward: {error}"
    return None


@pytest.mark.parametrize("info", [_case(info) for info in module_db])
def test_module_samples_match_eager(info: Any) -> None:
    problems = {}
    for training in [True, False] if info.train_and_eval_differ else [True]:
        samples = info.module_inputs_func(
            info, device="cpu", dtype=torch.float32, requires_grad=True, training=training
        )
        for k, sample in enumerate(samples):
            if sample.forward_input is None:
                continue
            if problem := check_sample(info, sample, training):
                problems[f"sample {k}, {'training' if training else 'eval'}"] = problem
    assert not problems, problems
