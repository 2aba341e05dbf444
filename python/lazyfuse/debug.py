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
    read or ``mark_step`` triggered it), ``cause``: what changed against the
    previous graph compiled from that line (an input's shape or dtype, or a
    node), and ``generic``: the graph's kernels that went shape-generic
    (``config.dynamic_kernels``), each with why ("a new shape (60 -> 70)",
    a new strategy of a kernel seen before, or ``LAZYFUSE_DYNAMIC=1``).
    ``LAZYFUSE_DEBUG=1`` prints each entry as it happens.
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


def fusion_plan(tensors: torch.Tensor | Sequence[torch.Tensor] | None = None) -> str:
    """Returns how the graph's steps group into kernels, as text.

    With ``tensors``, plans their pending graph (nothing runs); without, gives
    the plan of the last graph compiled. The plan is the same on every backing
    device; only the CUDA device turns fused groups into kernels.
    """
    if tensors is None:
        return str(_C._last_fusion_plan())
    return str(_C._fusion_plan(_as_list(tensors)))


def pending_program(tensors: torch.Tensor | Sequence[torch.Tensor]) -> str:
    """Returns the Program the pending graph of ``tensors`` lowers to, without running it."""
    return str(_C._pending_program_text(_as_list(tensors)))


def last_kernels() -> list[dict[str, object]]:
    """Returns the fused kernels the last compiled graph launched on CUDA.

    One entry per kernel variant, with ``name``, ``ops`` (the ATen ops fused
    into it) and ``source`` (the generated CUDA C++). Empty on the CPU device.
    """
    return list(_C._last_kernels())


def generic_kernels() -> list[dict[str, object]]:
    """Returns the shape-generic kernels made so far (``config.dynamic_kernels``).

    One entry per template: ``name``, ``literals`` (the numbers in its source a
    template may take as arguments), ``parameters`` (how many it does),
    ``changes`` (the first shape's values against the shape that made it go
    generic, e.g. ``"256 -> 384, 16 -> 24"``), ``renders`` (kernels launched
    through it) and ``failed`` (it did not compile; those kernels compile
    with their sizes as constants instead).
    """
    return list(_C._generic_kernels())


def clear_generic_kernels() -> None:
    """Forgets every kernel structure seen, so the next shape of each compiles
    as a first shape (tests and benchmarks)."""
    _C._clear_generic_kernels()


def compile_cuda(
    tensors: torch.Tensor | Sequence[torch.Tensor],
    arch: str = "sm_90",
    sms: int = 132,
    block_limit: int = 0,
    generic: bool = False,
) -> list[dict[str, object]]:
    """Plans the pending graph of ``tensors`` and compiles its fused kernels
    for ``arch`` with NVRTC. Executes nothing and needs no GPU.

    Returns one record per fused kernel: ``name``, ``ops``, ``source``,
    ``compiled`` (bool), ``target``, ``log`` (NVRTC's log, or why it could
    not compile), and ``grid``, ``block`` and ``launches``: the launches a
    GPU with ``sms`` streaming multiprocessors would make (132: an H100 SXM).
    Compiled kernels go into the kernel cache, so this also warms it for a
    later run on that architecture. ``block_limit`` caps the threads per block (0: none); pass
    ``emulation()["emulated_block"]`` to render the kernels the emulator runs.
    ``generic=True`` compiles each kernel's shape-generic template instead, with
    every integer size an argument (what ``LAZYFUSE_DYNAMIC=1`` runs).
    """
    return list(_C._compile_cuda(_as_list(tensors), arch, sms, block_limit, generic))


def nvrtc_info() -> dict[str, object]:
    """Says whether libnvrtc loads: ``found``, and ``path`` and ``version``, or ``error``."""
    return dict(_C._nvrtc())


def kernel_cache_dir() -> str:
    """Returns the on-disk kernel cache directory, or "" when it is off."""
    return str(_C._kernel_cache_dir())


def data_address(tensor: torch.Tensor) -> int:
    """The address of a computed lazy tensor's memory on the backing device,
    to see whether a step wrote it in place (buffer donation)."""
    return int(_C._data_address(tensor))


def loaded_kernel_modules() -> int:
    """Kernel modules loaded now (CUDA modules, emulated shared libraries).
    One is shared by every kernel with its binary, and unloaded when the
    graphs holding it leave the compile cache."""
    return int(_C._loaded_kernel_modules())


def clear_graph_cache() -> None:
    """Drops every compiled graph; the next step of each compiles again
    (from the kernel caches, so without running the compiler)."""
    _C._clear_graph_cache()


def emulation() -> dict[str, object]:
    """Whether fused kernels run under CUDA emulation on the CPU, with the
    emulator's block and grid, strictness, and the host compiler it uses (or
    why none was found)."""
    return dict(_C._kernel_settings())


def launch_emulated_source(
    source: str,
    name: str,
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
    grid: int = 1,
    block: int = 32,
) -> None:
    """Compiles a kernel the emulated dialect rendered (e.g. one from
    ``last_kernels()``, edited) and runs it over CPU tensors, in parameter
    order (0-dim inputs are host scalars). Raises what the emulator reports:
    out-of-bounds reads and writes, misaligned vector accesses, barriers not
    every thread reaches."""
    _C._launch_emulated_source(source, name, list(inputs), list(outputs), grid, block)
