"""Counters and metrics of the lazy device.

LTC's own counters are here (``CachedCompile``, ``UncachedCompile``,
``MarkStep``, ``IrNodeReused_*``), next to lazyfuse's: ``LazyFuseGraphsExecuted``,
the ``LazyFuseStepsPerGraph`` metric, ``LazyFuseFunctionalizedComposite`` (custom
ops run with functionalization), and one ``aten::<name>`` counter per op that
fell back to eager execution.
"""

from __future__ import annotations

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
    return {
        phase: float(_C._metric_summary(name).get("accumulator", 0.0)) / 1e9
        for phase, name in PHASE_METRICS.items()
    }


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
