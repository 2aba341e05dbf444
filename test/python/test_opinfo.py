"""PyTorch's OpInfo samples, lazy against eager CPU, for every op lazyfuse claims.

Each (op, dtype) runs every sample the OpInfo provides: forward results, then
gradients where the OpInfo supports autograd, and on every sample an assertion
that nothing fell back to eager execution. Known gaps are strict xfails with a
reason (listed in docs/ops.md); an xfail that starts passing fails the run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._lazy  # noqa: F401 - OpInfo's wrapper_set_seed calls torch._lazy.mark_step()
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import lazyfuse
from conftest import HOST_COMPILER, ON_CUDA

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
    ("std", ""),
    ("index_select", ""),
    ("chunk", ""),
    ("unsafe_chunk", ""),
    ("split", ""),
    ("split", "list_args"),
    ("unsafe_split", ""),
    ("split_with_sizes", ""),
    ("split_with_sizes_copy", ""),
    ("unbind", ""),
    ("nn.functional.binary_cross_entropy_with_logits", ""),
    ("__getitem__", ""),
    ("index_put", ""),
    ("float_power", ""),
    ("true_divide", ""),
    ("rad2deg", ""),
    ("deg2rad", ""),
    ("nn.functional.celu", ""),
    ("nn.functional.selu", ""),
    ("nn.functional.relu6", ""),
    ("nn.functional.softsign", ""),
    ("nn.functional.tanhshrink", ""),
    ("nn.functional.softmin", ""),
    ("double", ""),
    ("float", ""),
    ("long", ""),
    ("bool", ""),
    ("int", ""),
    ("to", ""),
    ("nn.functional.scaled_dot_product_attention", ""),
    ("matmul", ""),
    ("nn.functional.linear", ""),
    ("nn.functional.conv1d", ""),
    ("nn.functional.pad", "constant"),
    ("div", "floor_rounding"),
]

# yaml ops whose op-by-op coverage is an OpInfo claim rather than a hand-written
# case in test_ops.py: yaml op -> the OpInfo (name, variant) that reaches it.
VIA_OPINFO: dict[str, tuple[str, str]] = {
    "acos": ("acos", ""),
    "asin": ("asin", ""),
    "atan": ("atan", ""),
    "ceil": ("ceil", ""),
    "cos": ("cos", ""),
    "cosh": ("cosh", ""),
    "erf": ("erf", ""),
    "exp2": ("exp2", ""),
    "expm1": ("expm1", ""),
    "floor": ("floor", ""),
    "frac": ("frac", ""),
    "log10": ("log10", ""),
    "log1p": ("log1p", ""),
    "log2": ("log2", ""),
    "reciprocal": ("reciprocal", ""),
    "round": ("round", ""),
    "sign": ("sign", ""),
    "sin": ("sin", ""),
    "sinh": ("sinh", ""),
    "tan": ("tan", ""),
    "trunc": ("trunc", ""),
    "atan2": ("atan2", ""),
    "erfc": ("erfc", ""),
    "erfinv": ("erfinv", ""),
    "lgamma": ("lgamma", ""),
    "digamma": ("digamma", ""),
    "sinc": ("sinc", ""),
    "asinh": ("asinh", ""),
    "acosh": ("acosh", ""),
    "atanh": ("atanh", ""),
    "signbit": ("signbit", ""),
    "xlogy.Tensor": ("xlogy", ""),
    "hypot": ("hypot", ""),
    "logaddexp": ("logaddexp", ""),
    "logaddexp2": ("logaddexp2", ""),
    "copysign.Tensor": ("copysign", ""),
    "fmin": ("fmin", ""),
    "fmax": ("fmax", ""),
    "heaviside": ("heaviside", ""),
    "nextafter": ("nextafter", ""),
    "hardshrink": ("nn.functional.hardshrink", ""),
    "softshrink": ("nn.functional.softshrink", ""),
    "hardshrink_backward": ("nn.functional.hardshrink", ""),
    "softshrink_backward": ("nn.functional.softshrink", ""),
    "polygamma": ("digamma", ""),
    "glu": ("nn.functional.glu", ""),
    "glu_backward": ("nn.functional.glu", ""),
    "fmod.Tensor": ("fmod", ""),
    "remainder.Tensor": ("remainder", ""),
    "pow.Tensor_Tensor": ("pow", ""),
    "div.Tensor_mode": ("div", "trunc_rounding"),
    "clamp": ("clamp", ""),
    "clamp.Tensor": ("clamp", ""),
    "clamp_min": ("clamp_min", ""),
    "clamp_max": ("clamp_max", ""),
    "clamp_min.Tensor": ("clamp_min", ""),
    "clamp_max.Tensor": ("clamp_max", ""),
    "isnan": ("isnan", ""),
    "isneginf": ("isneginf", ""),
    "isposinf": ("isposinf", ""),
    "logical_not": ("logical_not", ""),
    "logical_and": ("logical_and", ""),
    "logical_or": ("logical_or", ""),
    "logical_xor": ("logical_xor", ""),
    "bitwise_not": ("bitwise_not", ""),
    "bitwise_and.Tensor": ("bitwise_and", ""),
    "bitwise_or.Tensor": ("bitwise_or", ""),
    "bitwise_xor.Tensor": ("bitwise_xor", ""),
    "gcd": ("gcd", ""),
    "lcm": ("lcm", ""),
    "gelu": ("nn.functional.gelu", ""),
    "gelu_backward": ("nn.functional.gelu", ""),
    "silu": ("nn.functional.silu", ""),
    "silu_backward": ("nn.functional.silu", ""),
    "softplus": ("nn.functional.softplus", ""),
    "softplus_backward": ("nn.functional.softplus", ""),
    "leaky_relu": ("nn.functional.leaky_relu", ""),
    "leaky_relu_backward": ("nn.functional.leaky_relu", ""),
    "elu": ("nn.functional.elu", ""),
    "elu_backward": ("nn.functional.elu", ""),
    "hardtanh": ("nn.functional.hardtanh", ""),
    "hardtanh_backward": ("nn.functional.hardtanh", ""),
    "hardswish": ("nn.functional.hardswish", ""),
    "hardswish_backward": ("nn.functional.hardswish", ""),
    "hardsigmoid": ("nn.functional.hardsigmoid", ""),
    "hardsigmoid_backward": ("nn.functional.hardsigmoid", ""),
    "mish": ("nn.functional.mish", ""),
    "threshold": ("nn.functional.threshold", ""),
    "eq.Scalar": ("eq", ""),
    "ne.Scalar": ("ne", ""),
    "ne.Tensor": ("ne", ""),
    "ge.Scalar": ("ge", ""),
    "ge.Tensor": ("ge", ""),
    "gt.Scalar": ("gt", ""),
    "le.Scalar": ("le", ""),
    "le.Tensor": ("le", ""),
    "lt.Scalar": ("lt", ""),
    "amax": ("amax", ""),
    "amin": ("amin", ""),
    "max": ("max", "reduction_no_dim"),
    "max.dim": ("max", "reduction_with_dim"),
    "min": ("min", "reduction_no_dim"),
    "min.dim": ("min", "reduction_with_dim"),
    "prod": ("prod", ""),
    "prod.dim_int": ("prod", ""),
    "var.correction": ("var", ""),
    "argmax": ("argmax", ""),
    "argmin": ("argmin", ""),
    "logsumexp": ("logsumexp", ""),
    "linalg_vector_norm": ("linalg.vector_norm", ""),
    "cumsum": ("cumsum", ""),
    "cumprod": ("cumprod", ""),
    "all": ("all", ""),
    "all.dim": ("all", ""),
    "all.dims": ("all", ""),
    "any": ("any", ""),
    "any.dim": ("any", ""),
    "any.dims": ("any", ""),
    "native_layer_norm": ("nn.functional.layer_norm", ""),
    "native_layer_norm_backward": ("nn.functional.layer_norm", ""),
    "native_batch_norm": ("nn.functional.batch_norm", ""),
    "native_batch_norm_backward": ("nn.functional.batch_norm", ""),
    "embedding": ("nn.functional.embedding", ""),
    "embedding_dense_backward": ("nn.functional.embedding", ""),
    "cat": ("cat", ""),
    "stack": ("stack", ""),
    "gather": ("gather", ""),
    "scatter.src": ("scatter", ""),
    "scatter.value": ("scatter", ""),
    "scatter.reduce": ("scatter", ""),
    "scatter.value_reduce": ("scatter", ""),
    "scatter_add": ("scatter_add", ""),
    "index_add": ("index_add", ""),
    "triu": ("triu", ""),
    "tril": ("tril", ""),
    "flip": ("flip", ""),
    "roll": ("roll", ""),
    "repeat": ("repeat", ""),
    "topk": ("topk", ""),
    "sort": ("sort", ""),
    "sort.stable": ("sort", ""),
    "log_sigmoid_forward": ("nn.functional.logsigmoid", ""),
    "log_sigmoid_backward": ("nn.functional.logsigmoid", ""),
    "logit": ("logit", ""),
    "logit_backward": ("logit", ""),
    "diagonal_backward": ("diagonal", ""),
    "unfold_backward": ("unfold", ""),
    "baddbmm": ("baddbmm", ""),
    "mv": ("mv", ""),
    "addmv": ("addmv", ""),
    "dot": ("dot", ""),
    "norm.ScalarOpt_dim": ("norm", ""),
    "binary_cross_entropy": ("nn.functional.binary_cross_entropy", ""),
    "binary_cross_entropy_backward": ("nn.functional.binary_cross_entropy", ""),
    "native_group_norm": ("nn.functional.group_norm", ""),
    "native_group_norm_backward": ("nn.functional.group_norm", ""),
    "_adaptive_avg_pool2d": ("nn.functional.adaptive_avg_pool2d", ""),
    "_adaptive_avg_pool2d_backward": ("nn.functional.adaptive_avg_pool2d", ""),
    "diagonal_copy": ("diagonal", ""),
    "unfold_copy": ("unfold", ""),
    "slice_scatter": ("slice_scatter", ""),
    "select_scatter": ("select_scatter", ""),
    "diagonal_scatter": ("diagonal_scatter", ""),
    "as_strided_scatter": ("as_strided_scatter", ""),
    "_chunk_cat": ("_chunk_cat", ""),
    "addr": ("addr", ""),
    "block_diag": ("block_diag", ""),
    "masked_scatter": ("masked_scatter", ""),
    "mvlgamma": ("mvlgamma", "mvlgamma_p_1"),
}

CLAIMED += [
    ("mvlgamma", "mvlgamma_p_3"),
    ("mvlgamma", "mvlgamma_p_5"),
    ("nn.functional.linear_cross_entropy", ""),
]

for _claim in VIA_OPINFO.values():
    if _claim not in CLAIMED:
        CLAIMED.append(_claim)

# (name, variant, dtype or None for every dtype) -> why it fails today.
XFAIL: dict[tuple[str, str, torch.dtype | None], str] = {}

# (name, variant) -> (which samples, why they are left out). Counted and shown
# in the summary line and docs/ops.md.
SAMPLE_SKIPS: dict[tuple[str, str], tuple[Callable[[Any], bool], str]] = {
    ("nn.functional.scaled_dot_product_attention", ""): (
        lambda sample: sample.kwargs.get("dropout_p", 0.0) > 0,
        "samples with dropout_p > 0: lazy dropout draws its own numbers (seeded by"
        " torch.manual_seed), so they cannot equal eager's; test_random.py checks dropout"
        " statistically",
    ),
}

# (name, variant) -> looser tolerances, with why.
TOLERANCES: dict[tuple[str, str], dict[str, float]] = {
    # Eager CPU runs fused flash attention; lazy runs the math decomposition.
    ("nn.functional.scaled_dot_product_attention", ""): {"atol": 1e-4, "rtol": 1e-4},
}

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool]

TALLY: Counter[str] = Counter()


def opinfo_entry(name: str, variant: str) -> Any:
    return next(o for o in op_db if o.name == name and o.variant_test_name == variant)


def _cases() -> list[Any]:
    cases = []
    for name, variant in CLAIMED:
        op = opinfo_entry(name, variant)
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


def run_sample(op: Any, sample: Any, lazy: torch.device) -> None:
    # OpInfo samples may share tensors; fresh leaves keep gradients apart.
    sample = sample.transform(
        lambda t: (
            t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
        )
    )
    lazy_input = tree_map(lambda v: _to_lazy(v, lazy), sample.input)
    lazy_args = tree_map(lambda v: _to_lazy(v, lazy), sample.args)
    lazy_kwargs = tree_map(lambda v: _to_lazy(v, lazy), sample.kwargs)
    lazyfuse.metrics.reset()

    expected = op(sample.input, *sample.args, **sample.kwargs)
    actual = op(lazy_input, *lazy_args, **lazy_kwargs)
    eager_diff, lazy_diff = _differentiable(expected), _differentiable(actual)
    if eager_diff:
        weights = [torch.randn_like(t) for t in eager_diff]
        torch.autograd.backward(eager_diff, weights)
        # Outputs may have left the lazy device (x.to("cpu")): weights follow.
        moved = [w.to(o.device) for w, o in zip(weights, lazy_diff, strict=True)]
        torch.autograd.backward(lazy_diff, moved)
    lazyfuse.mark_step()

    tolerance = TOLERANCES.get((op.name, op.variant_test_name), {})
    expected_flat, _ = tree_flatten(expected)
    actual_flat, _ = tree_flatten(actual)
    for e, a in zip(expected_flat, actual_flat, strict=True):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a.cpu(), e.detach(), equal_nan=True, **tolerance)
        else:
            assert a == e
    eager_leaves = _leaves(sample)
    lazy_leaves, _ = tree_flatten((lazy_input, lazy_args, lazy_kwargs))
    lazy_leaves = [t for t in lazy_leaves if isinstance(t, torch.Tensor)]
    for e, a in zip(eager_leaves, lazy_leaves, strict=True):
        if e.grad is not None:
            torch.testing.assert_close(a.grad.cpu(), e.grad, equal_nan=True, **tolerance)
    fallbacks = lazyfuse.metrics.fallback_counts()
    assert fallbacks == {}, f"fell back to eager: {fallbacks}"


@pytest.mark.parametrize(("op", "dtype"), _cases())
def test_opinfo(
    op: Any, dtype: torch.dtype, lazy: torch.device, request: pytest.FixtureRequest
) -> None:
    grad = op.supports_autograd and dtype.is_floating_point
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
    skip = SAMPLE_SKIPS.get((op.name, op.variant_test_name))
    if skip:
        kept = [sample for sample in samples if not skip[0](sample)]
        TALLY["skipped"] += len(samples) - len(kept)
        samples = kept
    failures = []
    for index, sample in enumerate(samples):
        torch.manual_seed(index)
        try:
            run_sample(op, sample, lazy)
        except Exception as error:  # noqa: BLE001 - every failure is reported below
            lazyfuse.mark_step()
            failures.append(f"sample {index}: {type(error).__name__}: {str(error)[:300]}")
    TALLY["passed"] += len(samples) - len(failures)
    if request.node.get_closest_marker("xfail"):
        TALLY["xfail"] += len(failures)
    key = f"op:{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}"
    TALLY[key] += len(samples) - len(failures)
    assert not failures, f"{len(failures)}/{len(samples)} samples failed:\n" + "\n".join(failures)


EMULATED_SAMPLES = 2
# (name, variant) -> why its emulated run differs from eager.
EMULATED_XFAIL: dict[tuple[str, str], str] = {
    ("as_strided_scatter", ""): (
        "the backward's as_strided_copy reads its input's storage beyond the input's "
        "elements: an ATen step's output and a fused kernel's fresh one lay it out differently"
    ),
}


def _emulated_cases() -> list[Any]:
    """One dtype per claimed op, float32 where the op takes it."""
    cases = []
    for name, variant in CLAIMED:
        op = opinfo_entry(name, variant)
        supported = [d for d in DTYPES if d in op.supported_dtypes("cpu")]
        if not supported:
            continue
        dtype = torch.float32 if torch.float32 in supported else supported[0]
        if XFAIL.get((name, variant, dtype)) or XFAIL.get((name, variant, None)):
            continue
        reason = EMULATED_XFAIL.get((name, variant))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        test_id = f"{name}{'.' + variant if variant else ''}-{str(dtype).removeprefix('torch.')}"
        cases.append(pytest.param(op, dtype, marks=marks, id=test_id))
    return cases


@pytest.mark.skipif(
    ON_CUDA or not HOST_COMPILER,
    reason="CUDA emulation needs the CPU backing device and a host C++ compiler",
)
@pytest.mark.parametrize(("op", "dtype"), _emulated_cases())
def test_opinfo_emulated_cuda(op: Any, dtype: torch.dtype, lazy: torch.device) -> None:
    """The first samples of each claimed op with its fused kernels run under
    CUDA emulation: every op with a fusion rule runs as a generated kernel."""
    grad = op.supports_autograd and dtype.is_floating_point
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
    skip = SAMPLE_SKIPS.get((op.name, op.variant_test_name))
    if skip:
        samples = [sample for sample in samples if not skip[0](sample)]
    with lazyfuse.config.kernel_settings_as(emulate_cuda=True, strict=True):
        for index, sample in enumerate(samples[:EMULATED_SAMPLES]):
            torch.manual_seed(index)
            run_sample(op, sample, lazy)


def opinfo_summary() -> str | None:
    """The closing line of the suite; also saved for codegen/gen_ops_doc.py."""
    per_op = {key[3:]: count for key, count in TALLY.items() if key.startswith("op:")}
    if not per_op:
        return None
    line = (
        f"opinfo: {len(per_op)} ops, {TALLY['passed']} samples passed, {TALLY['xfail']} xfail"
        f" ({TALLY['skipped']} samples skipped, reasons in docs/ops.md)"
    )
    results = Path(__file__).resolve().parents[2] / "build" / "opinfo_results.json"
    results.parent.mkdir(exist_ok=True)
    results.write_text(
        json.dumps({"summary": line, "torch": torch.__version__, "ops": per_op}, indent=1)
    )
    return line
