"""``torch.lazy``: the lazy device's runtime module, where torch looks for one.

torch finds a device's random-number state and device count through
``torch.<device type>``: ``torch.get_device_module``, ``torch.random.fork_rng``
and ``torch.utils.checkpoint``, which saves the RNG state of its inputs' device
before the forward and restores it to recompute the same dropout masks.

lazyfuse draws every random op's seed from torch's default CPU generator when
the op is traced (csrc/ops/random.h), so the lazy device's RNG state is that
generator's state: saving and restoring it replays the same seeds.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
import torch._lazy

from lazyfuse import _C

_initialized = True  # torch.utils.checkpoint saves the state of initialized devices only


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def _check_index(device: Any) -> None:
    if device is None:
        return
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "lazy":
            raise ValueError(f"torch.lazy: expected a lazy device, got {device}")
        device = 0 if device.index is None else device.index
    if device not in (0, -1):
        raise ValueError(f"torch.lazy: the lazy device has one index, 0; got {device}")


class device:  # noqa: N801 - torch.cuda.device's name and shape
    """Selects a lazy device by index; there is one, index 0."""

    def __init__(self, device: Any) -> None:
        _check_index(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def set_device(device: Any) -> None:
    _check_index(device)


def get_rng_state(device: Any = None) -> torch.Tensor:
    _check_index(device)
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    _check_index(device)
    torch.set_rng_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state()]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for state in new_states:
        set_rng_state(state)


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    torch.manual_seed(seed)


def seed() -> None:
    torch.seed()


def seed_all() -> None:
    torch.seed()


def initial_seed() -> int:
    return torch.initial_seed()


def synchronize(device: Any = None) -> None:
    """Waits for the lazy device's pending work, as ``torch._lazy.wait_device_ops``."""
    _check_index(device)
    torch._lazy.wait_device_ops()


def empty_cache() -> None:
    """Frees the blocks the lazy device keeps for reuse, as ``torch.cuda.empty_cache``:
    the CPU backing device's freed kernel outputs (``LAZYFUSE_CPU_CACHE_MB``),
    and torch's CUDA cache on a CUDA backing device."""
    _C._empty_cpu_output_pool()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def register() -> None:
    """Makes this module ``torch.lazy``; called once by ``import lazyfuse``."""
    module = sys.modules[__name__]
    existing = getattr(torch, "lazy", None)
    if existing is module:
        return
    if isinstance(existing, types.ModuleType):
        raise RuntimeError(
            f"lazyfuse: torch.lazy is already registered as {existing.__name__}; "
            "one process has one lazy backend"
        )
    torch._register_device_module("lazy", module)
