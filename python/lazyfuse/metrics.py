"""Counters and metrics of the lazy device.

LTC's own counters are here (``CachedCompile``, ``UncachedCompile``,
``MarkStep``, ``IrNodeReused_*``), next to lazyfuse's: ``LazyFuseGraphsExecuted``,
the ``LazyFuseStepsPerGraph`` metric, ``LazyFuseFunctionalizedComposite`` (custom
ops run with functionalization), and one ``aten::<name>`` counter per op that
fell back to eager execution.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from lazyfuse import _C

GRAPHS_EXECUTED = "LazyFuseGraphsExecuted"
STEPS_PER_GRAPH = "LazyFuseStepsPerGraph"

# Where a graph's host time goes, as LTC timed metrics (nanoseconds summed).
PHASE_METRICS = {
    "lowering": "LazyFuseLowering",  # IR graph -> Program
    "planning": "LazyFusePlanning",  # Program -> fusion groups
    "nvrtc": "LazyFuseNvrtcCompile",  # CUDA source -> CUBIN/PTX, cache misses only
    "execute": "LazyFuseExecute",  # running a Program's steps (launches on CUDA)
}


def counter_names() -> list[str]:
    """Returns the names of every counter that has counted something."""
    return list(_C._counter_names())


def counter_value(name: str) -> int:
    """Returns a counter's value, 0 for a counter never touched."""
    return int(_C._counter_value(name))


def counters() -> dict[str, int]:
    """Returns every counter as a name -> value dict."""
    return {name: counter_value(name) for name in counter_names()}


def steps_per_graph() -> list[float]:
    """Returns the step count of each recently executed graph (oldest first)."""
    summary = _C._metric_summary(STEPS_PER_GRAPH)
    return list(summary.get("samples", []))


def phase_seconds() -> dict[str, float]:
    """Returns the seconds spent in each phase since the last reset:
    ``lowering``, ``planning``, ``nvrtc`` and ``execute``."""
    return {phase: timed_seconds(name) for phase, name in PHASE_METRICS.items()}


# What a new graph costs past tracing, beside PHASE_METRICS: ``compile`` (its
# Program's rewrites, the plan and the fused Program; planning included),
# ``kernel_choice`` (a kernel's first launch with new arguments: render, look
# up, load, any compile; inside ``execute``) and ``kernel_batch`` (the same
# for a whole graph's kernels at once, before its run: CPU kernels).
NEW_GRAPH_METRICS = {
    "compile": "LazyFuseCompile",
    "kernel_choice": "LazyFuseKernelChoice",
    "kernel_batch": "LazyFuseKernelBatch",
}


def timed_seconds(name: str) -> float:
    """Returns the seconds a timed metric (``PHASE_METRICS``,
    ``NEW_GRAPH_METRICS``) has summed since the last reset."""
    return float(_C._metric_summary(name).get("accumulator", 0.0)) / 1e9


def fallback_counts() -> dict[str, int]:
    """Returns the ops that ran through the eager fallback, with their counts."""
    return {name: value for name, value in counters().items() if name.startswith("aten::")}


def report() -> str:
    """Returns a text report of every metric and counter, fallbacks listed first."""
    fallbacks = fallback_counts()
    lines = [
        "lazyfuse fallbacks: "
        + (", ".join(f"{k}={v}" for k, v in sorted(fallbacks.items())) or "none")
    ]
    return "\n".join(lines) + "\n" + _C._metrics_report()


@dataclasses.dataclass
class MemoryReading:
    """What :func:`track_memory` measured, in bytes.

    ``peak_bytes`` and ``allocated_bytes`` count the backing device's
    allocations made on this thread while tracking, eager or lazy: memory
    allocated before it started is not counted. ``held_at_peak`` names the
    buffers a lazyfuse graph held after the step that reached the peak, largest
    first: ``(what, bytes)``, where ``what`` is the step that made the buffer, or
    the graph parameter it came in as (a lazy tensor's data, which its owner
    may also hold).
    """

    peak_bytes: int = 0
    allocated_bytes: int = 0
    held_at_peak: list[tuple[str, int]] = dataclasses.field(default_factory=list)

    def describe(self, top: int = 10) -> str:
        """The reading as text: the buffers held at the peak, summed by the
        step that made them (graph parameters together), largest first."""
        mib = 2**20
        lines = [
            f"peak {self.peak_bytes / mib:.2f} MiB, "
            f"{self.allocated_bytes / mib:.2f} MiB still allocated"
        ]
        groups: dict[str, list[int]] = {}
        for what, nbytes in self.held_at_peak:
            if what.startswith("parameter "):
                key = "graph parameters (lazy tensors' data)"
            else:
                key = what.split(" (step ")[0]
            groups.setdefault(key, []).append(nbytes)
        ranked = sorted(groups.items(), key=lambda item: -sum(item[1]))
        if ranked:
            lines.append("held by the graph at the peak:")
        for key, sizes in ranked[:top]:
            lines.append(f"  {sum(sizes) / mib:9.2f} MiB  {len(sizes):4d} x {key}")
        if len(ranked) > top:
            rest = sum(sum(sizes) for _, sizes in ranked[top:])
            lines.append(f"  {rest / mib:9.2f} MiB  {len(ranked) - top} more kinds")
        return "\n".join(lines)


@contextlib.contextmanager
def track_memory() -> Iterator[MemoryReading]:
    """Measures the peak memory of the code inside, eager or lazy.

    The analogue of ``torch.cuda.reset_peak_memory_stats()`` and
    ``torch.cuda.max_memory_allocated()`` for the lazy device's backing device,
    the CPU included. It reads allocations through the hook torch's profiler
    uses, so it cannot run inside ``torch.profiler.profile(profile_memory=True)``,
    and it counts this thread's allocations only (the executor's and eager's,
    not those of worker threads an op starts). The reading fills in on exit::

        with lazyfuse.metrics.track_memory() as reading:
            train_step()
            lazyfuse.mark_step()
        print(reading.describe())
    """
    reading = MemoryReading()
    meter = _C._start_memory_meter()
    try:
        yield reading
    finally:
        _C._stop_memory_meter(meter)
        reading.peak_bytes = int(meter.peak)
        reading.allocated_bytes = int(meter.allocated)
        reading.held_at_peak = list(meter.held_at_peak)


def cpu_output_cache() -> dict[str, int]:
    """What the CPU backing device keeps of freed kernel outputs for reuse.

    Kernel outputs of 1 MiB or more come from blocks freed earlier, as CUDA
    tensors come from torch's caching allocator, so a step does not page-fault
    fresh memory for each. ``kept_bytes``: freed blocks held (at most
    ``cap_bytes``, ``LAZYFUSE_CPU_CACHE_MB``); ``in_use_bytes``: pooled blocks
    in tensors now; ``reused``: allocations a kept block served.
    ``torch.lazy.empty_cache()`` frees what is kept. ``track_memory`` counts
    what is in use, not what is kept.
    """
    return {str(k): int(v) for k, v in _C._cpu_output_pool().items()}


def reset() -> None:
    """Resets every counter and metric to zero."""
    _C._reset_metrics()


# torch_xla's names (torch_xla.debug.metrics), with its meanings.

SHORT_REPORT_COUNTERS = [
    "MarkStep",
    "CachedCompile",
    "UncachedCompile",
    GRAPHS_EXECUTED,
    "LazyFuseKernelLaunches",
    "LazyFuseKernelFallbacks",
]
SHORT_REPORT_METRICS = list(PHASE_METRICS.values())


def metrics_report() -> str:
    """The full text report of every metric and counter (torch_xla's name)."""
    return report()


def short_metrics_report(
    counter_names: list[str] | None = None, metric_names: list[str] | None = None
) -> str:
    """A short report: compiles, executions, launches, fallbacks and phase
    times by default, and every op that fell back to eager."""
    lines = []
    for name in (counter_names or SHORT_REPORT_COUNTERS) + sorted(fallback_counts()):
        value = counter_value(name)
        if value:
            lines.append(f"Counter: {name}\n  Value: {value}")
    for name in metric_names or SHORT_REPORT_METRICS:
        total, accumulator, _ = metric_data(name) or (0, 0.0, [])
        if total:
            lines.append(f"Metric: {name}\n  TotalSamples: {total}\n  Accumulator: {accumulator}")
    return "\n".join(lines) + ("\n" if lines else "")


def executed_fallback_ops() -> list[str]:
    """The ops that ran through the eager fallback, as ``aten::<name>``."""
    return sorted(fallback_counts())


def metric_names() -> list[str]:
    """The names of every metric that has recorded a sample."""
    return list(_C._metric_names())


def metric_data(name: str) -> tuple[int, float, list[tuple[int, float]]] | None:
    """``(total_samples, accumulator, [(timestamp_ns, value), ...])`` of a
    metric, or None when it has never recorded a sample."""
    summary = _C._metric_summary(name)
    if not summary:
        return None
    samples = list(zip(summary["timestamps_ns"], summary["samples"], strict=True))
    return int(summary["total_samples"]), float(summary["accumulator"]), samples


def clear_counters() -> None:
    """Resets every counter to zero."""
    _C._clear_counters()


def clear_metrics() -> None:
    """Drops every metric's samples."""
    _C._clear_metrics()


def clear_all() -> None:
    """Resets every counter and metric."""
    reset()
