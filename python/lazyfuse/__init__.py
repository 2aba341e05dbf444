"""lazyfuse: a lazy-tensor device for PyTorch.

Ops on tensors placed on :func:`lazy_device` only record IR. The pending graph
is compiled once per graph hash and run when :func:`mark_step` is called or a
value is read (``print``, ``.cpu()``, ``.item()``, a tensor in an ``if``).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import torch


def _check_torch_version() -> None:
    # _C links against one torch's C++ symbols. Loading it under another torch
    # fails deep in the dynamic linker, so say it first, in a sentence.
    try:
        from lazyfuse._build_info import TORCH_VERSION
    except ImportError:  # built by CMake directly: no version was recorded
        return
    running = torch.__version__.split("+")[0]
    if running != TORCH_VERSION:
        raise ImportError(
            f"lazyfuse was built for torch {TORCH_VERSION}, but torch {running} is "
            f"installed. Install torch=={TORCH_VERSION}, or rebuild lazyfuse against "
            "this torch: pip install --no-build-isolation ."
        )


_check_torch_version()

from lazyfuse import _C, _torch_lazy, device_module  # noqa: E402

# torch defines some custom ops only on first use (linear_cross_entropy's
# chunked variants). Defined before init, they are registered to run with
# functionalization on lazy tensors (csrc/ops/functionalized_composite.h).
for _module in ("torch.nn.modules.linear_cross_entropy",):
    try:
        importlib.import_module(_module)
    except ImportError:  # torch releases that do not have it
        pass

# Importing lazyfuse registers it as the process's `lazy` device.
_C._init()
_C._dynamic_kernels()  # a bad LAZYFUSE_DYNAMIC raises here, not at the first kernel
_C._cpu_output_pool()  # and a bad LAZYFUSE_CPU_CACHE_MB
_torch_lazy.install()
atexit.register(_C._synchronize_cpu_stream)
# Before os.fork (a DataLoader's workers) the stream is waited for here, with
# the GIL let go: the wait in the fork itself holds it (runtime/cpu/stream.cpp).
os.register_at_fork(before=_C._synchronize_cpu_stream)
device_module.register()
# Frames under these folders are never a user's call site (compile log).
_C._set_library_dirs(
    sorted(
        {
            os.path.join(os.path.dirname(resolve(path)), "")
            for path in (torch.__file__, __file__)
            for resolve in (os.path.abspath, os.path.realpath)
        }
    )
)

# module_conversion and fx_tracing: imported for what they set, Module.to()'s
# way with lazy tensors and make_fx's refusal of them.
from lazyfuse import (  # noqa: E402, F401
    amp,
    config,
    contiguous,
    debug,
    distributed,
    fx_tracing,
    metrics,
    module_conversion,
    optim,
    selective_checkpoint,
    serialization,
)
from lazyfuse import replay as replay_module  # noqa: E402
from lazyfuse.amp import autocast  # noqa: E402

amp.install_torch_autocast()
serialization.install()
contiguous.install()
selective_checkpoint.install()

__all__ = [
    "add_step_closure",
    "amp",
    "autocast",
    "compile",
    "initialize_cache",
    "config",
    "debug",
    "distributed",
    "lazy_device",
    "mark_step",
    "metrics",
    "optim",
    "sync",
    "wait_device_ops",
]


def lazy_device(index: int = 0) -> torch.device:
    """Returns the lazy device, ``torch.device("lazy", index)``.

    Move models and tensors there with ``.to(lazyfuse.lazy_device())``.
    """
    return torch.device("lazy", index)


_step_closures: list[tuple[Callable[..., object], tuple[object, ...], bool]] = []
_step_closures_lock = threading.Lock()


def mark_step(wait: bool = False) -> None:
    """Compiles (or finds in the cache) and runs the graph of every live lazy tensor.

    Call it once per training step. With ``wait=True`` it returns only after the
    backing device has finished the work. Closures registered with
    :func:`add_step_closure` run afterwards, in order.
    """
    _C._mark_step(wait)
    if not _step_closures:  # the usual step: no lock on this hot path
        return
    with _step_closures_lock:
        closures = list(_step_closures)
        _step_closures.clear()
    for closure, args, run_async in closures:
        if run_async:
            threading.Thread(target=closure, args=args, daemon=True).start()
        else:
            closure(*args)


def sync(wait: bool = False) -> None:
    """torch_xla's name for :func:`mark_step`."""
    mark_step(wait)


def add_step_closure(
    closure: Callable[..., object], args: Sequence[object] = (), run_async: bool = False
) -> None:
    """Runs ``closure(*args)`` at the end of the next :func:`mark_step`, once
    the step's graph has been launched: the way to log a loss without a
    mid-step sync. Reading a tensor inside the closure waits for the graph to
    finish (it may still be running, as on a GPU or under asynchronous
    execution) and costs no extra graph. With ``run_async=True`` it runs on a
    background thread. torch_xla's API."""
    with _step_closures_lock:
        _step_closures.append((closure, tuple(args), run_async))


def wait_device_ops() -> None:
    """Blocks until every graph already launched on the backing device has finished."""
    _C._wait_device_ops()


def initialize_cache(path: str, readonly: bool = False) -> None:
    """Puts the kernel disk cache at ``path`` (torch_xla's API). With
    ``readonly=True`` compiled kernels are read from it but never written
    there, for a cache shared between machines. Call it before the first
    kernel compiles: kernels already in memory stay there."""
    os.environ["LAZYFUSE_CACHE_DIR"] = str(path)
    os.environ["LAZYFUSE_CACHE_READONLY"] = "1" if readonly else "0"


class _CompiledRegion:
    """A region that syncs before and after it runs (see :func:`compile`)."""

    def __init__(
        self, full_graph: bool, name: str | None, max_different_graphs: int | None
    ) -> None:
        self.full_graph = full_graph
        self.name = name
        self.max_different_graphs = max_different_graphs
        self.graphs: set[str] = set()
        self._executed = 0
        self._uncached = 0

    def _label(self) -> str:
        return f"lazyfuse.compile({self.name!r})" if self.name else "lazyfuse.compile"

    def __enter__(self) -> _CompiledRegion:
        mark_step()
        self._executed = metrics.counter_value(metrics.GRAPHS_EXECUTED)
        self._uncached = metrics.counter_value("UncachedCompile")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            return
        forced = metrics.counter_value(metrics.GRAPHS_EXECUTED) - self._executed
        if self.full_graph and forced:
            raise RuntimeError(
                f"{self._label()}: full_graph=True, but {forced} graph(s) ran inside the region "
                "before its end: something read a lazy value (.item(), .cpu(), print, a tensor "
                "in an if). See lazyfuse.debug.compile_log()."
            )
        executed = metrics.counter_value(metrics.GRAPHS_EXECUTED)
        mark_step()
        if metrics.counter_value(metrics.GRAPHS_EXECUTED) > executed:
            self.graphs.add(_C._last_graph_hash())
        limit = self.max_different_graphs
        if limit is not None and len(self.graphs) > limit:
            new = metrics.counter_value("UncachedCompile") - self._uncached
            records = debug.compile_log()[-new:] if new > 0 else debug.compile_log()[-1:]
            log = "\n".join(
                f"  {record['hash']}: {record['cause']} at {record['call_site']}"
                for record in records
            )
            raise RuntimeError(
                f"{self._label()}: ran {len(self.graphs)} different graphs, more than "
                f"max_different_graphs={limit}. The latest compiles:\n{log}"
            )

    def __call__(self, f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self:
                return f(*args, **kwargs)

        return wrapped


_named_regions: dict[str, _CompiledRegion] = {}


def compile(  # noqa: A001 (torch_xla's name)
    f: Callable[..., Any] | None = None,
    full_graph: bool = False,
    name: str | None = None,
    max_different_graphs: int | None = None,
    replay: bool = False,
    check_every: int = replay_module.DEFAULT_CHECK_EVERY,
) -> Any:
    """torch_xla's ``compile``: a wrapper, a decorator (with or without
    arguments) or a context manager around code that should run as one lazy
    graph. It syncs before and after the region. ``full_graph=True`` raises if
    anything inside forces execution; ``max_different_graphs=N`` raises, with
    the compile log, once the region has run more than N distinct graphs
    (a named region counts across its uses).

    ``replay=True`` (a wrapper or decorator only) runs the step's cached graph
    without its Python once two traced calls captured the same one; see
    :mod:`lazyfuse.replay` and the README's "Replaying a training step" for
    what is frozen and what is guarded. ``check_every`` replays, one call is
    traced again to check the capture still holds."""
    if replay:
        if full_graph or max_different_graphs is not None or name is not None:
            raise ValueError(
                "lazyfuse.compile: replay=True runs one captured graph per call, so it takes "
                "no full_graph, max_different_graphs or name"
            )
        if f is None:
            return lambda fn: replay_module.ReplayedStep(fn, check_every)
        return replay_module.ReplayedStep(f, check_every)
    if name is not None and name in _named_regions:
        region = _named_regions[name]
        region.full_graph, region.max_different_graphs = full_graph, max_different_graphs
    else:
        region = _CompiledRegion(full_graph, name, max_different_graphs)
        if name is not None:
            _named_regions[name] = region
    return region if f is None else region(f)
