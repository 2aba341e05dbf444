"""torch.distributed on lazy tensors: 2 ranks over Gloo on this machine,
talking through a FileStore, each a fresh process. A rank that hangs fails
its test within TIMEOUT_S; a rank that raises fails it with its traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import distributed_workers as workers
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import HOST_COMPILER, NO_FUSED_KERNELS, ON_CUDA

WORLD = 2
TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="this torch build has no torch.distributed with Gloo",
)


# Ranks talk over the loopback interface only.
LOOPBACK = {"GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}


def run_ranks(fn: Callable[..., None], *args: Any, env: dict[str, str] | None = None) -> None:
    """Runs fn(rank, WORLD, store, *args) on every rank; fails on an error or a hang."""
    env = {**LOOPBACK, **(env or {})}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    with tempfile.TemporaryDirectory() as directory:
        store = os.path.join(directory, "store")
        try:
            context = mp.start_processes(
                fn, args=(WORLD, store, *args), nprocs=WORLD, join=False, start_method="spawn"
            )
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        try:
            finished = False
            for _ in range(TIMEOUT_S * 10):
                if context.join(timeout=0.1):
                    finished = True
                    break
            assert finished, f"ranks still running after {TIMEOUT_S} s: a collective hung"
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()


def fused_or_skip(fused: bool) -> None:
    if fused and not (ON_CUDA or HOST_COMPILER):
        pytest.skip(NO_FUSED_KERNELS)


@pytest.mark.parametrize("fused", [False, True], ids=["aten", "fused"])
def test_collectives_match_eager(fused: bool) -> None:
    fused_or_skip(fused)
    run_ranks(workers.check_collectives, fused)


def test_ranks_stay_in_lockstep() -> None:
    run_ranks(workers.check_lockstep, False)


@pytest.mark.skipif(ON_CUDA, reason="the CPU stream serves the CPU backing device only")
def test_collectives_on_the_cpu_stream_keep_the_program_order() -> None:
    run_ranks(workers.check_collectives_on_the_stream, False)


@pytest.mark.parametrize("wrap", ["ddp", "ddp_bucket_view", "helpers"])
def test_mlp_with_adam_trains_like_one_process(wrap: str) -> None:
    run_ranks(workers.check_training, False, "mlp", wrap)


def test_ddp_cnn_with_batchnorm_trains_like_one_process() -> None:
    run_ranks(workers.check_training, False, "cnn", "ddp")


def test_ddp_under_fused_kernels() -> None:
    fused_or_skip(True)
    run_ranks(workers.check_training, True, "cnn", "ddp_bucket_view")


def test_collectives_under_distributed_debug_detail() -> None:
    # DETAIL wraps the group so that each collective first checks that every
    # rank calls the same one with the same shapes: a rank that runs a
    # collective alone, or out of order, raises instead of hanging.
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    run_ranks(workers.check_collectives, False, env=env)
    run_ranks(workers.check_lockstep, False, env=env)


def test_ddp_under_distributed_debug_info() -> None:
    # Not DETAIL: there eager DDP itself segfaults on a CPU Gloo group
    # (c10d::Logger::set_env_variables, torch 2.11 to 2.15), lazy or not.
    env = {"TORCH_DISTRIBUTED_DEBUG": "INFO"}
    run_ranks(workers.check_training, False, "mlp", "ddp_bucket_view", env=env)


def test_torchrun_runs_the_readme_example() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={WORLD}",
            "-m",
            "lazyfuse.ddp_demo",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **LOOPBACK},
        timeout=2 * TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.search(r"largest parameter difference after \d+ steps: (\S+)", result.stdout)
    assert match and float(match.group(1)) <= 1e-6, result.stdout
    assert "eager fallbacks on the lazy device: none" in result.stdout, result.stdout


@pytest.mark.parametrize("wrap", ["helpers", "ddp"])
def test_a_replayed_data_parallel_step_matches_the_traced_one(wrap: str) -> None:
    run_ranks(workers.check_replayed_training, False, wrap)
