"""Counting calls into torch's Python kernels (meta kernels, references,
decompositions) while lazy ops trace: each costs some 10 us a node built."""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

# Where torch keeps its Python meta kernels, references and decompositions.
PYTHON_KERNELS = ("torch/_refs", "torch/_meta_registrations", "torch/_decomp", "torch/_prims")


@contextmanager
def python_kernel_calls() -> Iterator[collections.Counter[str]]:
    """Counts the outermost calls into torch's Python kernels on this thread."""
    calls: collections.Counter[str] = collections.Counter()

    def inside(frame: FrameType | None) -> bool:
        return frame is not None and any(p in frame.f_code.co_filename for p in PYTHON_KERNELS)

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or not inside(frame):
            return
        caller = frame.f_back
        while caller is not None:
            if inside(caller):
                return
            caller = caller.f_back
        calls[f"{frame.f_code.co_filename.split('torch/')[-1]}:{frame.f_code.co_name}"] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)
