"""OpInfo's reference inputs of every claimed entry, lazy against eager.

An OpInfo's reference inputs are its samples plus harder ones: extremal
values, 0-dim and empty tensors, broadcasts, noncontiguous inputs.
test_opinfo.py runs the samples; this runs a spread of the rest, forward, in
float32 and int64. The first one run found multi_margin_loss of a 0-dim
target shaped [1] (its meta kernel's shape), where eager's loss is 0-dim.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from conftest import REFERENCE_DEVICE
from test_opinfo import SAMPLE_SKIPS, claimed_cases, run_forward

DTYPES = [torch.float32, torch.int64]
FIRST = 4  # the first extra samples, then
SPREAD = 12  # evenly spaced over the others


def _extra_samples(op: Any, dtype: torch.dtype) -> list[Any]:
    known = len(list(op.sample_inputs(REFERENCE_DEVICE, dtype, requires_grad=False)))
    extra = list(op.reference_inputs(REFERENCE_DEVICE, dtype, requires_grad=False))[known:]
    skip = SAMPLE_SKIPS.get((op.name, op.variant_test_name))
    if skip:
        extra = [sample for sample in extra if not skip[0](sample)]
    rest = extra[FIRST:]
    stride = max(1, len(rest) // SPREAD)
    return extra[:FIRST] + rest[::stride][:SPREAD]


@pytest.mark.parametrize(
    ("op", "dtype"), claimed_cases(DTYPES, lambda op: op.reference_inputs_func is not None)
)
def test_reference_inputs(op: Any, dtype: torch.dtype, lazy: torch.device) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback and deprecation warnings
        for index, sample in enumerate(_extra_samples(op, dtype)):
            torch.manual_seed(index)
            run_forward(op, sample, lazy)
