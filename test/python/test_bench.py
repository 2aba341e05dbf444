"""The GPU benchmark scripts run in a GPU session's scarce device minutes, so
their CPU paths are exercised here: a script that breaks is found in CI, not
on the GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_training_smoke_runs_every_model(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "bench/gpu_training.py", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_training.json").read_text())
    models = {row["model"] for row in report["training"]}
    assert models == {"mlp", "lenet5", "transformer"}
    assert all(row["steps/s"] > 0 for row in report["training"])
    assert report["mark_step_us"] > 0
    assert "| mlp | lazyfuse |" in (tmp_path / "gpu_training.md").read_text()


def test_gpu_check_script_parses() -> None:
    run = subprocess.run(
        ["bash", "-n", "scripts/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr


def test_host_overhead_smoke_counts_kernels_per_step(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "bench/host_overhead.py", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads((tmp_path / "host_overhead.json").read_text())
    assert {row["model"] for row in report["counts"]} == {"mlp", "lenet5", "transformer"}
    for row in report["counts"]:
        # Fusion launches fewer kernels than eager dispatches ops, and every
        # view group is an alias, not a kernel.
        assert 0 < row["lazyfuse kernels"] < row["eager ops"], row
        assert row["aliased view groups"] > 0, row
    assert report["overhead"]["host µs per launch"] > 0
    assert "| transformer |" in (tmp_path / "host_overhead.md").read_text()
