"""``make_fx`` refuses lazy tensors instead of tracing them as constants.

A ``TorchDispatchMode`` sees a lazy tensor's ops below functionalization, on
the bare tensors inside the functional wrappers the caller holds. make_fx's
proxy mode tracks the wrappers, so every tensor it meets is one it never
saw, and it records each as a constant: the graph ignored its inputs and
returned the values of the tracing call (``torch.func.linearize``'s
tangents came back as zeros or as stale memory). Counting modes
(``FlopCounterMode``) are unaffected; tracing raises here, naming the cause.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import PythonKeyTracer

_create_arg = PythonKeyTracer.create_arg


def _create_arg_refusing_lazy_tensors(self: PythonKeyTracer, a: object) -> Any:
    if isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor) and a.device.type == "lazy":
        raise RuntimeError(
            "make_fx cannot trace lazy tensors (torch.func.linearize and other make_fx "
            "users included): its dispatch mode sees their ops below functionalization, on "
            "tensors it did not track, and would record them as constants. Trace with CPU "
            "tensors instead."
        )
    return _create_arg(self, a)


PythonKeyTracer.create_arg = _create_arg_refusing_lazy_tensors  # type: ignore[method-assign]
