"""Differential fuzzer for fused kernels: random graphs of fusible work run
on the lazy device and in eager, compared on values, dtypes and shapes.

    python test/python/fuzz_fusion.py --graphs 1000 --seed 7   # a campaign
    python test/python/fuzz_fusion.py --seed 7 --index 123     # one graph, printed

On a CPU backing device the kernels run under CUDA emulation; on a GPU,
natively. Graph `index` of `seed` is always the same graph, so every failure
prints a one-line reproduction.

A graph is a few input tensors and a list of steps. Each step applies one op
to values already in the graph: pointwise ops with Python scalars of every
type and mixed dtypes (type promotion), broadcasts, views, permutes and
slices, reductions with and without keepdim, casts and in-place updates.
Ops that jump at a point (floor, comparisons, floor division, casts to
integers) only read values computed exactly on both sides, so a last-bit
difference in a transcendental cannot flip them.
"""

from __future__ import annotations

import argparse
import random
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

import lazyfuse

FLOATS = [torch.float32, torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.uint8]


@dataclass
class Value:
    name: str
    exact: bool  # computed without rounding that may differ between engines


@dataclass
class Graph:
    seed: int
    index: int
    inputs: list[tuple[str, list[int], torch.dtype]] = field(default_factory=list)
    steps: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (out, op, args)
    outputs: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = [f"# fuzz graph seed={self.seed} index={self.index}"]
        for name, shape, dtype in self.inputs:
            lines.append(f"{name} = input({shape}, {dtype})")
        for out, op, args in self.steps:
            lines.append(f"{out} = {op}({', '.join(args)})")
        lines.append(f"return {', '.join(self.outputs)}")
        return "\n".join(lines)


def _int_divisor(t: torch.Tensor) -> torch.Tensor:
    return t.abs() % 7 + 1 if t.dtype != torch.uint8 else t % 7 + 1


# name -> (arity, exact_only, fn). `exact_only` ops read only exact values;
# a step's result is exact when its op is exact on exact operands (EXACT_OPS).
UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "neg": torch.neg,
    "abs": torch.abs,
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "sin": torch.sin,
    "exp_tanh": lambda t: torch.exp(torch.tanh(t)),
    "sqrt_abs": lambda t: torch.sqrt(t.abs()),
    "log1p_abs": lambda t: torch.log1p(t.abs()),
    # Eager CPU's gelu gives NaN at +inf where CUDA's (and the fused kernels')
    # gives inf; the kernels follow CUDA, so infinities stay out of gelu here.
    "gelu": lambda t: F.gelu(
        torch.nan_to_num(t if t.is_floating_point() else t.float(), posinf=1e4, neginf=-1e4)
    ),
    "silu": lambda t: F.silu(t.float() if not t.is_floating_point() else t),
    "square": lambda t: t * t,
    "pow2": lambda t: torch.pow(t, 2),
    "pow3": lambda t: torch.pow(t, 3.0),
}
EXACT_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sign": torch.sign,
    "floor": lambda t: torch.floor(t) if t.is_floating_point() else t,
    "ceil": lambda t: torch.ceil(t) if t.is_floating_point() else t,
    "not_positive": lambda t: t <= 0,
    "isnan": torch.isnan,
    "to_int32": lambda t: (
        t.to(torch.int32) if not t.is_floating_point() else t.floor().to(torch.int32)
    ),
    "to_bool": lambda t: t.to(torch.bool),
}
BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add,
    "sub": lambda a, b: torch.sub(a, b) if a.dtype != torch.bool else a | b,
    "mul": torch.mul,
    "div": lambda a, b: torch.div(a, b.abs() + 1),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2) if a.dtype != torch.bool else a,
    "where": lambda a, b: torch.where(a > 0, a, b),
    "lerp": lambda a, b: torch.lerp(a.float(), b.float(), 0.25),
}
EXACT_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ge": torch.ge,
    "lt": torch.lt,
    "eq": torch.eq,
    "floor_div": lambda a, b: torch.div(
        a, _int_divisor(b) if not b.is_floating_point() else b.abs() + 0.5, rounding_mode="floor"
    ),
    "trunc_div": lambda a, b: torch.div(
        a, _int_divisor(b) if not b.is_floating_point() else b.abs() + 0.5, rounding_mode="trunc"
    ),
    "and": lambda a, b: a.to(torch.bool) & b.to(torch.bool),
}
SCALARS: list[object] = [2, -3, 0, 1, 0.5, -1.25, 3.0, 0.1, True, False]
SCALAR_OPS: dict[str, Callable[[torch.Tensor, object], torch.Tensor]] = {
    "add_s": lambda t, s: t + s,
    "mul_s": lambda t, s: t * s,
    "sub_s": lambda t, s: t - s if t.dtype != torch.bool and not isinstance(s, bool) else t,
    "rsub_s": lambda t, s: s - t if t.dtype != torch.bool and not isinstance(s, bool) else t,
    "div_s": lambda t, s: t / (abs(float(s)) + 1.0),
    "clamp_s": lambda t, s: torch.clamp(t, min=-abs(float(s)) - 0.5, max=abs(float(s)) + 0.5),
}
EXACT_SCALAR_OPS: dict[str, Callable[[torch.Tensor, object], torch.Tensor]] = {
    "ge_s": lambda t, s: t >= s,
    "lt_s": lambda t, s: t < s,
    "floor_div_s": lambda t, s: torch.div(t, abs(float(s)) + 0.1, rounding_mode="floor"),
    "pow_s": lambda t, s: torch.pow(t, [2, 3, 0.5, -1, 2.5][int(abs(float(s)) * 10) % 5]),
}
REDUCTIONS = ["sum", "mean", "amax", "amin", "var", "sum_f64", "softmax", "log_softmax"]
VIEWS = ["t", "permute", "slice", "select", "unsqueeze_expand", "reshape", "flip_dims"]


class Builder:
    """Draws one graph from (seed, index)."""

    def __init__(self, seed: int, index: int) -> None:
        self.rng = random.Random(seed * 1_000_003 + index)
        self.graph = Graph(seed, index)
        self.values: list[Value] = []
        self.shapes: dict[str, list[int]] = {}

    def fresh(self) -> str:
        return f"v{len(self.graph.inputs) + len(self.graph.steps)}"

    def build(self) -> Graph:
        rng = self.rng
        base = [rng.choice([1, 2, 3, 5, 8, 17, 33]) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.08:
            # Few long rows: reductions over them are split across blocks.
            base = base[:1] + [rng.choice([4100, 6000, 9000])]
        for _ in range(rng.randint(1, 3)):
            shape = [d if rng.random() > 0.2 else 1 for d in base]
            shape = shape[rng.randint(0, len(shape) - 1) :] if rng.random() < 0.3 else shape
            kind = rng.random()
            dtype = rng.choice(FLOATS) if kind < 0.7 else rng.choice(INTS + [torch.bool])
            name = self.fresh()
            self.graph.inputs.append((name, shape, dtype))
            self.values.append(Value(name, exact=True))
        for _ in range(rng.randint(2, 7)):
            self.step()
        outs = {self.values[-1].name}
        if rng.random() < 0.5:
            outs.add(rng.choice(self.values).name)
        self.graph.outputs = sorted(outs)
        return self.graph

    def pick(self, exact: bool) -> Value | None:
        pool = [v for v in self.values if v.exact] if exact else self.values
        return self.rng.choice(pool) if pool else None

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        out = self.fresh()
        if roll < 0.22:
            op = rng.choice(list(UNARY))
            a = self.pick(False)
            self.add(out, op, [a.name], exact=False)
        elif roll < 0.32:
            op = rng.choice(list(EXACT_UNARY))
            a = self.pick(True)
            self.add(out, op, [a.name], exact=True)
        elif roll < 0.5:
            op = rng.choice(list(BINARY))
            a, b = self.pick(False), self.pick(False)
            exact = a.exact and b.exact and op in {"maximum", "minimum", "where", "add", "sub"}
            self.add(out, op, [a.name, b.name], exact=exact and self.integral(a, b))
        elif roll < 0.58:
            op = rng.choice(list(EXACT_BINARY))
            a, b = self.pick(True), self.pick(True)
            self.add(out, op, [a.name, b.name], exact=True)
        elif roll < 0.7:
            op = rng.choice(list(SCALAR_OPS))
            a = self.pick(False)
            self.add(out, op, [a.name, repr(rng.choice(SCALARS))], exact=False)
        elif roll < 0.76:
            op = rng.choice(list(EXACT_SCALAR_OPS))
            a = self.pick(True)
            self.add(out, op, [a.name, repr(rng.choice(SCALARS))], exact=True)
        elif roll < 0.84:
            a = self.pick(False)
            self.add(out, rng.choice(VIEWS), [a.name, str(rng.randint(0, 7))], exact=a.exact)
        elif roll < 0.92:
            a = self.pick(False)
            op = rng.choice(REDUCTIONS)
            self.add(out, op, [a.name, str(rng.randint(0, 7)), str(rng.random() < 0.5)], False)
            if rng.random() < 0.4:
                # A view right after a reduction may join its epilogue, which
                # runs at the row's index: permutes there once read other rows.
                self.add(self.fresh(), rng.choice(VIEWS), [out, str(rng.randint(0, 7))], False)
        elif roll < 0.96:
            a = self.pick(False)
            dtype = rng.choice(FLOATS)
            self.add(out, "cast", [a.name, str(dtype)], exact=False)
        else:
            a, b = self.pick(False), self.pick(False)
            self.add(out, "inplace_add", [a.name, b.name], exact=False)

    def integral(self, a: Value, b: Value) -> bool:
        return all(self.is_integral(v.name) for v in (a, b))

    def is_integral(self, name: str) -> bool:
        for n, _, dtype in self.graph.inputs:
            if n == name:
                return not dtype.is_floating_point
        return False

    def add(self, out: str, op: str, args: list[str], exact: bool) -> None:
        self.graph.steps.append((out, op, args))
        self.values.append(Value(out, exact))


def _view(t: torch.Tensor, op: str, salt: int) -> torch.Tensor:
    if t.dim() == 0:
        return t.reshape(1) if op == "reshape" else t
    if op == "t":
        return t.t() if t.dim() <= 2 else t.transpose(0, t.dim() - 1)
    if op == "permute":
        dims = list(range(t.dim()))
        random.Random(salt).shuffle(dims)
        return t.permute(dims)
    if op == "slice":
        d = salt % t.dim()
        return t.narrow(d, 0, max(1, t.shape[d] // 2)) if salt % 2 else t[..., :: 1 + salt % 2]
    if op == "select":
        d = salt % t.dim()
        return t.select(d, salt % t.shape[d]) if t.shape[d] > 0 else t
    if op == "unsqueeze_expand":
        return t.unsqueeze(0).expand(2, *t.shape)
    if op == "reshape":
        return t.reshape(-1)
    return t.transpose(0, -1)


def _reduce(t: torch.Tensor, op: str, salt: int, keepdim: bool) -> torch.Tensor:
    if not t.is_floating_point():
        t = t.to(torch.float32)
    if t.dim() == 0:
        return t.sum() if op != "var" else t
    dim = salt % t.dim()
    dims = list(range(t.dim())) if salt >= 6 else [dim]
    if op == "sum":
        return t.sum(dims, keepdim=keepdim)
    if op == "mean":
        return t.mean(dims, keepdim=keepdim)
    if op == "amax":
        return t.amax(dims, keepdim=keepdim)
    if op == "amin":
        return t.amin(dims, keepdim=keepdim)
    if op == "var":
        return t.var(dims, keepdim=keepdim) if t.numel() > 1 else t
    if op == "sum_f64":
        return t.sum(dims, keepdim=keepdim, dtype=torch.float64)
    if op == "softmax":
        return torch.softmax(t, -1)
    return torch.log_softmax(t, -1)


def run_graph(
    graph: Graph, device: torch.device, dtypes: dict[str, torch.dtype] | None = None
) -> list[torch.Tensor]:
    """Runs `graph` eagerly on `device`; `dtypes`, when given, receives every
    value's dtype."""
    gen = torch.Generator().manual_seed(graph.seed * 7919 + graph.index)
    env: dict[str, torch.Tensor] = {}
    for name, shape, dtype in graph.inputs:
        if dtype == torch.bool:
            value = torch.rand(shape, generator=gen) > 0.5
        elif dtype.is_floating_point:
            value = torch.randn(shape, generator=gen) * 2
            if value.numel() and torch.rand((), generator=gen) < 0.25:
                # IEEE corner cases: NaN, infinities, signed zero, halves.
                specials = torch.tensor(
                    [float("nan"), float("inf"), -float("inf"), -0.0, 0.5, -2.5]
                )
                picks = torch.randint(0, len(specials), value.shape, generator=gen)
                mask = torch.rand(value.shape, generator=gen) < 0.3
                value = torch.where(mask, specials[picks], value)
            value = value.to(dtype)
        else:
            low = 0 if dtype == torch.uint8 else -20
            value = torch.randint(low, 20, shape, generator=gen).to(dtype)
        env[name] = value.to(device)
    for out, op, args in graph.steps:
        a = env[args[0]]
        if op in UNARY:
            env[out] = UNARY[op](a)
        elif op in EXACT_UNARY:
            env[out] = EXACT_UNARY[op](a)
        elif op in BINARY:
            env[out] = BINARY[op](a, env[args[1]])
        elif op in EXACT_BINARY:
            env[out] = EXACT_BINARY[op](a, env[args[1]])
        elif op in SCALAR_OPS:
            env[out] = SCALAR_OPS[op](a, eval(args[1]))  # noqa: S307 (repr of a literal)
        elif op in EXACT_SCALAR_OPS:
            env[out] = EXACT_SCALAR_OPS[op](a, eval(args[1]))  # noqa: S307
        elif op in VIEWS:
            env[out] = _view(a, op, int(args[1]))
        elif op in REDUCTIONS:
            env[out] = _reduce(a, op, int(args[1]), args[2] == "True")
        elif op == "cast":
            env[out] = a.to(getattr(torch, args[1].split(".")[1]))
        elif op == "inplace_add":
            b = env[args[1]]
            y = a.clone() if a.is_floating_point() else a.to(torch.float32)
            try:
                y.add_(b)
            except RuntimeError:
                y.mul_(2)
            env[out] = y
        else:
            raise ValueError(f"unknown fuzz op {op}")
    if dtypes is not None:
        dtypes.update({name: value.dtype for name, value in env.items()})
    return [env[name] for name in graph.outputs]


HALF_TYPES = (torch.float16, torch.bfloat16)


def rounds_through_half(graph: Graph, name: str, dtypes: dict[str, torch.dtype]) -> bool:
    """Whether a computed half or bfloat16 value feeds `name`. Its rounding may
    land an ulp apart between engines (two correct orders of float ops), and
    that ulp is 2^-8 of the value, whatever the output's own dtype."""
    producers = {out: args for out, _, args in graph.steps}
    pending, seen = [name], set()
    while pending:
        value = pending.pop()
        if value in seen or value not in producers:
            continue
        seen.add(value)
        if dtypes.get(value) in HALF_TYPES:
            return True
        pending.extend(a for a in producers[value] if a in dtypes)
    return False


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    if dtype in HALF_TYPES:
        return {"atol": 2e-2, "rtol": 2e-2}
    if dtype == torch.float64:
        # float64 results often carry float32 transcendentals, which differ by
        # an ulp between libm and SLEEF; exact float64 accumulation is checked
        # by test_cuda_fusion.py's SEMANTICS cases.
        return {"atol": 1e-6, "rtol": 1e-6}
    return {"atol": 1e-4, "rtol": 1e-4}


def _run_lazy(graph: Graph) -> list[torch.Tensor]:
    # The lazy tensors die with this frame, so a failed step leaves nothing
    # pending for the next graph.
    outputs = run_graph(graph, lazyfuse.lazy_device())
    lazyfuse.mark_step()
    return [t.cpu() for t in outputs]


def check_graph(seed: int, index: int) -> str | None:
    """Runs graph `index` of `seed` both ways; the mismatch, or None."""
    graph = Builder(seed, index).build()
    dtypes: dict[str, torch.dtype] = {}
    try:
        expected = run_graph(graph, lazyfuse.config.backing_device(), dtypes)
    except (RuntimeError, ValueError, IndexError):
        return None  # eager rejects it too: not a graph to compare
    try:
        got = [t.cpu() for t in _run_lazy(graph)]
    except Exception as error:  # noqa: BLE001
        return f"lazy raised where eager did not: {type(error).__name__}: {str(error)[:300]}"
    for name, g, e in zip(graph.outputs, got, expected, strict=True):
        e = e.cpu()
        if g.dtype != e.dtype or g.shape != e.shape:
            return f"{name}: got {g.dtype}{list(g.shape)}, eager {e.dtype}{list(e.shape)}"
        try:
            half = rounds_through_half(graph, name, dtypes)
            tol = tolerance(torch.bfloat16 if half else e.dtype)
            torch.testing.assert_close(g, e, equal_nan=True, **tol)
        except AssertionError as error:
            return f"{name}: {str(error).splitlines()[0:4]}"
    return None


def reproduction(seed: int, index: int) -> str:
    return f"python test/python/fuzz_fusion.py --seed {seed} --index {index}"


def campaign(seed: int, graphs: int, start: int = 0) -> list[tuple[int, str]]:
    """Checks graphs start..start+graphs-1; returns (index, mismatch) pairs."""
    failures = []
    for index in range(start, start + graphs):
        problem = check_graph(seed, index)
        if problem is not None:
            failures.append((index, problem))
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graphs", type=int, default=300)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--index", type=int, help="check and print this one graph")
    options = parser.parse_args()
    if lazyfuse.config.backing_device().type != "cuda":
        lazyfuse.config.set_kernel_settings(
            lazyfuse.config.KernelSettings(
                emulate_cuda=True, emulated_block=32, emulated_grid=3, strict=True
            )
        )
    if options.index is not None:
        print(Builder(options.seed, options.index).build().text())
        try:
            problem = check_graph(options.seed, options.index)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            return 1
        print("ok" if problem is None else f"MISMATCH: {problem}")
        return 0 if problem is None else 1
    failures = campaign(options.seed, options.graphs, options.start)
    for index, problem in failures:
        print(f"{reproduction(options.seed, index)}  # {problem}")
    print(f"fuzz: {options.graphs} graphs, {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
