"""The GPU benchmark scripts run in a GPU session's scarce device minutes, so
their CPU paths are exercised here: a script that breaks is found in CI, not
on the GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import lazyfuse

ROOT = Path(__file__).resolve().parents[2]


def smoke_report(script: str, out: Path, *extra: str) -> Any:
    """Runs bench/<script>.py --smoke into `out`; its JSON report."""
    run = subprocess.run(
        [sys.executable, f"bench/{script}.py", "--smoke", "--out", str(out), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return json.loads((out / f"{script}.json").read_text())


def test_gpu_training_smoke_runs_every_model(tmp_path: Path) -> None:
    report = smoke_report("gpu_training", tmp_path, "--windows", "2")
    models = {row["model"] for row in report["training"]}
    assert models == {"mlp", "lenet5", "transformer"}
    assert all(row["steps/s"] > 0 for row in report["training"])
    assert all(len(row["windows steps/s"]) == 2 for row in report["training"])
    assert all(row["full gcs"] >= 0 for row in report["training"])
    replayed = [row for row in report["training"] if row["engine"] == "lazyfuse-replay"]
    assert replayed and all(row["replayed calls"] > 0 for row in replayed)
    assert report["mark_step_us"] > 0
    assert "| mlp | lazyfuse |" in (tmp_path / "gpu_training.md").read_text()


def test_gpu_replay_host_smoke_splits_host_from_whole(tmp_path: Path) -> None:
    (row,) = smoke_report("gpu_replay_host", tmp_path)
    assert row["model"] == "mlp" and row["replayed calls"] > 0, row
    assert len(row["host ms/step"]) == len(row["whole ms/step"]) == 2, row
    assert all(h <= w for h, w in zip(row["host ms/step"], row["whole ms/step"], strict=True))
    assert row["top host ops (calls/step, self µs/step)"], row
    assert "| mlp |" in (tmp_path / "gpu_replay_host.md").read_text()


def test_cuda_graph_probe_smoke_compares_twins(tmp_path: Path) -> None:
    # The CPU path has no graph: the "graph" twin replays too, so the twins
    # must agree bit for bit, and no replay may move an updated tensor but
    # Adam's 0-dim step counters (host scalars).
    rows = smoke_report("cuda_graph_probe", tmp_path)
    assert [row["model"] for row in rows] == ["mlp", "lenet5", "transformer"]
    for row in rows:
        assert row["replaying"] and row["bitwise after 3"], row
        assert all(shape == [] for shape in row["moved by a replay"]), row


@pytest.mark.parametrize("script", ["gpu_check.sh", "build_for_gpu_machine.sh", "gpu_questions.sh"])
def test_gpu_scripts_parse(script: str) -> None:
    # They run only where a GPU is lent; a syntax error would cost device time.
    run = subprocess.run(
        ["bash", "-n", f"scripts/{script}"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr


def test_host_overhead_smoke_counts_kernels_per_step(tmp_path: Path) -> None:
    report = smoke_report("host_overhead", tmp_path)
    assert {row["model"] for row in report["counts"]} == {"mlp", "lenet5", "transformer"}
    for row in report["counts"]:
        # Fusion launches fewer kernels than eager dispatches ops, and every
        # view group is an alias, not a kernel.
        assert 0 < row["lazyfuse kernels"] < row["eager ops"], row
        assert row["aliased view groups"] > 0, row
    assert report["overhead"]["host µs per launch"] > 0
    assert "| transformer |" in (tmp_path / "host_overhead.md").read_text()


def test_ddp_overhead_smoke_times_both_engines(tmp_path: Path) -> None:
    report = smoke_report("ddp_overhead", tmp_path)
    (row,) = report["rows"]
    for engine in ("eager", "lazyfuse"):
        assert row[f"{engine} 1 rank ms"] > 0 and row[f"{engine} 2 ranks ms"] > 0, row
    assert "| mlp |" in (tmp_path / "ddp_overhead.md").read_text()


def test_ddp_alternating_smoke_reads_every_engines_overhead(tmp_path: Path) -> None:
    report = smoke_report("ddp_alternating", tmp_path)
    (row,) = report["rows"]
    for engine in ("eager", "lazyfuse", "lazyfuse-replay"):
        assert isinstance(row[f"{engine} overhead ms"], float), row
    assert "lazyfuse-replay ÷ eager" in row and "lazyfuse target met" in row, row
    assert "| mlp |" in (tmp_path / "ddp_alternating.md").read_text()


def test_cpu_kernels_bench_times_every_engine(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "bench/cpu_kernels.py", "--max-log2", "12", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = json.loads((tmp_path / "cpu_kernels.json").read_text())
    engines = {
        "eager",
        "torch.compile",
        "lazyfuse",
        "lazyfuse, ATen steps",
        "lazyfuse, no output cache",
    }
    assert {(row["workload"], row["engine"]) for row in rows} == {
        (workload, engine)
        for workload in (
            "pointwise x1",
            "pointwise x4",
            "pointwise x16",
            "softmax",
            "layer_norm",
            "column sum",
            "max_pool 2x2",
        )
        for engine in engines
    }
    assert all(row["us"] > 0 and row["% of copy"] > 0 for row in rows)


def test_memory_smoke_measures_every_case_and_engine(tmp_path: Path) -> None:
    report = smoke_report("memory", tmp_path)
    measured = {(row["case"], row["engine"]) for row in report["results"]}
    assert {case for case, _ in measured} == set(report["cases"]) and len(measured) == 12
    for row in report["results"]:
        assert row["peak_mib"] >= row["held_mib"] > 0, row
    lazy = [row for row in report["results"] if row["engine"] != "eager"]
    assert all("held by the graph at the peak" in row["held_at_peak"] for row in lazy)
    assert "| mlp-2048 | lazyfuse |" in (tmp_path / "memory.md").read_text()


def test_gpu_time_split_smoke_splits_each_case(tmp_path: Path) -> None:
    rows = smoke_report("gpu_time_split", tmp_path)
    assert [(r["model"], r["engine"]) for r in rows] == [
        ("mlp", "eager"),
        ("mlp", "lazyfuse-replay"),
    ]
    for row in rows:
        assert "error" not in row, row
        assert row["wall ms"] > 0


def test_first_step_smoke_times_serial_and_side_by_side_compiles(tmp_path: Path) -> None:
    rows = smoke_report("first_step", tmp_path)
    assert [r["threads"] for r in rows][0] == 1
    for row in rows:
        assert "error" not in row, row
        assert row["kernels compiled"] > 0 and row["first step s"] > 0
    # Side by side or not, the same kernels compile.
    assert len({r["kernels compiled"] for r in rows}) == 1


def test_new_shapes_smoke_builds_fewer_kernels_for_the_third_length(tmp_path: Path) -> None:
    report = smoke_report("new_shapes", tmp_path)
    auto, per_shape = report["runs"]["auto"]["steps"], report["runs"]["0"]["steps"]
    assert [row[0] for row in auto] == [row[0] for row in per_shape] == [16, 17, 18]
    # The third length's graph is new either way; only LAZYFUSE_DYNAMIC=0
    # builds its kernels again.
    assert auto[2][2] < per_shape[2][2]
    # Each new length's step records its phases: compiling a graph (the
    # timer around the plan) includes planning, and both ran.
    phases = auto[2][4]
    assert set(lazyfuse.metrics.NEW_GRAPH_METRICS) <= set(phases)
    assert phases["compile"] >= phases["planning"] > 0 and phases["lowering"] > 0
    assert report["steady"]["0"]["steady"] > 0 and report["steady"]["1"]["steady"] > 0


def test_alternating_smoke_times_every_engine_on_every_model(tmp_path: Path) -> None:
    report = smoke_report("alternating", tmp_path, "--replay")
    assert set(report) == {"mlp", "lenet5", "transformer"}
    for figures in report.values():
        assert figures["eager_us"] > 0 and figures["lazyfuse_us"] > 0
        assert figures["lazyfuse_speed_vs_eager"] > 0 and figures["lazyfuse_execute_us"] > 0
        assert figures["replay_us"] > 0 and figures["replay_speed_vs_eager"] > 0


def test_strategy_reuse_smoke_times_both_kernels_and_sees_another_strategy(
    tmp_path: Path,
) -> None:
    rows = smoke_report("strategy_reuse", tmp_path)
    assert {r["workload"] for r in rows} == {"softmax", "layer_norm", "sum"}
    assert all(r["own_us"] > 0 and r["template_us"] > 0 for r in rows)
    # Rows of 64 call for blocks of 64 threads (emulated blocks of up to
    # 256): they run the 32-thread template that rows of 17 and 18 made.
    assert all(r["another_strategy"] for r in rows if r["length"] == 64), rows


def test_view_writes_smoke_writes_in_place(tmp_path: Path) -> None:
    report = smoke_report("view_writes", tmp_path)
    assert [(row["write"], row["cache"]) for row in report["rows"]] == [
        ("view", "1x2x16x8"),
        ("index_copy", "1x2x16x8"),
    ]
    assert all(row["lazyfuse ms/write"] > 0 for row in report["rows"])
    # Per write kind, every write (3 to warm up, then the timed ones) writes
    # into the cache: the first used to copy it.
    assert report["in-place scatters"] == 2 * (3 + report["steps"])
    assert report["eager fallbacks"] == 0
