"""The engines the harness compares, and how a worker process sets one up.

Each engine runs in a process of its own: lazyfuse and torch._lazy's
TorchScript backend both register the ``lazy`` device and cannot share one,
and torch.compile's caches should not leak into anyone else's timings.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class EngineSpec:
    name: str
    kind: str  # eager | lazyfuse | compile | ts
    backing: str  # cpu | cuda
    mode: str | None = None  # torch.compile mode
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    replay: bool = False  # lazyfuse.compile(step, replay=True)


# The kernel cache off: the NVRTC dry run compiles.
LAZYFUSE_CPU_ENV = {"LAZYFUSE_DEVICE": "cpu", "LAZYFUSE_CACHE_DIR": "0"}

ENGINES: list[EngineSpec] = [
    EngineSpec("eager-cpu", "eager", "cpu"),
    EngineSpec("eager-cuda", "eager", "cuda"),
    EngineSpec(
        "lazyfuse-cpu",
        "lazyfuse",
        "cpu",
        env=LAZYFUSE_CPU_ENV,
    ),
    EngineSpec(
        "lazyfuse-aten-cpu",
        "lazyfuse",
        "cpu",
        env={**LAZYFUSE_CPU_ENV, "LAZYFUSE_CPU_KERNELS": "0"},
        note="every step its own ATen call: no CPU kernels",
    ),
    EngineSpec(
        "lazyfuse-torch-inplace-cpu",
        "lazyfuse",
        "cpu",
        env={**LAZYFUSE_CPU_ENV, "LAZYFUSE_INPLACE_UPDATES": "0"},
        note="in-place ops through torch's functionalization and its meta check",
    ),
    EngineSpec(
        "lazyfuse-replay-cpu",
        "lazyfuse",
        "cpu",
        env=LAZYFUSE_CPU_ENV,
        note="lazyfuse.compile(step, replay=True): the cached step without its Python",
        replay=True,
    ),
    EngineSpec(
        "lazyfuse-cuda",
        "lazyfuse",
        "cuda",
        env={"LAZYFUSE_DEVICE": "cuda", "LAZYFUSE_CACHE_DIR": "0"},
    ),
    EngineSpec("compile-cpu", "compile", "cpu", note="torch.compile, default mode"),
    EngineSpec("compile-cuda", "compile", "cuda", note="torch.compile, default mode"),
    EngineSpec(
        "compile-cuda-ro", "compile", "cuda", mode="reduce-overhead", note="reduce-overhead"
    ),
    EngineSpec("ts-lazy", "ts", "cpu", note="torch._lazy TorchScript backend, its defaults"),
    EngineSpec(
        "ts-lazy-reuse",
        "ts",
        "cpu",
        env={"LTC_REUSE_IR": "1"},
        note="TorchScript backend with IR reuse on, as lazyfuse has it",
    ),
    EngineSpec("ts-lazy-cuda", "ts", "cuda", env={"LTC_TS_CUDA": "1"}),
]


def engine_spec(name: str) -> EngineSpec:
    for spec in ENGINES:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown engine {name!r}; known: {', '.join(s.name for s in ENGINES)}")


def available_engines(has_cuda: bool) -> list[EngineSpec]:
    return [spec for spec in ENGINES if spec.backing == "cpu" or has_cuda]


class NotApplicable(Exception):
    """A workload that has no meaning for an engine (reported as n/a, with why)."""


class Engine:
    """An engine set up inside a worker process."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.kind = spec.kind
        self.device = torch.device(spec.backing)
        self._mark_step: Callable[[], None] = lambda: None
        self._wait: Callable[[], None] = self._cuda_sync if spec.backing == "cuda" else _nothing
        if spec.kind == "lazyfuse":
            import lazyfuse

            self.device = lazyfuse.lazy_device()
            self._mark_step = lazyfuse.mark_step
            self._wait = lazyfuse.wait_device_ops
        elif spec.kind == "ts":
            import torch._lazy.ts_backend as ts_backend
            from torch import _lazy as ltc

            ts_backend.init()
            if os.environ.get("LTC_REUSE_IR") == "1":
                torch._C._lazy._set_reuse_ir(True)
            self.device = torch.device("lazy")
            self._mark_step = ltc.mark_step
            self._wait = ltc.wait_device_ops

    @staticmethod
    def _cuda_sync() -> None:
        torch.cuda.synchronize()

    @property
    def is_lazy(self) -> bool:
        return self.kind in ("lazyfuse", "ts")

    def mark_step(self) -> None:
        """Ends a step: runs the pending graph on lazy engines, nothing elsewhere."""
        self._mark_step()

    def wait(self) -> None:
        """Waits until everything launched so far has finished."""
        self._wait()

    @property
    def replays(self) -> bool:
        return self.spec.replay

    def replay(self, step: Callable) -> Callable:
        """A whole step, replayed on a replaying engine; as it is elsewhere."""
        if not self.spec.replay:
            return step
        import lazyfuse

        return lazyfuse.compile(step, replay=True)

    def compile(self, fn: Callable) -> Callable:
        if self.kind != "compile":
            return fn
        if self.spec.mode:
            return torch.compile(fn, mode=self.spec.mode)
        return torch.compile(fn)

    def info(self) -> dict[str, str]:
        out = {
            "engine": self.name,
            "torch": torch.__version__,
            "device": str(self.device),
            "backing": self.spec.backing,
        }
        if self.spec.backing == "cuda":
            out["gpu"] = torch.cuda.get_device_name(0)
        if self.kind == "lazyfuse":
            import lazyfuse

            out["backing"] = str(lazyfuse.config.backing_device())
            out["reuse_ir"] = str(lazyfuse.config.reuse_ir())
        return out


def _nothing() -> None:
    pass
