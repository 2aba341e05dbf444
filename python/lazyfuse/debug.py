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


def compile_log() -> list[dict[str, object]]:
    """Returns the recent uncached compiles, oldest first.

    Each entry has ``hash``, ``nodes``, ``call_site`` (the Python line whose
    read or ``mark_step`` triggered it) and ``cause``: what changed against the
    previous graph compiled from that line (an input's shape or dtype, or a
    node). ``LAZYFUSE_DEBUG=1`` prints each entry as it happens.
    """
    return list(_C._compile_log())


def last_compile_reason() -> str:
    """Returns why the most recent uncached compile happened, or "" if none did."""
    log = _C._compile_log()
    return str(log[-1]["cause"]) if log else ""


def clear_compile_log() -> None:
    """Forgets recorded compiles and the graphs they are compared against."""
    _C._clear_compile_log()


def _as_list(tensors: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
