"""Turns a harness run into results.json, results.md and one PNG per workload."""

from __future__ import annotations

import json
from pathlib import Path

WORKLOAD_TITLES = {
    "tracing": "(a) Tracing: 1000 pointwise ops on 16-element tensors, no mark_step",
    "markstep": "(b) Cache-hit mark_step: one graph of N pointwise nodes, again and again",
    "compile": "(c) Compile cost: the first training step of a fresh process",
    "training": "(d) Training steps",
}


def median(results: dict, engine: str, metric: str) -> float | None:
    entry = results.get(engine, {})
    return entry.get("summary", {}).get(metric, {}).get("median")


def cell(entry: dict, metric: str) -> str:
    if "na" in entry:
        return "n/a"
    if "error" in entry:
        return "failed"
    stats = entry.get("summary", {}).get(metric)
    if not stats:
        return "–"
    return f"{stats['median']:.4g} ({stats['p90']:.4g})"


def workload_tables(report: dict) -> list[str]:
    lines: list[str] = []
    by_workload: dict[str, list[dict]] = {}
    for item in report["cases"]:
        by_workload.setdefault(item["case"]["workload"], []).append(item)
    for workload, items in by_workload.items():
        lines += ["", f"### {WORKLOAD_TITLES.get(workload, workload)}", ""]
        first = items[0]["case"]
        better = "lower" if first["lower_is_better"] else "higher"
        lines.append(f"Median (p90) of `{first['metric']}` in {first['unit']}; {better} is better.")
        lines.append("")
        engines = list(dict.fromkeys(e for item in items for e in item["results"]))
        headers = [item["case"]["param"] or item["case"]["name"] for item in items]
        lines.append("| engine | " + " | ".join(headers) + " |")
        lines.append("|---" * (len(headers) + 1) + "|")
        for engine in engines:
            row = [cell(item["results"].get(engine, {}), item["case"]["metric"]) for item in items]
            lines.append(f"| {engine} | " + " | ".join(row) + " |")
        lines += detail_tables(items)
        notes = sorted(
            {
                f"- {engine}: {entry.get('na') or entry.get('error')}"
                for item in items
                for engine, entry in item["results"].items()
                if "na" in entry or "error" in entry
            }
        )
        if notes:
            lines += ["", *notes]
    return lines


def detail_tables(items: list[dict]) -> list[str]:
    """The other metrics lazyfuse reports (execution vs overhead, phases)."""
    lines: list[str] = []
    for engine in ("lazyfuse-cpu", "lazyfuse-replay-cpu", "lazyfuse-cuda"):
        metrics: list[str] = []
        for item in items:
            summary = item["results"].get(engine, {}).get("summary", {})
            metrics += [m for m in summary if m != item["case"]["metric"] and m not in metrics]
        if not metrics:
            continue
        lines += ["", f"{engine}, every metric (median):", ""]
        lines.append("| case | " + " | ".join(metrics) + " |")
        lines.append("|---" * (len(metrics) + 1) + "|")
        for item in items:
            summary = item["results"].get(engine, {}).get("summary", {})
            row = [f"{summary[m]['median']:.4g}" if m in summary else "–" for m in metrics]
            lines.append(f"| {item['case']['name']} | " + " | ".join(row) + " |")
    return lines


def targets(report: dict) -> list[tuple[str, float | None, float | None]]:
    """The issue's CPU targets: (what, measured, limit); met when measured <= limit."""
    cases = {item["case"]["name"]: item for item in report["cases"]}
    out: list[tuple[str, float | None, float | None]] = []

    def get(case: str, engine: str, metric: str) -> float | None:
        return median(cases[case]["results"], engine, metric) if case in cases else None

    if "tracing" in cases:
        lazy, eager = (
            get("tracing", "lazyfuse-cpu", "us_per_op"),
            get("tracing", "eager-cpu", "us_per_op"),
        )
        ts = get("tracing", "ts-lazy", "us_per_op")
        out.append(("tracing µs/op ≤ eager CPU op", lazy, eager))
        out.append(("tracing µs/op ≤ 0.5 × TorchScript lazy", lazy, ts * 0.5 if ts else None))
    for n in (10, 100, 1000):
        name = f"markstep-{n}"
        if name in cases:
            overhead = get(name, "lazyfuse-cpu", "overhead_us")
            out.append((f"mark_step N={n}: host overhead µs ≤ 30 + 0.5·N", overhead, 30 + 0.5 * n))
    for n in (10, 100, 1000):
        name = f"markstep-{n}"
        overhead = get(name, "lazyfuse-replay-cpu", "overhead_us") if name in cases else None
        if overhead is not None:
            # Issue "Trace once, replay every step": one ATen call per node here.
            limit = 20 + 0.3 * n
            out.append(
                (f"replayed step N={n}: host µs besides execution ≤ 20 + 0.3·N", overhead, limit)
            )
    for model in ("mlp", "lenet5"):
        name = f"train-{model}"
        if name in cases:
            eager = get(name, "eager-cpu", "ms_per_step")
            out.append(
                (
                    f"{model} ms/step ≤ 1.15 × eager CPU",
                    get(name, "lazyfuse-cpu", "ms_per_step"),
                    eager * 1.15 if eager else None,
                )
            )
    for model in ("mlp", "lenet5", "transformer"):
        name = f"train-{model}"
        replayed = get(name, "lazyfuse-replay-cpu", "ms_per_step") if name in cases else None
        if replayed is not None:
            eager = get(name, "eager-cpu", "ms_per_step")
            out.append((f"{model} replayed ms/step ≤ eager CPU", replayed, eager))
    for name, item in cases.items():
        case = item["case"]
        lazy, ts = get(name, "lazyfuse-cpu", case["metric"]), get(name, "ts-lazy", case["metric"])
        if lazy is None or ts is None:
            continue
        if case["lower_is_better"]:
            out.append((f"{name}: faster than TorchScript lazy ({case['unit']})", lazy, ts))
        else:  # compare times: 1 / rate
            out.append((f"{name}: faster than TorchScript lazy (s per step)", 1 / lazy, 1 / ts))
    return out


def target_lines(report: dict) -> list[str]:
    rows = targets(report)
    if not rows:
        return []
    lines = [
        "",
        "### Targets (CPU, ratios from this run)",
        "",
        "| target | measured | limit | met |",
        "|---|---|---|---|",
    ]
    for what, measured, limit in rows:
        if measured is None or limit is None:
            lines.append(f"| {what} | – | – | not measured |")
            continue
        met = "yes" if measured <= limit else "**no**"
        lines.append(f"| {what} | {measured:.4g} | {limit:.4g} | {met} |")
    return lines


def markdown(report: dict) -> str:
    meta = report["meta"]
    lines = [
        f"## Benchmark run {meta['date']}",
        "",
        f"- command: `{meta['command']}`",
        f"- torch {meta['torch']}, Python {meta['python']}, {meta['machine']}",
        f"- GPU: {meta['gpu'] or 'none'}; lazyfuse revision {meta['lazyfuse_revision']}",
        "- engines: "
        + "; ".join(f"`{k}`" + (f" ({v})" if v else "") for k, v in meta["engines"].items()),
    ]
    lines += workload_tables(report)
    lines += target_lines(report)
    return "\n".join(lines) + "\n"


def charts(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_workload: dict[str, list[dict]] = {}
    for item in report["cases"]:
        by_workload.setdefault(item["case"]["workload"], []).append(item)
    for workload, items in by_workload.items():
        engines = list(dict.fromkeys(e for item in items for e in item["results"]))
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(items) * max(1, len(engines)) / 3), 4))
        width = 0.8 / max(1, len(engines))
        values = []
        for k, engine in enumerate(engines):
            xs, ys, errs = [], [], []
            for i, item in enumerate(items):
                stats = (
                    item["results"].get(engine, {}).get("summary", {}).get(item["case"]["metric"])
                )
                if stats:
                    xs.append(i + (k - (len(engines) - 1) / 2) * width)
                    ys.append(stats["median"])
                    errs.append(max(0.0, stats["p90"] - stats["median"]))
            values += ys
            ax.bar(xs, ys, width, yerr=[[0] * len(errs), errs], label=engine, capsize=2)
        ax.set_xticks(range(len(items)))
        ax.set_xticklabels([item["case"]["param"] or item["case"]["name"] for item in items])
        first = items[0]["case"]
        ax.set_ylabel(f"{first['metric']} ({first['unit']})")
        if values and min(values) > 0 and max(values) / min(values) > 50:
            ax.set_yscale("log")
        ax.set_title(WORKLOAD_TITLES.get(workload, workload), fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"{workload}.png", dpi=110)
        plt.close(fig)


def write_reports(report: dict, out: Path) -> None:
    (out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "results.md").write_text(markdown(report))
    charts(report, out)
