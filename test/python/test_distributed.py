"""torch.distributed on lazy tensors: 2 ranks over Gloo on this machine,
talking through a FileStore, each a fresh process. A rank that hangs fails
its test within TIMEOUT_S; a rank that raises fails it with its traceback."""

from __future__ import annotations

import os
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


def run_ranks(fn: Callable[..., None], *args: Any, env: dict[str, str] | None = None) -> None:
    """Runs fn(rank, WORLD, store, *args) on every rank; fails on an error or a hang."""
    saved = {key: os.environ.get(key) for key in env or {}}
    os.environ.update(env or {})
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


@pytest.mark.parametrize("bucket_view", [False, True], ids=["copied", "bucket_view"])
def test_ddp_mlp_with_adam_trains_like_one_process(bucket_view: bool) -> None:
    run_ranks(workers.check_ddp, False, "mlp", bucket_view)


def test_ddp_cnn_with_batchnorm_trains_like_one_process() -> None:
    run_ranks(workers.check_ddp, False, "cnn", False)


def test_ddp_under_fused_kernels() -> None:
    fused_or_skip(True)
    run_ranks(workers.check_ddp, True, "cnn", True)


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
    run_ranks(workers.check_ddp, False, "mlp", True, env={"TORCH_DISTRIBUTED_DEBUG": "INFO"})
