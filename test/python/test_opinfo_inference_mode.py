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

from test_opinfo import (
    _first_kept_samples,
    claimed_cases,
    run_forward,
)

DTYPES = [torch.float32, torch.int64]
SAMPLES = 4


@pytest.mark.parametrize(("op", "dtype"), claimed_cases(DTYPES))
def test_forward_under_inference_mode(op: Any, dtype: torch.dtype, lazy: torch.device) -> None:
    samples = _first_kept_samples(op, dtype, SAMPLES, requires_grad=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback warnings
        for index, sample in enumerate(samples):
            torch.manual_seed(index)
            with torch.inference_mode():
                run_forward(op, sample, lazy)
