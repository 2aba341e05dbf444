"""Every claimed OpInfo entry's first samples under torch.inference_mode(),
lazy against eager.

Inference mode skips the autograd key, where composite ops decompose above
functionalization; lazyfuse decomposes them at functionalization's key
instead (Note [Inference mode and functionalization]). It looked only at
Tensor arguments, so an op taking a tensor list (vstack, einsum, meshgrid,
linalg.multi_dot, and quantile through them) ran its composite on bare lazy
tensors and raised "aten::view returns a view of its input and has no lazy
lowering". tensor_split's lazy split points, read on the host at the
autograd key, were refused there.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from conftest import REFERENCE_DEVICE
from test_opinfo import CLAIMED, SAMPLE_SKIPS, _spelling, opinfo_entry, run_forward

DTYPES = [torch.float32, torch.int64]
SAMPLES = 4


def _cases() -> list[Any]:
    cases = []
    for name, variant in CLAIMED:
        op = opinfo_entry(name, variant)
        for dtype in DTYPES:
            if dtype in op.supported_dtypes(REFERENCE_DEVICE):
                test_id = f"{_spelling(name, variant)}-{str(dtype).removeprefix('torch.')}"
                cases.append(pytest.param(op, dtype, id=test_id))
    return cases


@pytest.mark.parametrize(("op", "dtype"), _cases())
def test_forward_under_inference_mode(op: Any, dtype: torch.dtype, lazy: torch.device) -> None:
    samples = list(op.sample_inputs(REFERENCE_DEVICE, dtype, requires_grad=False))
    skip = SAMPLE_SKIPS.get((op.name, op.variant_test_name))
    if skip:
        samples = [sample for sample in samples if not skip[0](sample)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback warnings
        for index, sample in enumerate(samples[:SAMPLES]):
            torch.manual_seed(index)
            with torch.inference_mode():
                run_forward(op, sample, lazy)
