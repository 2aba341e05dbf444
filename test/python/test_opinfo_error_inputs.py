"""OpInfo's error inputs of every claimed entry: lazy raises where eager raises,
with eager's exception type, and the process goes on.

Hand-written lazy kernels raise their own errors; `unbind_copy` of a 0-dim
tensor raised RuntimeError where eager raises IndexError.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_map

import lazyfuse
from conftest import REFERENCE_DEVICE
from test_opinfo import claimed_entries, outcome

# Eager's errors lazyfuse documents it does not raise (README, limitations).
ACCEPTED = {
    "unsupported operation": (
        "an out= tensor overlapping an input is written as the functional op's "
        "result: a lazy value has no memory for it to overlap"
    ),
    "value cannot be converted to type .* without overflow": (
        "masked_fill's 0-dim tensor value stays on the device; eager reads it to "
        "check that a complex value fits"
    ),
}

# narrow_copy's CPU kernel fails an internal check on an out-of-range dim
# (RuntimeError); lazyfuse raises torch's "Dimension out of range"
# IndexError, as narrow does.
OTHER_TYPE = r"Expected dim < static_cast<int64_t>\(self_sizes.size\(\)\)"


def _run(op: Any, sample: Any, device: torch.device | str) -> None:
    def to(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            return value.detach().to(device)
        return value

    result = op(to(sample.input), *tree_map(to, sample.args), **tree_map(to, sample.kwargs))
    lazyfuse.mark_step()
    tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, result)


@pytest.mark.parametrize("op", claimed_entries(lambda op: op.error_inputs_func is not None))
def test_error_inputs_raise_as_eager(op: Any, lazy: torch.device) -> None:
    failures = []
    for index, error_input in enumerate(op.error_inputs(REFERENCE_DEVICE)):
        sample = error_input.sample_input
        _, eager = outcome(partial(_run, op, sample, "cpu"))
        _, actual = outcome(partial(_run, op, sample, lazy))
        if eager is None:
            continue  # an error input for another device than the CPU
        if actual is None:
            if not any(re.search(pattern, str(eager)) for pattern in ACCEPTED):
                failures.append(f"input {index}: eager raised {eager!r:.200}, lazy ran")
        elif not isinstance(actual, type(eager)) and not re.search(OTHER_TYPE, str(eager)):
            failures.append(f"input {index}: eager raised {eager!r:.200}, lazy {actual!r:.200}")
    assert not failures, "\n".join(failures)
    kept = torch.arange(3.0, device=lazy) + 1
    torch.testing.assert_close(kept.cpu(), torch.arange(3.0) + 1)
