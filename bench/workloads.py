"""The workloads, as cases a worker process runs under one engine.

A case's measure() returns samples per metric; the coordinator pools them
over interleaved rounds. Timings are host wall-clock (time.perf_counter_ns).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bench.engines import Engine, NotApplicable
from bench.models import MODELS, cycle

Samples = dict[str, list[float]]


@dataclass(frozen=True)
class CaseSpec:
    name: str
    workload: str  # tracing | markstep | compile | training
    title: str
    metric: str  # the headline metric
    unit: str
    lower_is_better: bool = True
    fresh_process: bool = False  # one sample per process (first-step costs)
    param: str = ""


def pointwise_chain(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, ops: int) -> torch.Tensor:
    """`ops` small pointwise ops: tensor-tensor, tensor-number and unary."""
    for _ in range(ops // 4):
        x = x * a
        x = x + b
        x = torch.tanh(x)
        x = x * 0.5
    return x


def now_us() -> float:
    return time.perf_counter_ns() / 1e3


class Case:
    def warmup(self) -> None:
        self.measure()

    def measure(self) -> Samples:
        raise NotImplementedError


class Tracing(Case):
    """(a) Recording 1000 pointwise ops on 16-element tensors, no mark_step."""

    OPS = 1000

    def __init__(self, engine: Engine) -> None:
        if engine.kind == "compile":
            raise NotApplicable(
                "torch.compile traces a function once, not each op; see mark_step (b)"
            )
        if engine.replays:
            raise NotApplicable("a replayed step traces as lazyfuse-cpu does")
        self.engine = engine
        g = torch.Generator().manual_seed(0)
        self.x, self.a, self.b = (torch.randn(16, generator=g).to(engine.device) for _ in range(3))
        engine.mark_step()

    def measure(self) -> Samples:
        samples = []
        for _ in range(3):
            start = now_us()
            y = pointwise_chain(self.x, self.a, self.b, self.OPS)
            samples.append((now_us() - start) / self.OPS)
            self.engine.mark_step()
            del y
        self.engine.wait()
        return {"us_per_op": samples}


class CachedMarkStep(Case):
    """(b) The same N-node graph again and again: host time of one mark_step.

    Eager engines run the same N ops (what the graph computes); torch.compile
    calls the compiled N-op function (guards, then its kernels); a replaying
    engine calls the replayed function (guards, binding, its ATen calls or
    kernels, writing back), which traces nothing."""

    def __init__(self, engine: Engine, nodes: int) -> None:
        self.engine = engine
        self.nodes = nodes
        g = torch.Generator().manual_seed(0)
        self.x, self.a, self.b = (torch.randn(16, generator=g).to(engine.device) for _ in range(3))
        self.fn: Callable[..., torch.Tensor] = engine.replay(
            engine.compile(lambda x, a, b: pointwise_chain(x, a, b, nodes))
        )
        self.inner = max(5, 2000 // nodes)
        engine.mark_step()

    def measure(self) -> Samples:
        out: Samples = {"us_per_step": [], "us_per_node": []}
        lazyfuse = self.engine.kind == "lazyfuse"
        if lazyfuse:
            import lazyfuse as lf

            out["execute_us"], out["overhead_us"] = [], []
        for _ in range(self.inner):
            if self.engine.replays:
                before = lf.metrics.phase_seconds()["execute"]
                start = now_us()
                y = self.fn(self.x, self.a, self.b)
                took = now_us() - start
                execute = (lf.metrics.phase_seconds()["execute"] - before) * 1e6
                out["execute_us"].append(execute)
                out["overhead_us"].append(took - execute)
            elif self.engine.is_lazy:
                y = self.fn(self.x, self.a, self.b)  # tracing, not timed
                before = lf.metrics.phase_seconds()["execute"] if lazyfuse else 0.0
                start = now_us()
                self.engine.mark_step()
                took = now_us() - start
                if lazyfuse:
                    execute = (lf.metrics.phase_seconds()["execute"] - before) * 1e6
                    out["execute_us"].append(execute)
                    out["overhead_us"].append(took - execute)
            else:
                start = now_us()
                y = self.fn(self.x, self.a, self.b)
                took = now_us() - start
            out["us_per_step"].append(took)
            out["us_per_node"].append(took / self.nodes)
            del y
        self.engine.wait()
        return out


class Training(Case):
    """(d) Training steps: forward, loss, backward, optimizer step, mark_step."""

    def __init__(self, engine: Engine, model: str) -> None:
        setup = MODELS[model]
        self.engine = engine
        torch.manual_seed(0)
        net = setup.make_model().to(engine.device)
        self.model = net
        self.forward = engine.compile(net)
        self.optimizer = setup.make_optimizer(list(net.parameters()))
        if engine.replays and isinstance(self.optimizer, torch.optim.Adam):
            # The default Adam hands the graph new Python numbers each step
            # (bias corrections), which a replay must not freeze.
            lr = torch.tensor(self.optimizer.defaults["lr"], device=engine.device)
            self.optimizer = torch.optim.Adam(list(net.parameters()), lr=lr, capturable=True)
        self.batches = cycle(setup.batches())
        self.steps = 10 if model != "transformer" else 5
        self.replayed = engine.replay(self.train_step) if engine.replays else None

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.forward(x.to(self.engine.device)), y.to(self.engine.device))
        loss.backward()
        self.optimizer.step()
        return loss

    def step(self, mark_step: bool = True) -> torch.Tensor:
        x, y = next(self.batches)
        if self.replayed is not None and mark_step:
            return self.replayed(x, y)
        loss = self.train_step(x, y)
        if mark_step:
            self.engine.mark_step()
        return loss

    def warmup(self) -> None:
        for _ in range(3):
            self.step()
        self.engine.wait()

    def measure(self) -> Samples:
        start = now_us()
        for _ in range(self.steps):
            self.step()
        self.engine.wait()
        per_step = (now_us() - start) / self.steps
        return {"ms_per_step": [per_step / 1e3], "steps_per_s": [1e6 / per_step]}


class FirstStep(Case):
    """(c) The first training step of a fresh process, split into its parts.

    lazyfuse reports tracing, lowering (IR to Program), execution and the
    rest (graph hashing, LTC bookkeeping). Planning and NVRTC run only on a
    CUDA backing device; on the CPU they are measured as a dry run of the
    same graph for sm_90 (lazyfuse.debug.compile_cuda), outside the step."""

    def __init__(self, engine: Engine, model: str) -> None:
        if engine.replays:
            raise NotApplicable("a replayed step's first call is lazyfuse-cpu's first step")
        self.training = Training(engine, model)
        self.engine = engine

    def warmup(self) -> None:
        pass  # the first step is the measurement

    def measure(self) -> Samples:
        engine = self.engine
        lazyfuse = engine.kind == "lazyfuse"
        if lazyfuse:
            import lazyfuse as lf

            lf.metrics.reset()
        start = now_us()
        if not engine.is_lazy:
            self.training.step()
            engine.wait()
            return {"first_step_ms": [(now_us() - start) / 1e3]}
        # Trace the step without its mark_step, to time the two apart.
        loss = self.training.step(mark_step=False)
        traced = now_us()
        out: Samples = {}
        if lazyfuse and str(lf.config.backing_device()) == "cpu":
            out.update(self.dry_run_cuda(loss))
            lf.metrics.reset()
        synced = now_us()
        engine.mark_step()
        engine.wait()
        end = now_us()
        out["first_step_ms"] = [(traced - start + end - synced) / 1e3]
        out["trace_ms"] = [(traced - start) / 1e3]
        if lazyfuse:
            phases = {k: v * 1e3 for k, v in lf.metrics.phase_seconds().items()}
            for phase, ms in phases.items():
                out[f"{phase}_ms"] = [ms]
            rest = out["first_step_ms"][0] - out["trace_ms"][0] - sum(phases.values())
            out["other_ms"] = [rest]
        return out

    def dry_run_cuda(self, loss: torch.Tensor) -> Samples:
        import lazyfuse as lf

        tensors = [loss, *self.training.model.parameters()]
        for state in self.training.optimizer.state.values():
            # Adam keeps its step count on the CPU.
            tensors += [
                v for v in state.values() if isinstance(v, torch.Tensor) and v.device.type == "lazy"
            ]
        lf.metrics.reset()
        if lf.debug.nvrtc_info().get("found"):
            kernels = lf.debug.compile_cuda(tensors, arch="sm_90")
            phases = lf.metrics.phase_seconds()
            return {
                "planning_sm90_ms": [phases["planning"] * 1e3],
                "nvrtc_sm90_ms": [phases["nvrtc"] * 1e3],
                "kernels_sm90": [float(len(kernels))],
            }
        lf.debug.fusion_plan(loss)
        return {"planning_sm90_ms": [lf.metrics.phase_seconds()["planning"] * 1e3]}


CASES: list[CaseSpec] = [
    CaseSpec(
        "tracing",
        "tracing",
        "(a) Tracing: 1000 pointwise ops on 16-element tensors",
        "us_per_op",
        "µs/op",
    ),
    *[
        CaseSpec(
            f"markstep-{n}",
            "markstep",
            "(b) Cache-hit mark_step: one graph of N pointwise nodes, run again and again",
            "us_per_step",
            "µs/step",
            param=str(n),
        )
        for n in (10, 100, 1000)
    ],
    *[
        CaseSpec(
            f"first-step-{model}",
            "compile",
            "(c) Compile cost: the first training step of a fresh process",
            "first_step_ms",
            "ms",
            fresh_process=True,
            param=model,
        )
        for model in ("mlp", "transformer")
    ],
    *[
        CaseSpec(
            f"train-{model}",
            "training",
            "(d) Training steps per second",
            "steps_per_s",
            "steps/s",
            lower_is_better=False,
            param=model,
        )
        for model in MODELS
    ],
]


def case_spec(name: str) -> CaseSpec:
    for spec in CASES:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown case {name!r}; known: {', '.join(c.name for c in CASES)}")


def make_case(spec: CaseSpec, engine: Engine) -> Case:
    if spec.workload == "tracing":
        return Tracing(engine)
    if spec.workload == "markstep":
        return CachedMarkStep(engine, int(spec.param))
    if spec.workload == "training":
        return Training(engine, spec.param)
    if spec.workload == "compile":
        return FirstStep(engine, spec.param)
    raise KeyError(spec.workload)
