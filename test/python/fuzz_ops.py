"""The fuzzer's ops (fuzz_fusion.py draws graphs from them): pointwise ops
in exact and inexact kinds, ops with Python scalars, views, reductions, and
the numbers and input values drawn near rounding boundaries. Each function
runs the same on the lazy device and in eager, except where it says so."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
import torch.nn.functional as F


def _wide(t: torch.Tensor) -> torch.Tensor:
    """Half and bfloat16 as float32. CPU eager's floor and trunc division of
    those dtypes round intermediates in its vectorised body but not in its
    scalar tail, so no kernel can match it element for element."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _rounding_div(a: torch.Tensor, b: torch.Tensor, mode: str) -> torch.Tensor:
    divisor = _int_divisor(b) if not b.is_floating_point() else _wide(b).abs() + 0.5
    return torch.div(_wide(a), divisor, rounding_mode=mode)


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
    "floor_div": lambda a, b: _rounding_div(a, b, "floor"),
    "trunc_div": lambda a, b: _rounding_div(a, b, "trunc"),
    "and": lambda a, b: a.to(torch.bool) & b.to(torch.bool),
}
SCALARS: list[object] = [2, -3, 0, 1, 0.5, -1.25, 3.0, 0.1, True, False, -0.0]
# Near half and bfloat16 rounding boundaries (0.1 is between two halves;
# 1.1015625 is a bfloat16 1.1 rounds to), and large floats that int64 and
# int32 values meet in float32, not double.
BOUNDARY_SCALARS: list[object] = [
    0.1,
    0.9,
    1.1,
    2.1,
    0.0999755859375,
    1.1015625,
    65504.0,
    65520.0,
    1.7e12,
    16777216.0,
    -2147483648.0,
    2**53 + 1.0,
]
# Input values near those boundaries, mixed into inputs of each dtype.
FLOAT_SPECIALS = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 0.5, -2.5]
HALF_SPECIALS = [0.1, 0.0999755859375, 0.09997558, 0.9, 0.8999, 1.1, 1.1015625, 2.1, 65504.0]
# Integers half cannot hold (2049 is 2048 there), and large ones that meet
# floats in float32 (int64 only).
INT_SPECIALS = [2049, 4097, -2049, 65519, 255, 129]
INT64_SPECIALS = [1_700_000_000_001, 1_699_999_999_999, 16_777_217, -2_147_483_648, 2**53 + 1]
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
    "eq_s": lambda t, s: t == s,
    "le_s": lambda t, s: t <= s,
    "gt_s": lambda t, s: t > s,
    "ne_s": lambda t, s: t != s,
    "floor_div_s": lambda t, s: torch.div(_wide(t), abs(float(s)) + 0.1, rounding_mode="floor"),
    # 2.1 and 0.3 are rounded to a half base's dtype first, as eager does
    "pow_s": lambda t, s: torch.pow(t, [2, 3, 0.5, -1, 2.5, 2.1, 0.3][int(abs(float(s)) * 10) % 7]),
}
REDUCTIONS = ["sum", "mean", "amax", "amin", "var", "sum_f64", "softmax", "log_softmax"]
VIEWS = [
    "t",
    "permute",
    "slice",
    "empty_slice",
    "select",
    "unsqueeze_expand",
    "reshape",
    "flip_dims",
]
# Ops whose result's sign of zero eager leaves to evaluation order (CPU
# eager's vectorised and scalar paths keep different operands of a tie, and
# give gelu of a large negative number +0 and -0: gelu(full((n,), -10.)) is
# -0 for n = 1 and +0 for n >= 3).
SIGN_FREE_OPS = {"maximum", "minimum", "amax", "amin", "softmax", "log_softmax", "gelu"}
WIDE = 1 << 31  # the virtual extent a wide slice starts past


def view(t: torch.Tensor, op: str, salt: int) -> torch.Tensor:
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
    if op == "empty_slice":
        d = salt % t.dim()
        return t.narrow(d, min(salt % 3, t.shape[d]), 0)
    if op == "select":
        d = salt % t.dim()
        return t.select(d, salt % t.shape[d]) if t.shape[d] > 0 else t
    if op == "unsqueeze_expand":
        return t.unsqueeze(0).expand(2, *t.shape)
    if op == "reshape":
        return t.reshape(-1)
    return t.transpose(0, -1)


def view_write(t: torch.Tensor, salt: int) -> torch.Tensor:
    """A copy of t (as a float tensor) written through a view, as `y[...] =`
    writes: functionalization's scatters, which lazyfuse runs in place where
    the run owns the base. The src is computed from the base, or is a view
    of it, or a scalar."""
    y = t.clone() if t.is_floating_point() else t.to(torch.float32)
    if y.dim() == 0 or y.numel() == 0:
        return y.mul_(2)
    d = salt % y.dim()
    kind = salt % 5
    if kind == 0:
        every_other = y[..., ::2]
        every_other.copy_(every_other * 2 + 1)  # slice_scatter of a new src
    elif kind == 1:
        y.select(d, 0).copy_(y.select(d, -1))  # select_scatter of its own view
    elif kind == 2 and y.dim() >= 2:
        y.diagonal(dim1=0, dim2=-1).mul_(-1)  # diagonal_scatter
    else:
        y.narrow(d, y.shape[d] // 2, (y.shape[d] + 1) // 2).fill_(salt - 3.5)
    return y


def index_write(t: torch.Tensor, salt: int) -> torch.Tensor:
    """A copy of t (as a float tensor) written at indices, as index_copy_,
    index_add_, scatter_add_ and `y[idx] =` write: functional ops whose
    steps write in place where the run owns the base. Indices repeat, and
    count from the end where the op allows it."""
    y = t.clone() if t.is_floating_point() else t.to(torch.float32)
    if y.dim() == 0 or y.numel() == 0:
        return y.add_(1)
    d = salt % y.dim()
    n = y.shape[d]
    index = torch.tensor([(salt * 5 + k) % n for k in range(3)], device=y.device)
    kind = salt % 5
    if kind == 0:
        y.index_copy_(d, index[:1], y.index_select(d, index[-1:]) * 3)
    elif kind == 1:
        y.index_add_(d, index, y.index_select(d, index.flip(0)), alpha=0.5)
    elif kind == 2:
        shape = list(y.shape)
        shape[d] = 1
        y.scatter_add_(d, index[:1].reshape([1] * y.dim()).expand(shape), y.narrow(d, 0, 1))
    elif kind == 3:
        y[index - n] = salt - 3.5
    else:
        shape = [1] * y.dim()
        shape[d] = n
        order = (torch.arange(n, device=y.device) + salt).remainder(n).reshape(shape)
        y = y.scatter(d, order.expand(y.shape), y)
    return y


def matmul_transposed(t: torch.Tensor, salt: int) -> torch.Tensor:
    """A product of t (as a float matrix) read the ways autograd reads one:
    transposed only (the graph then computes it transposed), transposed and
    as is, or with a transposed pointwise result for an operand (which stays
    a view BLAS reads). float32 or float64: a 16-bit product's rounding
    depends on the order BLAS sums in."""
    x = t.reshape(-1, t.shape[-1]) if t.dim() and t.shape[-1] else t.reshape(1, -1)
    x = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
    x = x[:48, :48]  # long rows would make the product large
    variant = salt % 4
    if variant == 0:
        return (x.t() @ x).t()
    if variant == 1:
        return ((x * 2).t() @ x).t()
    if variant == 2:
        m = x.t() @ x
        return m.t() + m
    return (x @ (x + 1).t()).t()


def wide_slice(t: torch.Tensor, salt: int) -> torch.Tensor:
    """4096 elements, past 2^31, of (t > 0) and-ed with itself, broadcast to
    [n, n, k] with n * n * k > 2^31 + 4096: never stored by a fused kernel.
    Off the lazy device, the same elements by index arithmetic, so eager
    never stores the 2^31 elements either. Booleans, so that an engine that
    did store them would need 2 GiB, not 8. At most 64 values of t, so
    the product's base, [n, n, 1], stays small."""
    p = (t.reshape(-1) > 0)[:64]
    n = p.numel()
    if n == 0:
        return p
    k = (WIDE + 8192) // (n * n) + 1
    start = WIDE + 5 + salt * 7
    if t.device.type == "lazy":
        product = (p.reshape(n, 1, 1) * p.reshape(1, n, 1)).expand(n, n, k)
        # A copy, not the slice itself: functionalization keeps every view in
        # a live view's chain alive, so the step would store the flat reshape.
        return product.reshape(-1)[start : start + 4096].clone()
    index = torch.arange(start, start + 4096, device=t.device)
    return p[index // (n * k)] * p[index // k % n]


def reduce(t: torch.Tensor, op: str, salt: int, keepdim: bool) -> torch.Tensor:
    if not t.is_floating_point():
        t = t.to(torch.float32)
    if t.dim() == 0:
        return t.sum() if op != "var" else t
    dim = salt % t.dim()
    dims = list(range(t.dim())) if salt >= 6 else [dim]
    if op in ("amax", "amin") and 0 in [t.shape[d] for d in dims]:
        op = "sum"  # eager refuses an empty amax; the graph goes on with a sum
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


def mix(
    value: torch.Tensor, specials: list[float], gen: torch.Generator, dtype: torch.dtype
) -> torch.Tensor:
    """Replaces about 30% of `value`'s elements with picks from `specials`."""
    table = torch.tensor(specials, dtype=dtype)
    picks = torch.randint(0, len(specials), value.shape, generator=gen)
    mask = torch.rand(value.shape, generator=gen) < 0.3
    return torch.where(mask, table[picks], value.to(dtype))
