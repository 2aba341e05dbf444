"""PyTorch's OpInfo samples, lazy against eager CPU, for every op lazyfuse claims.

Each (op, dtype) runs every sample the OpInfo provides: forward results, then
gradients where the OpInfo supports autograd, and on every sample an assertion
that nothing fell back to eager execution. Known gaps are strict xfails with a
reason (listed in docs/ops.md); an xfail that starts passing fails the run.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import lazyfuse

# OpInfo (name, variant) entries lazyfuse claims to lower without fallback.
CLAIMED: list[tuple[str, str]] = [
    ("abs", ""),
    ("add", ""),
    ("sub", ""),
    ("mul", ""),
    ("div", "no_rounding_mode"),
    ("neg", ""),
    ("exp", ""),
    ("log", ""),
    ("sqrt", ""),
    ("rsqrt", ""),
    ("sgn", ""),
    ("maximum", ""),
    ("minimum", ""),
    ("where", ""),
    ("masked_fill", ""),
    ("eq", ""),
    ("gt", ""),
    ("lt", ""),
    ("addcmul", ""),
    ("addcdiv", ""),
    ("lerp", ""),
    ("nn.functional.relu", ""),
    ("sigmoid", ""),
    ("tanh", ""),
    ("fill", ""),
    ("zero_", ""),
    ("clone", ""),
    ("sum", ""),
    ("mean", ""),
    ("softmax", ""),
    ("log_softmax", ""),
    ("nn.functional.nll_loss", ""),
    ("nn.functional.mse_loss", ""),
    ("mm", ""),
    ("addmm", ""),
    ("bmm", ""),
    ("nn.functional.conv2d", ""),
    ("nn.functional.avg_pool2d", ""),
    ("nn.functional.max_pool2d", ""),
    ("t", ""),
    ("transpose", ""),
    ("permute", ""),
    ("unsqueeze", ""),
    ("squeeze", ""),
    ("squeeze", "multiple"),
    ("view", ""),
    ("reshape", ""),
    ("flatten", ""),
    ("expand", ""),
    ("select", ""),
    ("narrow", ""),
]

# (name, variant, dtype or None for every dtype) -> why it fails today.
XFAIL: dict[tuple[str, str, torch.dtype | None], str] = {}

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool]

TALLY: Counter[str] = Counter()


def _opinfo(name: str, variant: str) -> Any:
    return next(o for o in op_db if o.name == name and o.variant_test_name == variant)


def _cases() -> list[Any]:
    cases = []
    for name, variant in CLAIMED:
        op = _opinfo(name, variant)
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype not in supported:
                continue
            reason = XFAIL.get((name, variant, dtype)) or XFAIL.get((name, variant, None))
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            test_id = (
                f"{name}{'.' + variant if variant else ''}-{str(dtype).removeprefix('torch.')}"
            )
            cases.append(pytest.param(op, dtype, marks=marks, id=test_id))
    return cases


def _to_lazy(value: Any, lazy: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        moved = value.detach().to(lazy)
        return moved.requires_grad_(value.requires_grad)
    return value


def _leaves(sample: Any) -> list[torch.Tensor]:
    flat, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _differentiable(out: Any) -> list[torch.Tensor]:
    flat, _ = tree_flatten(out)
    return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]


def _run_sample(op: Any, sample: Any, lazy: torch.device) -> None:
    # OpInfo samples may share tensors; fresh leaves keep gradients apart.
    sample = sample.transform(
        lambda t: (
            t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
        )
    )
    lazy_input = _to_lazy(sample.input, lazy)
    lazy_args = tree_map(lambda v: _to_lazy(v, lazy), sample.args)
    lazy_kwargs = tree_map(lambda v: _to_lazy(v, lazy), sample.kwargs)
    lazyfuse.metrics.reset()

    expected = op(sample.input, *sample.args, **sample.kwargs)
    actual = op(lazy_input, *lazy_args, **lazy_kwargs)
    eager_diff, lazy_diff = _differentiable(expected), _differentiable(actual)
    if eager_diff:
        weights = [torch.randn_like(t) for t in eager_diff]
        torch.autograd.backward(eager_diff, weights)
        torch.autograd.backward(lazy_diff, [w.to(lazy) for w in weights])
    lazyfuse.mark_step()

    expected_flat, _ = tree_flatten(expected)
    actual_flat, _ = tree_flatten(actual)
    for e, a in zip(expected_flat, actual_flat, strict=True):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a.cpu(), e.detach(), equal_nan=True)
        else:
            assert a == e
    eager_leaves = _leaves(sample)
    lazy_leaves, _ = tree_flatten((lazy_input, lazy_args, lazy_kwargs))
    lazy_leaves = [t for t in lazy_leaves if isinstance(t, torch.Tensor)]
    for e, a in zip(eager_leaves, lazy_leaves, strict=True):
        if e.grad is not None:
            torch.testing.assert_close(a.grad.cpu(), e.grad, equal_nan=True)
    fallbacks = lazyfuse.metrics.fallback_counts()
    assert fallbacks == {}, f"fell back to eager: {fallbacks}"


@pytest.mark.parametrize(("op", "dtype"), _cases())
def test_opinfo(
    op: Any, dtype: torch.dtype, lazy: torch.device, request: pytest.FixtureRequest
) -> None:
    grad = op.supports_autograd and dtype.is_floating_point
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
    failures = []
    for index, sample in enumerate(samples):
        torch.manual_seed(index)
        try:
            _run_sample(op, sample, lazy)
        except Exception as error:  # noqa: BLE001 - every failure is reported below
            lazyfuse.mark_step()
            failures.append(f"sample {index}: {type(error).__name__}: {str(error)[:300]}")
    TALLY["passed"] += len(samples) - len(failures)
    if request.node.get_closest_marker("xfail"):
        TALLY["xfail"] += len(failures)
    TALLY[f"op:{op.name}.{op.variant_test_name}"] = 1
    assert not failures, f"{len(failures)}/{len(samples)} samples failed:\n" + "\n".join(failures)


def opinfo_summary() -> str | None:
    ops = sum(1 for key in TALLY if key.startswith("op:"))
    if not ops:
        return None
    return f"opinfo: {ops} ops, {TALLY['passed']} samples passed, {TALLY['xfail']} xfail"
