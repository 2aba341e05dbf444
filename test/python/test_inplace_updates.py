"""In-place ops on lazy tensors: Note [In-place updates without a meta
reference] (csrc/ops/inplace_updates.h). Values, dtypes, version counters
and errors against eager, over OpInfo's samples of every claimed op with an
in-place variant, under no_grad, with autograd recording and in inference
mode; and the trace of an optimizer step runs no Python meta kernel.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from types import FrameType
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_map

import lazyfuse
from conftest import ON_REFERENCE_TORCH, REFERENCE_DEVICE
from test_opinfo import CLAIMED, opinfo_entry

# Their in-place forms draw random numbers, which lazy tensors draw
# differently from eager (test_random.py checks them).
RANDOM = {"bernoulli", "nn.functional.dropout", "nn.functional.rrelu", "uniform", "normal"}
# In-place views change the tensor's shape and strides, not its values.
VIEWS = {"as_strided", "squeeze", "unsqueeze", "t", "transpose", "swapdims", "swapaxes"}
SAMPLES_PER_CASE = 8


MODES = ("no_grad", "autograd records", "inference_mode")

# Inference mode skips the autograd key where lazyfuse checks in-place
# results, and torch's own check runs these ops' Python meta kernels, which
# resize the target to the broadcast shape, or keep a dtype eager refuses,
# instead of raising. Functionalization then writes what they allow. A known
# torch gap; nothing lazyfuse registers runs before functionalization there.
LAX_META = (
    "in inference mode torch's Python meta kernel for this in-place op resizes its target"
    " (or keeps a dtype eager refuses) instead of raising, and functionalization writes that"
)
_LAX_BOTH = (
    "addr clamp_max clamp_min div.floor_rounding div.trunc_rounding eq floor_divide fmod ge gt"
    " heaviside le lt masked_scatter ne pow remainder"
).split()
_LAX_FLOAT = "atan2 copysign hypot igamma igammac nextafter xlogy".split()
_LAX_INT = "bitwise_and bitwise_or bitwise_xor gcd lcm ldexp logit".split()
XFAIL: dict[tuple[str, torch.dtype, str], str] = {
    (label, dtype, "inference_mode"): LAX_META
    for labels, dtypes in (
        (_LAX_BOTH, (torch.float32, torch.int64)),
        (_LAX_FLOAT, (torch.float32,)),
        (_LAX_INT, (torch.int64,)),
    )
    for label in labels
    for dtype in dtypes
}


def _inplace_cases() -> list[Any]:
    cases = []
    for name, variant in CLAIMED:
        op = opinfo_entry(name, variant)
        if op.inplace_variant is None or name in RANDOM | VIEWS:
            continue
        for mode in MODES:
            # Only floating tensors can require grad.
            dtypes = (
                (torch.float32,) if mode == "autograd records" else (torch.float32, torch.int64)
            )
            for dtype in dtypes:
                if dtype not in op.supported_dtypes(REFERENCE_DEVICE):
                    continue
                label = f"{name}.{variant}" if variant else name
                reason = XFAIL.get((label, dtype, mode))
                # Other torch releases register other meta kernels.
                strict = ON_REFERENCE_TORCH
                marks = [pytest.mark.xfail(reason=reason, strict=strict)] if reason else []
                test_id = f"{label}-{str(dtype)[6:]}-{mode.replace(' ', '_')}"
                cases.append(pytest.param(op, dtype, mode, marks=marks, id=test_id))
    return cases


def _mode(mode: str) -> Any:
    if mode == "no_grad":
        return torch.no_grad()
    return torch.inference_mode() if mode == "inference_mode" else contextlib.nullcontext()


def _target(tensor: torch.Tensor, mode: str) -> torch.Tensor:
    # A leaf that requires grad refuses in-place ops; its clone does not.
    return tensor.requires_grad_().clone() if mode == "autograd records" else tensor


def _run(inplace: Any, target: torch.Tensor, sample: Any, device: torch.device) -> Any:
    move = lambda v: v.to(device) if isinstance(v, torch.Tensor) else v  # noqa: E731
    return inplace(target, *tree_map(move, sample.args), **tree_map(move, sample.kwargs))


@pytest.mark.parametrize(("op", "dtype", "mode"), _inplace_cases())
def test_inplace_variant_matches_eager(
    op: Any, dtype: torch.dtype, mode: str, lazy: torch.device
) -> None:
    samples = [
        s
        for s in op.sample_inputs(REFERENCE_DEVICE, dtype, requires_grad=False)
        if isinstance(s.input, torch.Tensor)
    ][:SAMPLES_PER_CASE]
    for index, sample in enumerate(samples):
        original = sample.input.clone()
        expected = _target(original.clone(), mode)
        target = _target(original.to(lazy), mode)
        versions = (expected._version, target._version)
        with _mode(mode):
            try:
                _run(op.inplace_variant, expected, sample, expected.device)
                eager_error = None
            except Exception as error:  # noqa: BLE001 - lazy must then raise too
                eager_error = error
            # Eager's addbmm_ resizes a target that broadcasts to its result
            # (its out= kernel does, with a deprecation warning). Lazy tensors
            # refuse, as every other in-place op does.
            resized = eager_error is None and expected.shape != original.shape
            if eager_error is not None or resized:
                with pytest.raises(Exception):  # noqa: B017, PT011 - eager's type may differ
                    _run(op.inplace_variant, target, sample, lazy)
                    lazyfuse.mark_step()
            else:
                returned = _run(op.inplace_variant, target, sample, lazy)
                assert returned is target, f"sample {index}: returned another tensor"
        lazyfuse.mark_step()
        if eager_error is not None or resized:
            # Nothing was written, and the process goes on.
            assert target._version == versions[1], f"sample {index}"
            torch.testing.assert_close(target.detach().cpu(), original, equal_nan=True)
            continue
        assert target._version - versions[1] == expected._version - versions[0], f"sample {index}"
        assert (target.shape, target.dtype) == (expected.shape, expected.dtype), f"sample {index}"
        torch.testing.assert_close(target.detach().cpu(), expected.detach(), equal_nan=True)


@pytest.mark.parametrize("grad_mode", ["no_grad", "grad mode, nothing requires grad"])
def test_inplace_errors_name_the_op_and_write_nothing(grad_mode: str, lazy: torch.device) -> None:
    mode = torch.no_grad() if grad_mode == "no_grad" else torch.enable_grad()
    with mode:
        x = torch.arange(3.0, device=lazy)
        ints = torch.arange(3, device=lazy)
        with pytest.raises(RuntimeError, match=r"aten::addcdiv_: output with shape \[3\] doesn't"):
            x.addcdiv_(torch.ones(2, 3, device=lazy), torch.ones(3, device=lazy))
        with pytest.raises(RuntimeError, match=r"aten::lerp_: output with shape \[3\] doesn't"):
            x.lerp_(torch.ones(2, 3, device=lazy), 0.5)
        with pytest.raises(RuntimeError, match="aten::sqrt_: result type Float can't be cast"):
            ints.sqrt_()
        with pytest.raises(RuntimeError, match="aten::mul_: result type Float can't be cast"):
            ints.mul_(0.5)
        assert (x._version, ints._version) == (0, 0)
        x.add_(1)
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert ints.tolist() == [0, 1, 2]


def test_inplace_errors_raise_in_inference_mode(lazy: torch.device) -> None:
    # Inference mode skips autograd keys, so torch's own path raises there.
    with torch.inference_mode():
        x = torch.zeros(3, device=lazy)
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            x.addcmul_(torch.ones(2, 3, device=lazy), torch.ones(3, device=lazy))
        assert x.tolist() == [0.0, 0.0, 0.0]


def test_inplace_update_of_a_view_writes_its_base(lazy: torch.device) -> None:
    base = torch.zeros(4, 3)
    a, b = torch.randn(3), torch.randn(3)
    lazy_base = base.to(lazy)
    with torch.no_grad():
        base[1].addcmul_(a, b, value=2).lerp_(a, 0.25)
        lazy_base[1].addcmul_(a.to(lazy), b.to(lazy), value=2).lerp_(a.to(lazy), 0.25)
        base[:, 2].clamp_(min=0.5)
        lazy_base[:, 2].clamp_(min=0.5)
    torch.testing.assert_close(lazy_base.cpu(), base)


def test_inplace_ops_autograd_records_stay_torchs(lazy: torch.device) -> None:
    # An in-place op autograd records keeps torch's kernels: the same
    # grad_fn, the same gradients.
    def run(device: torch.device) -> tuple[str, torch.Tensor]:
        w = torch.arange(-2.0, 3.0, device=device).requires_grad_()
        h = w * 3
        h.addcmul_(w, w, value=0.5).relu_()
        h.sum().backward()
        return type(h.grad_fn).__name__, w.grad.cpu()

    eager_fn, eager_grad = run(torch.device("cpu"))
    lazy_fn, lazy_grad = run(lazy)
    assert lazy_fn == eager_fn
    torch.testing.assert_close(lazy_grad, eager_grad)


def test_inplace_on_a_tensor_autograd_saved_still_raises(lazy: torch.device) -> None:
    w = torch.ones(3, device=lazy, requires_grad=True)
    y = w.sigmoid()  # saves its output for backward
    with torch.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_optimizer_step_runs_no_python_meta_kernel(lazy: torch.device) -> None:
    # Before the fix every in-place update ran torch's Python meta kernel
    # for it (torch/_meta_registrations.py), ten times the cost of the op.
    model = torch.nn.Linear(8, 4).to(lazy)
    optimizers = [
        torch.optim.Adam(model.parameters(), lr=1e-3),
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, nesterov=True),
    ]
    meta_calls: list[str] = []

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event == "call" and frame.f_code.co_filename.endswith("_meta_registrations.py"):
            meta_calls.append(frame.f_code.co_name)

    for optimizer in optimizers:
        model(torch.randn(2, 8, device=lazy)).sum().backward()
        sys.setprofile(profile)
        try:
            optimizer.step()
        finally:
            sys.setprofile(None)
        lazyfuse.mark_step()
    assert meta_calls == []


def test_switch_leaves_inplace_ops_to_torch() -> None:
    # LAZYFUSE_INPLACE_UPDATES=0 is torch's path: its Python meta kernels run.
    code = textwrap.dedent(
        """
        import sys, torch, lazyfuse
        model = torch.nn.Linear(8, 4).to(lazyfuse.lazy_device())
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.randn(2, 8, device=lazyfuse.lazy_device())).sum().backward()
        calls = []
        sys.setprofile(lambda frame, event, _: calls.append(frame.f_code.co_filename)
                       if event == "call" else None)
        optimizer.step()
        sys.setprofile(None)
        print(sum(name.endswith("_meta_registrations.py") for name in calls))
        """
    )
    env = {**os.environ, "LAZYFUSE_INPLACE_UPDATES": "0"}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1]) > 0


def test_optimizer_steps_match_eager(lazy: torch.device) -> None:
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    model.load_state_dict(eager.state_dict())
    model.to(lazy)
    make = [
        lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
        lambda p: torch.optim.AdamW(p, lr=1e-2),
        lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5),
        lambda p: torch.optim.Adagrad(p, lr=1e-2),
    ]
    for factory in make:
        eager_opt, lazy_opt = factory(eager.parameters()), factory(model.parameters())
        for step in range(3):
            x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step))
            for net, opt, data in ((eager, eager_opt, x), (model, lazy_opt, x.to(lazy))):
                opt.zero_grad()
                net(data).square().mean().backward()
                opt.step()
            lazyfuse.mark_step()
        for e, a in zip(eager.parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(a.cpu(), e.detach(), rtol=1e-5, atol=1e-6)
