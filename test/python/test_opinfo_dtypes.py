"""OpInfo samples of every claimed entry in the dtypes test_opinfo.py leaves out.

- In each dtype an entry's OpInfo says eager lacks, the lazy op raises where
  eager raises, with eager's exception type, and returns eager's values where
  eager does not raise. A fused kernel computes any dtype it is given, so a
  lazy op used to return a value where eager refuses (abs of a bool tensor).
- The forward of the first samples in int8, int16 and complex64 equals
  eager's: a shape function's dtype that was wrong only there (var_mean's
  complex mean) stopped the graph. Complex ops may fall back to eager here;
  test_opinfo.py counts fallbacks in the claimed dtypes.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any

import pytest
import torch

from conftest import REFERENCE_DEVICE
from test_opinfo import (
    DTYPES,
    _first_kept_samples,
    claimed_cases,
    claimed_entries,
    outcome,
    outcome_difference,
    run_forward,
    run_sample,
)

ALL_DTYPES = [*DTYPES, torch.float16, torch.bfloat16, torch.int16, torch.int8, torch.complex64]
EXTRA_DTYPES = [torch.int16, torch.int8, torch.complex64]
EXTRA_SAMPLES = 3


def _first_sample(op: Any, dtype: torch.dtype) -> Any | None:
    try:
        return next(iter(op.sample_inputs(REFERENCE_DEVICE, dtype, requires_grad=False)), None)
    except Exception:  # noqa: BLE001 - OpInfo cannot build samples of every dtype
        return None


@pytest.mark.parametrize("op", claimed_entries())
def test_refuses_the_dtypes_eager_refuses(op: Any, lazy: torch.device) -> None:
    supported = op.supported_dtypes(REFERENCE_DEVICE)
    failures = []
    for dtype in ALL_DTYPES:
        sample = None if dtype in supported else _first_sample(op, dtype)
        if sample is None:
            continue
        torch.manual_seed(0)
        _, eager = outcome(partial(op, sample.input, *sample.args, **sample.kwargs))
        torch.manual_seed(0)
        _, lazy_error = outcome(partial(run_sample, op, sample, lazy))
        if problem := outcome_difference(eager, lazy_error):
            failures.append(f"{dtype}: {problem}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("op", "dtype"), claimed_cases(EXTRA_DTYPES))
def test_first_samples_in_other_dtypes(op: Any, dtype: torch.dtype, lazy: torch.device) -> None:
    # No gradients: these dtypes are integer or complex.
    samples = _first_kept_samples(op, dtype, EXTRA_SAMPLES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback warnings
        for index, sample in enumerate(samples):
            torch.manual_seed(index)
            run_forward(op, sample, lazy)
