"""lazyfuse settings.

The backing device is chosen once, at import, from ``LAZYFUSE_DEVICE``
(``cpu`` or ``cuda``; unset means ``cuda`` when a GPU is present, otherwise
``cpu``). IR reuse (LTC's TrieCache) is on unless ``LAZYFUSE_REUSE_IR=0``.

Fused kernels run on the CUDA backing device; on the CPU they run as native
CPU kernels (``cpu_kernels``, on unless ``LAZYFUSE_CPU_KERNELS=0`` or no host
C++ compiler exists), or, with ``LAZYFUSE_EMULATE_CUDA=1``, as the same CUDA
source under emulation (``LAZYFUSE_EMULATE_BLOCK`` threads per block, default
32, and at most ``LAZYFUSE_EMULATE_GRID`` blocks, default 3).
``LAZYFUSE_FUSION=0`` turns fused kernels off everywhere. ``LAZYFUSE_STRICT_KERNELS=1``
makes a kernel that fails to compile, load or launch an error instead of a
fallback to its ATen steps.

New shapes reuse shape-generic kernels (``LAZYFUSE_DYNAMIC``, see
``dynamic_kernels``).

``mark_step()`` on the CPU backing device returns before its graph has run, as
it does on a GPU (see ``async_execution``; ``LAZYFUSE_ASYNC=0`` turns it off).

Freed CPU kernel outputs of 1 MiB or more are kept for reuse, up to
``LAZYFUSE_CPU_CACHE_MB`` (see ``cpu_cache_mb``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Literal, TypeVar

import torch

from lazyfuse import _C


def backing_device() -> torch.device:
    """Returns the eager device lazy graphs run on (``cpu`` or ``cuda:0``)."""
    return torch.device(_C._backing_device())


def reuse_ir() -> bool:
    """Whether tracing reuses IR nodes from the previous step (LTC's TrieCache)."""
    return bool(_C._reuse_ir())


def donation() -> bool:
    """Whether mark_step lets fused kernels write results over parameters
    nothing else reads (buffer donation; LAZYFUSE_DONATE=0 turns it off)."""
    return bool(_C._donation())


def set_donation(enabled: bool) -> None:
    """Turns buffer donation on or off for the graphs run from now on."""
    _C._set_donation(bool(enabled))


def async_execution() -> bool:
    """Whether ``mark_step()`` on the CPU backing device hands its graph to a
    worker thread and returns, so the next step traces while the graph runs.
    On by default on a machine with two cores or more; ``LAZYFUSE_ASYNC=0``
    or ``set_async_execution(False)`` turns it off. A read of a result waits
    for it. As on a GPU, a failure of such a graph surfaces at the next read
    of its results, the next step that reads them, ``mark_step(wait=True)``
    or ``wait_device_ops()``; its tensors keep their pending values, and a
    read runs the rest of the graph again. A replayed step runs on the
    calling thread, on every core, so it matches its traced steps to
    rounding rather than bit for bit."""
    return bool(_C._async_execution())


def set_async_execution(enabled: bool) -> None:
    """Turns asynchronous execution on or off for the mark_steps from now on."""
    _C._set_async_execution(bool(enabled))


def set_reuse_ir(enabled: bool) -> None:
    """Turns IR reuse on or off for the rest of the process."""
    _C._set_reuse_ir(bool(enabled))


DynamicMode = Literal["auto", "0", "1"]
T = TypeVar("T")


def dynamic_kernels() -> DynamicMode:
    """How fused kernels meet new shapes, as torch.compile's ``dynamic``:

    - ``"auto"`` (the default): a kernel's first shape compiles with its sizes
      as constants; from the next graph that needs it at another shape on, a
      shape-generic version takes sizes as arguments, compiled once, and
      serves every later shape of that structure without compiling;
    - ``"0"``: every new shape compiles its own kernels (``dynamic=False``);
    - ``"1"``: shape-generic from a kernel's first shape (``dynamic=True``).

    ``LAZYFUSE_DYNAMIC`` sets it at import.
    """
    mode = str(_C._dynamic_kernels())
    assert mode in ("auto", "0", "1")
    return mode  # type: ignore[return-value]


def set_dynamic_kernels(mode: DynamicMode) -> None:
    """Sets how kernels rendered from now on meet new shapes (see ``dynamic_kernels``)."""
    _C._set_dynamic_kernels(str(mode))


@contextmanager
def _changed(get: Callable[[], T], set_: Callable[[T], None], value: T) -> Iterator[None]:
    """Runs a block with a setting changed to `value`, then puts it back."""
    before = get()
    set_(value)
    try:
        yield
    finally:
        set_(before)


def dynamic_kernels_as(mode: DynamicMode) -> AbstractContextManager[None]:
    """Runs a block under another ``dynamic_kernels`` mode."""
    return _changed(dynamic_kernels, set_dynamic_kernels, mode)


def async_execution_as(enabled: bool) -> AbstractContextManager[None]:
    """Runs a block with asynchronous execution on or off."""
    return _changed(async_execution, set_async_execution, enabled)


@dataclass(frozen=True)
class KernelSettings:
    """How fused kernels run; see the module docstring."""

    emulate_cuda: bool
    emulated_block: int
    emulated_grid: int
    strict: bool
    cpu_kernels: bool


def kernel_settings() -> KernelSettings:
    """The fused-kernel settings in force."""
    raw = _C._kernel_settings()
    return KernelSettings(
        emulate_cuda=bool(raw["emulate_cuda"]),
        emulated_block=int(raw["emulated_block"]),
        emulated_grid=int(raw["emulated_grid"]),
        strict=bool(raw["strict"]),
        cpu_kernels=bool(raw["cpu_kernels"]),
    )


def set_kernel_settings(settings: KernelSettings) -> None:
    """Applies `settings` to graphs compiled from now on. Graphs compiled under
    other settings stay cached under those."""
    _C._set_kernel_settings(**asdict(settings))


@contextmanager
def kernel_settings_as(**changes: object) -> Iterator[KernelSettings]:
    """Runs a block under changed settings, e.g.
    ``kernel_settings_as(emulate_cuda=True, emulated_block=128)``."""
    before = kernel_settings()
    after = replace(before, **changes)  # type: ignore[arg-type]
    set_kernel_settings(after)
    try:
        yield after
    finally:
        set_kernel_settings(before)


def cpu_cache_mb() -> int:
    """The most MiB of freed CPU kernel outputs kept for reuse
    (``metrics.cpu_output_cache``). ``LAZYFUSE_CPU_CACHE_MB`` sets it at
    import; 1024 by default, 0 keeps none."""
    return int(_C._cpu_output_pool()["cap_bytes"]) >> 20


def set_cpu_cache_mb(mib: int) -> None:
    """Sets ``cpu_cache_mb``. If more is kept than the new cap, every kept
    block is freed now."""
    _C._set_cpu_cache_mb(int(mib))


def cpu_cache_mb_as(mib: int) -> AbstractContextManager[None]:
    """Runs a block under another ``cpu_cache_mb``."""
    return _changed(cpu_cache_mb, set_cpu_cache_mb, mib)
