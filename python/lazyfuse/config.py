"""lazyfuse settings.

The backing device is chosen once, at import, from ``LAZYFUSE_DEVICE``
(``cpu`` or ``cuda``; unset means ``cuda`` when a GPU is present, otherwise
``cpu``). IR reuse (LTC's TrieCache) is on unless ``LAZYFUSE_REUSE_IR=0``.
"""

from __future__ import annotations

import torch

from lazyfuse import _C


def backing_device() -> torch.device:
    """Returns the eager device lazy graphs run on (``cpu`` or ``cuda:0``)."""
    return torch.device(_C._backing_device())


def reuse_ir() -> bool:
    """Whether tracing reuses IR nodes from the previous step (LTC's TrieCache)."""
    return bool(_C._reuse_ir())


def set_reuse_ir(enabled: bool) -> None:
    """Turns IR reuse on or off for the rest of the process."""
    _C._set_reuse_ir(bool(enabled))
