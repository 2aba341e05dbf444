"""PyTorch's OpInfo samples, lazy against eager CPU, for every op lazyfuse claims.

Each (op, dtype) runs every sample the OpInfo provides: forward results, then
gradients where the OpInfo supports autograd, and on every sample an assertion
that nothing fell back to eager execution. Known gaps are strict xfails with a
reason (listed in docs/ops.md); an xfail that starts passing fails the run.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._lazy  # noqa: F401 - OpInfo's wrapper_set_seed calls torch._lazy.mark_step()
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import BinaryUfuncInfo, ReductionOpInfo, UnaryUfuncInfo
from torch.utils._pytree import tree_flatten, tree_map

import lazyfuse
from conftest import (
    HOST_COMPILER,
    ON_CUDA,
    ON_REFERENCE_TORCH,
    REFERENCE_DEVICE,
    REFERENCE_TORCH,
)
from opinfo_via import VIA_OPINFO

CLAIMS_FILE = Path(__file__).resolve().parent / "opinfo_claims.txt"


def _spelling(name: str, variant: str) -> str:
    return f"{name}.{variant}" if variant else name


def _case(op: Any, dtype: torch.dtype, xfail_reason: str | None) -> Any:
    """A pytest case for one entry in one dtype, strictly xfailed with a reason."""
    marks = [pytest.mark.xfail(reason=xfail_reason, strict=True)] if xfail_reason else []
    test_id = f"{_spelling(op.name, op.variant_test_name)}-{str(dtype).removeprefix('torch.')}"
    return pytest.param(op, dtype, marks=marks, id=test_id)


def _load_claims() -> tuple[list[tuple[str, str]], set[tuple[str, str]], list[str]]:
    """(name, variant) pairs from opinfo_claims.txt (names may hold dots), those
    listed under [float32], and the spellings this torch's op_db lacks."""
    by_spelling = {
        _spelling(o.name, o.variant_test_name): (o.name, o.variant_test_name) for o in op_db
    }
    claims: list[tuple[str, str]] = []
    float32_only: set[tuple[str, str]] = set()
    missing: list[str] = []
    section = ""
    for line in CLAIMS_FILE.read_text().splitlines():
        spelling = line.split("#")[0].strip()
        if spelling.startswith("["):
            section = spelling
        elif spelling not in by_spelling:
            if spelling:
                missing.append(spelling)
        else:
            claims.append(by_spelling[spelling])
            if section == "[float32]":
                float32_only.add(by_spelling[spelling])
    return claims, float32_only, missing


CLAIMED, FLOAT32_ONLY, MISSING_CLAIMS = _load_claims()


_IN_OP_DB = {(o.name, o.variant_test_name) for o in op_db}
for _claim in VIA_OPINFO.values():
    if _claim not in CLAIMED and _claim in _IN_OP_DB:
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
    # The gradient sums over broadcast dims; a fused reduction (emulated CUDA)
    # adds in another order than ATen's CPU sum.
    ("kron", ""): {"atol": 1e-4, "rtol": 1e-4},
    # The gradient divides by 1 - x^2. A fused CUDA kernel contracts x * x and
    # the subtraction into one FMA (as Triton does); eager rounds the product
    # first. Near |x| = 1 the cancellation turns that ulp into 3.6e-6 relative
    # (seen on an H100, 2026-11-23).
    ("atanh", ""): {"atol": 1e-4, "rtol": 1e-5},
    # The exponent's gradient, pow(x, e) * log(x), sums over the broadcast
    # dim with cancellation; fused CPU kernels take pow and log from glibc,
    # eager from SLEEF, and add in another order: 36 ulps apart after it.
    ("pow", ""): {"atol": 1e-5, "rtol": 1e-5},
    # x * 2 ** e: the same pow(2, e) * log(2) gradient, now fused, summed
    # over the broadcast dim with cancellation (4.6e-6 relative).
    ("ldexp", ""): {"atol": 1e-5, "rtol": 1e-5},
}

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool]

TALLY: Counter[str] = Counter()


def opinfo_entry(name: str, variant: str) -> Any:
    return next(o for o in op_db if o.name == name and o.variant_test_name == variant)


def claimed_cases(
    dtypes: list[torch.dtype], keep: Callable[[Any], Any] = lambda op: True
) -> list[Any]:
    """A case per claimed entry that `keep` accepts, in each of `dtypes` its
    OpInfo supports on the CPU: the other OpInfo test files run these."""
    cases = []
    for name, variant in CLAIMED:
        op = opinfo_entry(name, variant)
        if keep(op):
            supported = op.supported_dtypes(REFERENCE_DEVICE)
            cases += [_case(op, dtype, None) for dtype in dtypes if dtype in supported]
    return cases


def claimed_entries(keep: Callable[[Any], Any] = lambda op: True) -> list[Any]:
    """A case per claimed entry that `keep` accepts, in no particular dtype."""
    entries = [opinfo_entry(name, variant) for name, variant in CLAIMED]
    return [
        pytest.param(op, id=_spelling(op.name, op.variant_test_name)) for op in entries if keep(op)
    ]


def outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """`call`'s result, or the exception it raised; the step is synced after
    either, so the process goes on."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fallbacks, eager's resize deprecation
            return call(), None
    except Exception as error:  # noqa: BLE001 - the outcome is compared by the caller
        return None, error
    finally:
        lazyfuse.mark_step()


def outcome_difference(eager: BaseException | None, lazy: BaseException | None) -> str | None:
    """How the lazy call's outcome differs from eager's: raising or not, and
    the exception type."""
    if eager is None and lazy is not None:
        return f"eager runs, lazy raised {lazy!r:.300}"
    if eager is not None and lazy is None:
        return f"eager raised {eager!r:.200}, lazy ran"
    if eager is not None and not isinstance(lazy, type(eager)):
        return f"eager raised {eager!r:.200}, lazy {lazy!r:.200}"
    return None


def _cases() -> list[Any]:
    cases = []
    for name, variant in CLAIMED:
        op = opinfo_entry(name, variant)
        supported = op.supported_dtypes("cpu")
        dtypes = [torch.float32] if (name, variant) in FLOAT32_ONLY else DTYPES
        for dtype in dtypes:
            if dtype not in supported:
                continue
            reason = XFAIL.get((name, variant, dtype)) or XFAIL.get((name, variant, None))
            cases.append(_case(op, dtype, reason))
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


def _assert_outputs_equal(op: Any, expected: Any, actual: Any) -> dict[str, float]:
    """Compares the op's outputs; returns the tolerance it used."""
    tolerance = TOLERANCES.get((op.name, op.variant_test_name), {})
    expected_flat, _ = tree_flatten(expected)
    actual_flat, _ = tree_flatten(actual)
    for e, a in zip(expected_flat, actual_flat, strict=True):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a.cpu(), e.detach().cpu(), equal_nan=True, **tolerance)
        else:
            assert a == e
    return tolerance


def run_sample(
    op: Any,
    sample: Any,
    lazy: torch.device,
    through: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> None:
    """`through` maps each lazy tensor argument before the op reads it."""
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

    def mapped(value: Any) -> Any:
        if through is None:
            return value
        return tree_map(lambda v: through(v) if isinstance(v, torch.Tensor) else v, value)

    expected = op(sample.input, *sample.args, **sample.kwargs)
    actual = op(mapped(lazy_input), *mapped(lazy_args), **mapped(lazy_kwargs))
    eager_diff, lazy_diff = _differentiable(expected), _differentiable(actual)
    if eager_diff:
        weights = [torch.randn_like(t) for t in eager_diff]
        torch.autograd.backward(eager_diff, weights)
        # Outputs may have left the lazy device (x.to("cpu")): weights follow.
        moved = [w.to(o.device) for w, o in zip(weights, lazy_diff, strict=True)]
        torch.autograd.backward(lazy_diff, moved)
    lazyfuse.mark_step()

    tolerance = _assert_outputs_equal(op, expected, actual)
    eager_leaves = _leaves(sample)
    lazy_leaves, _ = tree_flatten((lazy_input, lazy_args, lazy_kwargs))
    lazy_leaves = [t for t in lazy_leaves if isinstance(t, torch.Tensor)]
    for e, a in zip(eager_leaves, lazy_leaves, strict=True):
        if e.grad is not None:
            torch.testing.assert_close(a.grad.cpu(), e.grad.cpu(), equal_nan=True, **tolerance)
    fallbacks = lazyfuse.metrics.fallback_counts()
    assert fallbacks == {}, f"fell back to eager: {fallbacks}"


def run_forward(op: Any, sample: Any, lazy: torch.device) -> None:
    """The sample's forward against eager; fallbacks allowed."""
    expected = op(sample.input, *sample.args, **sample.kwargs)
    actual = op(
        *tree_map(lambda v: _to_lazy(v, lazy), (sample.input, *sample.args)),
        **tree_map(lambda v: _to_lazy(v, lazy), sample.kwargs),
    )
    lazyfuse.mark_step()
    _assert_outputs_equal(op, expected, actual)


def run_and_tally(op: Any, samples: list[Any], dtype: torch.dtype, lazy: torch.device) -> list[str]:
    """Runs every sample; returns the failures and counts passes in TALLY."""
    failures = []
    for index, sample in enumerate(samples):
        torch.manual_seed(index)
        try:
            run_sample(op, sample, lazy)
        except Exception as error:  # noqa: BLE001 - every failure is reported by the caller
            lazyfuse.mark_step()
            failures.append(f"sample {index}: {type(error).__name__}: {str(error)[:300]}")
    TALLY["passed"] += len(samples) - len(failures)
    if not failures:
        TALLY[f"dtype:{str(dtype).removeprefix('torch.')}"] += 1
    return failures


@pytest.mark.parametrize(("op", "dtype"), _cases())
def test_opinfo(
    op: Any, dtype: torch.dtype, lazy: torch.device, request: pytest.FixtureRequest
) -> None:
    grad = op.supports_autograd and dtype.is_floating_point
    samples = list(op.sample_inputs(REFERENCE_DEVICE, dtype, requires_grad=grad))
    skip = SAMPLE_SKIPS.get((op.name, op.variant_test_name))
    if skip:
        kept = [sample for sample in samples if not skip[0](sample)]
        TALLY["skipped"] += len(samples) - len(kept)
        samples = kept
    failures = run_and_tally(op, samples, dtype, lazy)
    if request.node.get_closest_marker("xfail"):
        TALLY["xfail"] += len(failures)
    key = f"op:{_spelling(op.name, op.variant_test_name)}"
    TALLY[key] += len(samples) - len(failures)
    assert not failures, f"{len(failures)}/{len(samples)} samples failed:\n" + "\n".join(failures)


LOW_PRECISION = [torch.float16, torch.bfloat16]
# (name, variant, dtype) -> why its half-precision forward differs from eager.
LOW_PRECISION_XFAIL: dict[tuple[str, str, torch.dtype], str] = {}


def _is_pointwise_or_reduction(op: Any) -> bool:
    return isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo, ReductionOpInfo))


def _low_precision_cases() -> list[Any]:
    cases = []
    for name, variant in CLAIMED:
        op = opinfo_entry(name, variant)
        if not _is_pointwise_or_reduction(op):
            continue
        for dtype in LOW_PRECISION:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            reason = LOW_PRECISION_XFAIL.get((name, variant, dtype))
            cases.append(_case(op, dtype, reason))
    return cases


@pytest.mark.parametrize(("op", "dtype"), _low_precision_cases())
def test_opinfo_low_precision(op: Any, dtype: torch.dtype, lazy: torch.device) -> None:
    """Every forward sample of each claimed pointwise and reduction entry in
    float16 and bfloat16, the dtypes mixed precision runs them in."""
    samples = list(op.sample_inputs(REFERENCE_DEVICE, dtype, requires_grad=False))
    skip = SAMPLE_SKIPS.get((op.name, op.variant_test_name))
    if skip:
        samples = [sample for sample in samples if not skip[0](sample)]
    failures = run_and_tally(op, samples, dtype, lazy)
    assert not failures, f"{len(failures)}/{len(samples)} samples failed:\n" + "\n".join(failures)


@pytest.mark.skipif(
    not ON_REFERENCE_TORCH,
    reason=f"claims name op_db entries of torch {REFERENCE_TORCH}; other releases lack some",
)
def test_every_claim_names_an_op_db_entry() -> None:
    assert MISSING_CLAIMS == [], "opinfo_claims.txt names entries op_db does not have"


EMULATED_SAMPLES = 2
# (name, variant) -> why its emulated run differs from eager.
# as_strided_scatter was here until fused kernels wrote outputs into their
# inputs' memory: its backward's as_strided_copy reads storage beyond the
# input's elements, and a fresh kernel output laid that storage out unlike
# eager's. Written in place, it matches.
EMULATED_XFAIL: dict[tuple[str, str], str] = {}


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
        cases.append(_case(op, dtype, reason))
    return cases


DEAD_INPUT_SAMPLES = 3


def _first_kept_samples(
    op: Any, dtype: torch.dtype, count: int, requires_grad: bool | None = None
) -> list[Any]:
    """The op's first `count` samples, with gradients where it supports
    them (or `requires_grad` says), but those SAMPLE_SKIPS leaves out."""
    grad = op.supports_autograd and dtype.is_floating_point
    grad = grad if requires_grad is None else requires_grad
    samples = list(op.sample_inputs(REFERENCE_DEVICE, dtype, requires_grad=grad))
    skip = SAMPLE_SKIPS.get((op.name, op.variant_test_name))
    if skip:
        samples = [sample for sample in samples if not skip[0](sample)]
    return samples[:count]


@pytest.mark.skipif(
    ON_CUDA or not HOST_COMPILER,
    reason="CUDA emulation needs the CPU backing device and a host C++ compiler",
)
@pytest.mark.parametrize(("op", "dtype"), _emulated_cases())
def test_opinfo_emulated_cuda(op: Any, dtype: torch.dtype, lazy: torch.device) -> None:
    """The first samples of each claimed op with its fused kernels run under
    CUDA emulation: every op with a fusion rule runs as a generated kernel."""
    samples = _first_kept_samples(op, dtype, EMULATED_SAMPLES)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=True, strict=True):
        for index, sample in enumerate(samples):
            torch.manual_seed(index)
            run_sample(op, sample, lazy)


def _computed(value: torch.Tensor) -> torch.Tensor:
    # A fresh buffer that only the op reads (clone would share the IR).
    # Results are written over floating inputs only, so others stay as given.
    return value * 1 if value.is_floating_point() else value


@pytest.mark.parametrize(("op", "dtype"), _emulated_cases())
def test_opinfo_aten_steps_over_dead_inputs(
    op: Any, dtype: torch.dtype, lazy: torch.device
) -> None:
    """The first samples of each claimed op on ATen steps, every argument a
    value the graph computes and reads nowhere else, forward and backward.
    A pointwise ATen step then writes its result over such an input (issue
    29); an out= kernel that read an input after writing there would differ
    from eager here."""
    samples = _first_kept_samples(op, dtype, DEAD_INPUT_SAMPLES)
    with lazyfuse.config.kernel_settings_as(emulate_cuda=False, cpu_kernels=False):
        for index, sample in enumerate(samples):
            torch.manual_seed(index)
            run_sample(op, sample, lazy, through=_computed)


def opinfo_summary() -> str | None:
    """The closing line of the suite; also saved for codegen/gen_ops_doc.py."""
    per_op = {key[3:]: count for key, count in TALLY.items() if key.startswith("op:")}
    if not per_op:
        return None
    per_dtype = {key[6:]: count for key, count in TALLY.items() if key.startswith("dtype:")}
    dtypes = ", ".join(f"{dtype} {count}" for dtype, count in sorted(per_dtype.items()))
    line = (
        f"opinfo: {len(per_op)} entries, {TALLY['passed']} samples passed, "
        f"{len(per_dtype)} dtypes (entries passing per dtype: {dtypes}), {TALLY['xfail']} xfail"
        f" ({TALLY['skipped']} samples skipped, reasons in docs/ops.md)"
    )
    # A run narrowed with -k would otherwise replace the recorded table in docs/ops.md.
    if len(per_op) >= len(CLAIMED):
        results = Path(__file__).resolve().parents[2] / "build" / "opinfo_results.json"
        results.parent.mkdir(exist_ok=True)
        results.write_text(
            json.dumps({"summary": line, "torch": torch.__version__, "ops": per_op}, indent=1)
        )
    return line
