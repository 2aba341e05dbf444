"""Differential fuzzer for fused kernels: random graphs of fusible work run
on the lazy device and in eager, compared on values, dtypes and shapes.

    python test/python/fuzz_campaign.py --graphs 2000 --seed 7   # a campaign
    python test/python/fuzz_fusion.py --seed 7 --index 123       # one graph, printed

On a CPU backing device the kernels run under CUDA emulation; on a GPU,
natively. Graph `index` of `seed` is always the same graph, so every failure
prints a one-line reproduction.

A graph is a few input tensors and a list of steps. Each step applies one op
to values already in the graph: pointwise ops with Python scalars of every
type and mixed dtypes (type promotion), broadcasts, views, permutes and
slices, reductions with and without keepdim, casts, in-place updates, writes
into views, and matrix products read transposed (fusion/transposed_matmuls.h).
Ops that jump at a point (floor, comparisons, floor division, casts to
integers) only read values computed exactly on both sides, so a last-bit
difference in a transcendental cannot flip them.

Corners drawn on purpose: zero-size dims and empty slices, under every op
kind and under reductions; slices of broadcast values whose virtual extent
passes 2^31 elements (never stored, so indices must be 64-bit); half and
bfloat16 values against Python numbers near their rounding boundaries;
int64 against large floats; and signed zeros, whose sign is compared.
"""

from __future__ import annotations

import argparse
import random
import sys
import traceback
import warnings
from dataclasses import dataclass, field

import torch

import lazyfuse
from fuzz_ops import (
    BINARY,
    BOUNDARY_SCALARS,
    EXACT_BINARY,
    EXACT_SCALAR_OPS,
    EXACT_UNARY,
    FLOAT_SPECIALS,
    HALF_SPECIALS,
    INT64_SPECIALS,
    INT_SPECIALS,
    REDUCTIONS,
    SCALAR_OPS,
    SCALARS,
    SIGN_FREE_OPS,
    UNARY,
    VIEWS,
    index_write,
    matmul_transposed,
    mix,
    reduce,
    view,
    view_write,
    wide_slice,
)

FLOATS = [torch.float32, torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.uint8]
HALF_TYPES = (torch.float16, torch.bfloat16)


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


def resized(size: int, resize: int) -> int:
    """A dim of graph `resize` shapes on: 0 and 1 stay (broadcasts and empty
    tensors keep their structure), every other size grows."""
    return size if size < 2 else size + resize * (1 + size // 4)


class Builder:
    """Draws one graph from (seed, index); `resize` > 0 draws the same graph
    at another shape (the draws never depend on sizes)."""

    def __init__(self, seed: int, index: int, resize: int = 0) -> None:
        self.rng = random.Random(seed * 1_000_003 + index)
        self.resize = resize
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
        elif rng.random() < 0.15:
            base[rng.randrange(len(base))] = 0  # empty tensors through every op kind
        base = [resized(d, self.resize) for d in base]
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
            self.add(out, op, [a.name, repr(self.scalar())], exact=False)
        elif roll < 0.76:
            op = rng.choice(list(EXACT_SCALAR_OPS))
            a = self.pick(True)
            self.add(out, op, [a.name, repr(self.scalar())], exact=True)
        elif roll < 0.775:
            a = self.pick(False)
            self.add(out, "wide_slice", [a.name, str(rng.randint(0, 7))], exact=True)
        elif roll < 0.84:
            a = self.pick(False)
            self.add(out, rng.choice(VIEWS), [a.name, str(rng.randint(0, 7))], exact=a.exact)
        elif roll < 0.92:
            a = self.pick(False)
            op = rng.choice(REDUCTIONS)
            self.add(out, op, [a.name, str(rng.randint(0, 7)), str(rng.random() < 0.5)], False)
            after = rng.random()
            if after < 0.3:
                # A view right after a reduction may join its epilogue, which
                # runs at the row's index: permutes there once read other rows.
                self.add(self.fresh(), rng.choice(VIEWS), [out, str(rng.randint(0, 7))], False)
            elif after < 0.6:
                # The result meets other pointwise work: groups merge into
                # the reduction's epilogue (empty reductions once took its
                # domain).
                b = self.pick(False)
                self.add(self.fresh(), rng.choice(["add", "mul", "where"]), [out, b.name], False)
        elif roll < 0.95:
            a = self.pick(False)
            dtype = rng.choice(FLOATS)
            self.add(out, "cast", [a.name, str(dtype)], exact=False)
        elif roll < 0.97:
            a = self.pick(False)
            self.add(out, "matmul_transposed", [a.name, str(rng.randint(0, 7))], exact=False)
        elif roll < 0.985:
            a, b = self.pick(False), self.pick(False)
            self.add(out, "inplace_add", [a.name, b.name], exact=False)
        elif roll < 0.99:
            a = self.pick(False)
            self.add(out, "view_write", [a.name, str(rng.randint(0, 7))], exact=False)
        else:
            a = self.pick(False)
            self.add(out, "index_write", [a.name, str(rng.randint(0, 9))], exact=False)

    def scalar(self) -> object:
        return self.rng.choice(BOUNDARY_SCALARS if self.rng.random() < 0.35 else SCALARS)

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


def run_graph(
    graph: Graph,
    device: torch.device,
    dtypes: dict[str, torch.dtype] | None = None,
    largest: dict[str, float] | None = None,
) -> list[torch.Tensor]:
    """Runs `graph` eagerly on `device`; `dtypes` and `largest`, when given,
    receive every value's dtype and largest finite magnitude."""
    return evaluate(graph, graph_inputs(graph, device), dtypes, largest)


def graph_inputs(graph: Graph, device: torch.device, draw: int = 0) -> dict[str, torch.Tensor]:
    """The inputs of `graph`; `draw` picks another set of values."""
    gen = torch.Generator().manual_seed(graph.seed * 7919 + graph.index + draw * 104729)
    env: dict[str, torch.Tensor] = {}
    for name, shape, dtype in graph.inputs:
        if dtype == torch.bool:
            value = torch.rand(shape, generator=gen) > 0.5
        elif dtype.is_floating_point:
            value = torch.randn(shape, generator=gen) * 2
            if value.numel() and torch.rand((), generator=gen) < 0.5:
                # IEEE corner cases (NaN, infinities, signed zeros, halves),
                # and values next to half and bfloat16 rounding boundaries.
                near = HALF_SPECIALS if dtype in HALF_TYPES else []
                value = mix(value, FLOAT_SPECIALS + near, gen, torch.float64)
            value = value.to(dtype)
        else:
            low = 0 if dtype == torch.uint8 else -20
            value = torch.randint(low, 20, shape, generator=gen)
            if dtype != torch.bool and value.numel() and torch.rand((), generator=gen) < 0.5:
                large = INT64_SPECIALS if dtype == torch.int64 else []
                value = mix(value, INT_SPECIALS + large, gen, torch.int64)
            value = value.to(dtype)
        env[name] = value.to(device)
    return env


def evaluate(
    graph: Graph,
    inputs: dict[str, torch.Tensor],
    dtypes: dict[str, torch.dtype] | None = None,
    largest: dict[str, float] | None = None,
) -> list[torch.Tensor]:
    """The outputs of `graph` on `inputs`."""
    env = dict(inputs)
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
            env[out] = view(a, op, int(args[1]))
        elif op == "wide_slice":
            env[out] = wide_slice(a, int(args[1]))
        elif op in REDUCTIONS:
            env[out] = reduce(a, op, int(args[1]), args[2] == "True")
        elif op == "matmul_transposed":
            env[out] = matmul_transposed(a, int(args[1]))
        elif op == "cast":
            env[out] = a.to(getattr(torch, args[1].split(".")[1]))
        elif op == "view_write":
            env[out] = view_write(a, int(args[1]))
        elif op == "index_write":
            env[out] = index_write(a, int(args[1]))
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
    if largest is not None:
        largest.update({name: _largest_finite(value) for name, value in env.items()})
    return [env[name] for name in graph.outputs]


def _largest_finite(value: torch.Tensor) -> float:
    if value.dtype == torch.bool:  # abs has no bool kernel
        value = value.to(torch.uint8)
    finite = value[value.isfinite()] if value.is_floating_point() else value
    return float(finite.abs().max()) if finite.numel() else 0.0


def _feeding(graph: Graph, name: str, dtypes: dict[str, torch.dtype]) -> list[tuple[str, str]]:
    """(value, op) of every computed value that feeds `name`, itself included."""
    producers = {out: (op, args) for out, op, args in graph.steps}
    pending, seen, found = [name], set(), []
    while pending:
        value = pending.pop()
        if value in seen or value not in producers:
            continue
        seen.add(value)
        op, args = producers[value]
        found.append((value, op))
        pending.extend(a for a in args if a in dtypes)
    return found


def rounds_through_half(graph: Graph, name: str, dtypes: dict[str, torch.dtype]) -> bool:
    """Whether a computed half or bfloat16 value feeds `name`. Its rounding may
    land an ulp apart between engines (two correct orders of float ops), and
    that ulp is 2^-8 of the value, whatever the output's own dtype."""
    return any(dtypes.get(value) in HALF_TYPES for value, _ in _feeding(graph, name, dtypes))


def sin_of_large_rounded(
    graph: Graph, name: str, dtypes: dict[str, torch.dtype], largest: dict[str, float]
) -> bool:
    """Whether a `sin` feeding `name` reads a computed float value so large
    that one ulp of it moves sin past the tolerance. Two correct orders of a
    float sum may land an ulp apart, and sin passes that ulp on whole: at
    4e17 a float64 ulp is 64, and sin of the two sums has nothing in common
    (fuzz seed 24, graph 238: a float64 sum of int64 extremes)."""
    producers = {out: args for out, _, args in graph.steps}
    atol = tolerance(dtypes[name])["atol"]
    for value, op in _feeding(graph, name, dtypes):
        arg = producers[value][0]
        if op != "sin" or arg not in producers or not dtypes[arg].is_floating_point:
            continue
        if largest[arg] * torch.finfo(dtypes[arg]).eps > atol:
            return True
    return False


def overflow_varies_in_eager(graph: Graph, name: str, dtypes: dict[str, torch.dtype]) -> bool:
    """Whether a half or bfloat16 `add(a, b, alpha=2)` feeds `name`. Eager CPU
    computes `alpha * b` in float in its vector body but rounds it to the
    16-bit type in its scalar tail, so when it overflows, `-inf + 2 * 65504` is
    -inf or NaN by position (lazyfuse rounds it everywhere: NaN)."""
    return any(
        op == "add_alpha" and dtypes.get(value) in HALF_TYPES
        for value, op in _feeding(graph, name, dtypes)
    )


def zero_signs_differ(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether an element that is zero on both sides has another sign."""
    if not expected.is_floating_point():
        return False
    zeros = (got == 0) & (expected == 0)
    return not torch.equal(torch.signbit(got[zeros]), torch.signbit(expected[zeros]))


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


# Every third graph runs again at RESHAPES new shapes: the second builds
# shape-generic kernels, the third launches them without a compile.
RESHAPES = 2


def check_graph(seed: int, index: int) -> str | None:
    """Runs graph `index` of `seed` both ways, every third one at new shapes
    too; the first mismatch, or None."""
    for resize in range(RESHAPES + 1 if index % 3 == 0 else 1):
        problem = check_graph_at(seed, index, resize)
        if problem is not None:
            return problem if resize == 0 else f"at new shape {resize}: {problem}"
    return None


def check_graph_at(seed: int, index: int, resize: int) -> str | None:
    graph = Builder(seed, index, resize).build()
    dtypes: dict[str, torch.dtype] = {}
    largest: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # var of one element, and the like
        try:
            expected = run_graph(graph, lazyfuse.config.backing_device(), dtypes, largest)
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
        if sin_of_large_rounded(graph, name, dtypes, largest):
            continue  # ill-conditioned: any two correct sums may disagree
        if overflow_varies_in_eager(graph, name, dtypes):
            either = (g.isnan() & e.isinf()) | (g.isinf() & e.isnan())
            g, e = g.masked_fill(either, float("nan")), e.masked_fill(either, float("nan"))
        try:
            half = rounds_through_half(graph, name, dtypes)
            tol = tolerance(torch.bfloat16 if half else e.dtype)
            torch.testing.assert_close(g, e, equal_nan=True, **tol)
        except AssertionError as error:
            return f"{name}: {str(error).splitlines()[0:4]}"
        sign_free = any(op in SIGN_FREE_OPS for _, op in _feeding(graph, name, dtypes))
        if not sign_free and zero_signs_differ(g, e):
            return f"{name}: a zero has another sign than eager's"
    return None


def reproduction(seed: int, index: int, target: str | None = None) -> str:
    option = f" --target {target}" if target else ""
    return f"python test/python/fuzz_fusion.py --seed {seed} --index {index}{option}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graphs", type=int, default=300)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--index", type=int, help="check and print this one graph")
    parser.add_argument(
        "--target",
        choices=["emulated", "cpu", "aten"],
        default="emulated",
        help="on the CPU backing device: emulated CUDA kernels, native CPU kernels, or ATen"
        " steps only",
    )
    options = parser.parse_args()
    if lazyfuse.config.backing_device().type != "cuda":
        lazyfuse.config.set_kernel_settings(
            lazyfuse.config.KernelSettings(
                emulate_cuda=options.target == "emulated",
                emulated_block=32,
                emulated_grid=3,
                strict=True,
                cpu_kernels=options.target == "cpu",
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
    # Worker mode for fuzz_campaign.py: one line before and after each graph,
    # so a crash or a hang names its graph.
    for index in range(options.start, options.start + options.graphs):
        print(f"begin {index}", flush=True)
        problem = check_graph(options.seed, index)
        print(f"done {index} {problem or 'ok'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
