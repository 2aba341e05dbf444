"""Looking inside the lazy device: the IR of tensors and the compiled Program."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lazyfuse import _C


def ir_text(tensors: torch.Tensor | Sequence[torch.Tensor]) -> str:
    """Returns the pending IR graph of the given lazy tensors, as text."""
    return _C._ir_text(_as_list(tensors))


def ir_dot(tensors: torch.Tensor | Sequence[torch.Tensor]) -> str:
    """Returns the pending IR graph of the given lazy tensors, as graphviz dot."""
    return _C._ir_dot(_as_list(tensors))


def last_program() -> str:
    """Returns the Program of the last graph compiled (not taken from the cache), as text."""
    return _C._last_program_text()


def nodes_created() -> int:
    """Returns how many lazyfuse IR nodes this process has created so far."""
    return int(_C._nodes_created())


def _as_list(tensors: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
