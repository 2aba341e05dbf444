"""Arguments eager refuses are refused by the lazy op itself, at the call, in
a message that names the op: never silently computed (a layer_norm weight of
the wrong shape, an int32 clamped at 2**40), and never left for the graph's
run, where the error would surface at a later read and every read after it."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map

import lazyfuse

DEV = lazyfuse.lazy_device()
BIG = 2**40


def _lazy(value: object) -> object:
    return value.to(DEV) if isinstance(value, torch.Tensor) else value


def _x() -> torch.Tensor:
    return torch.randn(2, 3, 8, 8)


def _ints() -> torch.Tensor:
    return torch.tensor([1, 2, 3], dtype=torch.int32)


# (op the message names, the call, its inputs): eager raises on each.
REFUSED: dict[str, tuple[str, Callable[..., object], Callable[[], tuple]]] = {
    "conv2d, wrong input channels": (
        "aten::convolution",
        lambda x, w: F.conv2d(x, w),
        lambda: (_x(), torch.randn(4, 5, 3, 3)),
    ),
    "conv2d, kernel larger than the input": (
        "aten::convolution",
        lambda x, w: F.conv2d(x, w),
        lambda: (_x(), torch.randn(4, 3, 9, 9)),
    ),
    "conv2d, groups not dividing the channels": (
        "aten::convolution",
        lambda x, w: F.conv2d(x, w, groups=2),
        lambda: (_x(), torch.randn(4, 3, 3, 3)),
    ),
    "conv2d, bias of the wrong size": (
        "aten::convolution",
        lambda x, w, b: F.conv2d(x, w, b),
        lambda: (_x(), torch.randn(4, 3, 3, 3), torch.randn(5)),
    ),
    "conv_transpose2d, wrong input channels": (
        "aten::convolution",
        lambda x, w: F.conv_transpose2d(x, w),
        lambda: (_x(), torch.randn(5, 4, 3, 3)),
    ),
    "conv_transpose2d, output_padding too large": (
        "aten::convolution",
        lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=2),
        lambda: (_x(), torch.randn(3, 4, 3, 3)),
    ),
    "conv1d, negative padding": (
        "aten::convolution",
        lambda x, w: torch.ops.aten.convolution(x, w, None, [1], [-1], [1], False, [0], 1),
        lambda: (torch.randn(1, 2, 8), torch.randn(3, 2, 3)),
    ),
    "layer_norm, weight of the wrong shape": (
        "aten::native_layer_norm",
        lambda x, w: F.layer_norm(x, (8,), w),
        lambda: (_x(), torch.randn(7)),
    ),
    "layer_norm, bias of the wrong shape": (
        "aten::native_layer_norm",
        lambda x, b: F.layer_norm(x, (8,), None, b),
        lambda: (_x(), torch.randn(1, 8)),
    ),
    "layer_norm, normalized_shape not the input's": (
        "aten::native_layer_norm",
        lambda x: F.layer_norm(x, (7,)),
        lambda: (_x(),),
    ),
    "linear, bias of the wrong size": (
        "aten::addmm",
        lambda x, w, b: F.linear(x, w, b),
        lambda: (torch.randn(2, 3), torch.randn(4, 3), torch.randn(5)),
    ),
    "embedding, float indices": (
        "aten::embedding",
        lambda i, w: F.embedding(i, w),
        lambda: (torch.tensor([1.0]), torch.randn(5, 3)),
    ),
    "grid_sample, grid of the wrong width": (
        "aten::grid_sampler_2d",
        lambda a, g: F.grid_sample(a, g, align_corners=False),
        lambda: (torch.ones(1, 1, 4, 4), torch.ones(1, 2, 2, 3)),
    ),
    "gelu, unknown approximation": (
        "aten::gelu",
        lambda a: F.gelu(a, approximate="Tanh"),
        lambda: (torch.ones(3),),
    ),
    "mean of integers": ("aten::mean", lambda a: a.mean(), lambda: (torch.arange(5),)),
    "repeat, fewer repeats than dims": (
        "aten::repeat",
        lambda a: a.repeat(2),
        lambda: (torch.ones(2, 3),),
    ),
    "flip, a dim twice": ("aten::flip", lambda a: a.flip(0, 0), lambda: (torch.ones(2, 3),)),
    "bitwise_and of floats": (
        "aten::bitwise_and",
        lambda a, b: a & b,
        lambda: (torch.ones(3),) * 2,
    ),
    "bitwise_not of floats": ("aten::bitwise_not", torch.bitwise_not, lambda: (torch.ones(3),)),
    "int32 fill_ with 1e20": ("aten::fill_", lambda a: a.fill_(1e20), lambda: (_ints(),)),
    "half fill_ with 1e10": ("aten::fill_", lambda a: a.half().fill_(1e10), lambda: (_ints(),)),
    "int32 clamp at 2**40": ("aten::clamp", lambda a: a.clamp(max=BIG), lambda: (_ints(),)),
    "int32 clamp_ at 2**40": ("aten::clamp", lambda a: a.clamp_(-BIG, 0), lambda: (_ints(),)),
    "int32 clamp_min at 2**40": ("aten::clamp_min", lambda a: a.clamp_min(BIG), lambda: (_ints(),)),
    "half clamp at 1e300": ("aten::clamp", lambda a: a.half().clamp(max=1e300), lambda: (_ints(),)),
    "int32 add, alpha 2**40": ("aten::add", lambda a: a.add(a, alpha=BIG), lambda: (_ints(),)),
    "half add, alpha 1e10": (
        "aten::add",
        lambda a: a.half().add(a.half(), alpha=1e10),
        lambda: (_ints(),),
    ),
    "int32 sub_, alpha 2**40": ("aten::sub", lambda a: a.sub_(a, alpha=BIG), lambda: (_ints(),)),
    "int32 threshold value 2**40": (
        "aten::threshold",
        lambda a: F.threshold(a, 1, BIG),
        lambda: (_ints(),),
    ),
    "int32 addcmul value 2**40": (
        "aten::addcmul",
        lambda a: torch.addcmul(a, a, a, value=BIG),
        lambda: (_ints(),),
    ),
    "int32 index_fill with 2**40": (
        "aten::index_fill",
        lambda a, i: a.index_fill(0, i, BIG),
        lambda: (_ints(), torch.tensor([0])),
    ),
    "half scatter_ with 1e10": (
        "aten::scatter",
        lambda a, i: a.half().scatter_(0, i, 1e10),
        lambda: (_ints(), torch.tensor([0])),
    ),
    "int32 hardtanh at 2**40": (
        "aten::hardtanh",
        lambda a: F.hardtanh(a, -BIG, BIG),
        lambda: (_ints(),),
    ),
    "uint8 hardtanh, min -1.5 (truncated to -1)": (
        "aten::hardtanh",
        lambda a: F.hardtanh(a.to(torch.uint8), -1.5, 2.0),
        lambda: (_ints(),),
    ),
    "int8 hardtanh, max 1000": (
        "aten::hardtanh",
        lambda a: F.hardtanh(a.to(torch.int8), 0, 1000),
        lambda: (_ints(),),
    ),
    "bool hardtanh": ("aten::hardtanh", lambda a: F.hardtanh(a > 1), lambda: (_ints(),)),
    "int8 pow 300": ("aten::pow", lambda a: a.to(torch.int8).pow(300), lambda: (_ints(),)),
    "addr of ints, fractional beta": (
        "aten::addr",
        lambda a: torch.addr(a.reshape(3, 1).expand(3, 3), a, a, beta=0.5),
        lambda: (_ints(),),
    ),
    "addr of ints, boolean alpha": (
        "aten::addr",
        lambda a: torch.addr(a.reshape(3, 1).expand(3, 3), a, a, alpha=True),
        lambda: (_ints(),),
    ),
    "var of ints": ("aten::var", lambda a: torch.var(a, 0), lambda: (_ints(),)),
    "var of ints, dim out of range": ("aten::var", lambda a: torch.var(a, 5), lambda: (_ints(),)),
    "std of bools": ("aten::var", lambda a: torch.std(a > 1), lambda: (_ints(),)),
    "var_mean of ints": ("aten::var_mean", lambda a: torch.var_mean(a, 0), lambda: (_ints(),)),
    "std_mean of ints": ("aten::std_mean", lambda a: torch.std_mean(a), lambda: (_ints(),)),
    "int64 masked_fill with a complex": (
        "aten::masked_fill",
        lambda a: a.long().masked_fill(a > 1, 1 + 2j),
        lambda: (_ints(),),
    ),
    # Float kernels take these scalars in float, and threshold's value in
    # the tensor's own dtype; ints have no kernel (NotImplementedError).
    "half threshold, value 1e5": (
        "aten::threshold",
        lambda a: F.threshold(a.half(), 1.0, 1e5),
        lambda: (_ints(),),
    ),
    "float leaky_relu, slope 1e40": (
        "aten::leaky_relu",
        lambda a: F.leaky_relu(a.float(), 1e40),
        lambda: (_ints(),),
    ),
    "int32 leaky_relu": ("aten::leaky_relu", lambda a: F.leaky_relu(a), lambda: (_ints(),)),
    "bfloat16 leaky_relu_backward, slope 1e40": (
        "aten::leaky_relu_backward",
        lambda a: torch.ops.aten.leaky_relu_backward(a.bfloat16(), a.bfloat16(), 1e40, False),
        lambda: (_ints(),),
    ),
    "float softplus, threshold 1e40": (
        "aten::softplus",
        lambda a: F.softplus(a.float(), threshold=1e40),
        lambda: (_ints(),),
    ),
    "half softplus, beta 1e40": (
        "aten::softplus",
        lambda a: F.softplus(a.half(), beta=1e40),
        lambda: (_ints(),),
    ),
    "int8 softplus": ("aten::softplus", lambda a: F.softplus(a.to(torch.int8)), lambda: (_ints(),)),
    "float softplus_backward, beta 1e40": (
        "aten::softplus_backward",
        lambda a: torch.ops.aten.softplus_backward(a.float(), a.float(), 1e40, 20),
        lambda: (_ints(),),
    ),
    "float lerp, weight 1e40": (
        "aten::lerp",
        lambda a: torch.lerp(a.float(), a.float(), 1e40),
        lambda: (_ints(),),
    ),
    "int32 lerp": ("aten::lerp", lambda a: torch.lerp(a, a, 0.5), lambda: (_ints(),)),
    "int32 lerp, tensor weight": ("aten::lerp", lambda a: torch.lerp(a, a, a), lambda: (_ints(),)),
    "float elu, alpha 1e40": (
        "aten::elu",
        lambda a: F.elu(a.float(), 1e40),
        lambda: (_ints(),),
    ),
    "int32 elu": ("aten::elu", lambda a: F.elu(a), lambda: (_ints(),)),
    "int32 celu (elu's kernel)": ("aten::elu", lambda a: F.celu(a), lambda: (_ints(),)),
    "float elu_backward, scale 1e40": (
        "aten::elu_backward",
        lambda a: torch.ops.aten.elu_backward(a.float(), 1.0, 1e40, 1.0, False, a.float()),
        lambda: (_ints(),),
    ),
    "half hardshrink, lambd 1e5": (
        "aten::hardshrink",
        lambda a: F.hardshrink(a.half(), 1e5),
        lambda: (_ints(),),
    ),
    "int8 hardshrink": (
        "aten::hardshrink",
        lambda a: F.hardshrink(a.to(torch.int8)),
        lambda: (_ints(),),
    ),
    "int32 hardshrink_backward": (
        "aten::hardshrink_backward",
        lambda a: torch.ops.aten.hardshrink_backward(a, a, 0.5),
        lambda: (_ints(),),
    ),
    "half logit, eps 1e5": (
        "aten::logit",
        lambda a: torch.logit(a.half(), 1e5),
        lambda: (_ints(),),
    ),
    "int32 logit, eps 1e40 (in float)": (
        "aten::logit",
        lambda a: torch.logit(a, 1e40),
        lambda: (_ints(),),
    ),
    "bool addmm": (
        "aten::addmm",
        lambda a: torch.addmm(a[:2] > 1, (a[:2] > 1)[:, None], (a[:2] > 1)[None]),
        lambda: (_ints(),),
    ),
    "float addmm, beta 1e40": (
        "aten::addmm",
        lambda a: torch.addmm(a.float()[:2], a.float()[:2, None], a.float()[None, :2], beta=1e40),
        lambda: (_ints(),),
    ),
    "int32 addmm, alpha 2**40": (
        "aten::addmm",
        lambda a: torch.addmm(a[:2], a[:2, None], a[None, :2], alpha=BIG),
        lambda: (_ints(),),
    ),
    "bool baddbmm": (
        "aten::baddbmm",
        lambda a: torch.baddbmm(
            (a > 1)[None, :2, None], (a > 1)[None, :2, None], (a > 1)[None, None, :1]
        ),
        lambda: (_ints(),),
    ),
    "int8 baddbmm, beta 300": (
        "aten::baddbmm",
        lambda a: torch.baddbmm(
            a.to(torch.int8)[None, :2, None],
            a.to(torch.int8)[None, :2, None],
            a.to(torch.int8)[None, None, :1],
            beta=300,
        ),
        lambda: (_ints(),),
    ),
    # Eager subtracts by adding -alpha, which must fit.
    "int32 sub, alpha -2**31": (
        "aten::sub",
        lambda a: torch.sub(a, a, alpha=-(2**31)),
        lambda: (_ints(),),
    ),
    "int32 rsub, alpha -2**31": (
        "aten::rsub",
        lambda a: torch.rsub(a, a, alpha=-(2**31)),
        lambda: (_ints(),),
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_at_the_call_naming_the_op(case: str) -> None:
    op, call, make = REFUSED[case]
    inputs = make()
    with pytest.raises(Exception):  # noqa: B017 (eager's own type varies)
        call(*[t.clone() for t in inputs])
    lazy_inputs = [_lazy(t) for t in inputs]
    lazyfuse.mark_step()
    # No value is read inside: raising here is raising at the call.
    with pytest.raises(RuntimeError, match=re.escape(op) + ":"):
        call(*lazy_inputs)
    # Nothing is left pending, and the process goes on.
    lazyfuse.mark_step()
    torch.testing.assert_close((lazy_inputs[0] * 2).cpu(), inputs[0] * 2)


# Indices eager refuses with IndexError. A boolean mask becomes its nonzero
# positions, so a mask of the wrong shape selected from the first rows.
BAD_INDICES = {
    "mask shorter than its dim": torch.tensor([False, True]),
    "mask longer than its dim": torch.tensor([True, False, True, True]),
    "uint8 mask of the wrong shape": torch.tensor([0, 1], dtype=torch.uint8),
    "2-d mask of the wrong shape": torch.ones(3, 5, dtype=torch.bool),
    "float index": torch.tensor([0.0, 1.0]),
    "int8 index": torch.tensor([0, 1], dtype=torch.int8),
}


@pytest.mark.parametrize("case", list(BAD_INDICES))
@pytest.mark.parametrize("write", [False, True], ids=["read", "write"])
def test_bad_indices_refused_as_eager_refuses(case: str, write: bool) -> None:
    index = BAD_INDICES[case]
    op = "aten::index_put" if write else "aten::index"

    def use(x: torch.Tensor, i: torch.Tensor) -> None:
        if write:
            x[i] = 2.0
        else:
            x[i]  # noqa: B018 - the read is the test

    with pytest.raises(IndexError):
        use(torch.randn(3, 4), index)
    lazy_x = torch.randn(3, 4).to(DEV)
    with pytest.raises(IndexError, match=re.escape(op) + ":"):
        use(lazy_x, index.to(DEV))
    lazyfuse.mark_step()
    assert lazy_x.cpu().shape == (3, 4)


# Edges eager accepts: the checks must let them through, with eager's values.
ACCEPTED: dict[str, tuple[Callable[..., torch.Tensor], Callable[[], tuple]]] = {
    "conv2d, kernel exactly the padded input": (
        lambda x, w: F.conv2d(x, w, padding=1),
        lambda: (_x(), torch.randn(4, 3, 10, 10)),
    ),
    "conv2d, groups and dilation": (
        lambda x, w, b: F.conv2d(x, w, b, groups=3, dilation=2),
        lambda: (torch.randn(2, 6, 9, 9), torch.randn(6, 2, 3, 3), torch.randn(6)),
    ),
    "conv_transpose2d, groups, output_padding below stride": (
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=3, output_padding=2, groups=2),
        lambda: (torch.randn(1, 4, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(6)),
    ),
    "conv1d, one stride for all": (
        lambda x, w: F.conv1d(x, w, stride=2),
        lambda: (torch.randn(1, 2, 9), torch.randn(3, 2, 3)),
    ),
    "conv3d, unbatched": (
        lambda x, w: F.conv3d(x, w),
        lambda: (torch.randn(2, 4, 4, 4), torch.randn(3, 2, 2, 2, 2)),
    ),
    "layer_norm over two dims": (
        lambda x, w, b: F.layer_norm(x, (8, 8), w, b),
        lambda: (_x(), torch.randn(8, 8), torch.randn(8, 8)),
    ),
    "linear, bias broadcast from one": (
        lambda x, w, b: torch.addmm(b, x, w.t()),
        lambda: (torch.randn(2, 3), torch.randn(4, 3), torch.randn(1, 4)),
    ),
    "embedding, int32 indices": (
        lambda i, w: F.embedding(i, w),
        lambda: (torch.tensor([1, 4], dtype=torch.int32), torch.randn(5, 3)),
    ),
    "gelu tanh": (lambda a: F.gelu(a, approximate="tanh"), lambda: (torch.randn(5),)),
    "mean of ints into float": (lambda a: a.mean(dtype=torch.float32), lambda: (torch.arange(5),)),
    "repeat, more repeats than dims": (lambda a: a.repeat(2, 1, 2), lambda: (torch.ones(2, 3),)),
    "flip, negative dims": (lambda a: a.flip(-1, 0), lambda: (torch.arange(6.0).view(2, 3),)),
    "bitwise_and of bools with a Python bool": (lambda a: a & True, lambda: (torch.ones(3) > 0,)),
    "bitwise_or of ints with a Python int": (lambda a: a | 4, lambda: (_ints(),)),
    "uint8 fill_ with -1": (lambda a: a.to(torch.uint8).fill_(-1), lambda: (_ints(),)),
    "bool fill_ with 2": (lambda a: a.bool().fill_(2), lambda: (_ints(),)),
    "int32 fill_ with its largest": (lambda a: a.fill_(2**31 - 1), lambda: (_ints(),)),
    "int32 clamp with a float bound": (lambda a: a.clamp(max=2.5), lambda: (_ints(),)),
    "int32 clamp with tensor bounds": (
        lambda a, b: a.clamp(max=b),
        lambda: (_ints(), torch.tensor([2, 2, 2], dtype=torch.int32)),
    ),
    "uint8 hardtanh, min -0.5 (truncated to 0)": (
        lambda a: F.hardtanh(a.to(torch.uint8), -0.5, 2.0),
        lambda: (_ints(),),
    ),
    "int32 hardtanh, limits 0.5 and 2.7 (truncated)": (
        lambda a: F.hardtanh(a - 2, 0.5, 2.7),
        lambda: (_ints(),),
    ),
    "half clamp at 6e4": (lambda a: a.half().clamp(max=6e4), lambda: (_ints(),)),
    "half addcmul value 1e10 (taken in float)": (
        lambda a: torch.addcmul(a.half(), a.half(), a.half(), value=1e10),
        lambda: (_ints(),),
    ),
    "int32 pow 2.5 (into float)": (lambda a: a.pow(2.5), lambda: (_ints(),)),
    "half scatter with 6e4": (
        lambda a, i: a.half().scatter(0, i, 6e4),
        lambda: (_ints(), torch.tensor([1])),
    ),
    "half threshold at 1e10 (taken in float)": (
        lambda a: F.threshold(a.half(), 1e10, 0.0),
        lambda: (_ints(),),
    ),
    "uint8 clamp, min -1 (wraps to 255)": (
        lambda a: a.to(torch.uint8).clamp(min=-1),
        lambda: (_ints(),),
    ),
    "int32 add 2**40 (an operand, wrapped)": (lambda a: a.add(BIG), lambda: (_ints(),)),
    "int32 lt 2**40": (lambda a: a < BIG, lambda: (_ints(),)),
    "float addcmul value 1e30": (
        lambda a: torch.addcmul(a.float(), a.float(), a.float(), value=1e30),
        lambda: (_ints(),),
    ),
    "float masked_fill with a real complex": (
        lambda a: a.float().masked_fill(a > 1, 2 + 0j),
        lambda: (_ints(),),
    ),
    "int32 sub, alpha 2**31 (adds -2**31)": (
        lambda a: torch.sub(a, a, alpha=2**31),
        lambda: (_ints(),),
    ),
    "int32 rsub, alpha 2**31 (adds -2**31)": (
        lambda a: torch.rsub(a, a, alpha=2**31),
        lambda: (_ints(),),
    ),
    "float pow 1e40 (taken in double)": (lambda a: a.float().pow(1e40), lambda: (_ints(),)),
    "int32 pow 1e40 (into float)": (lambda a: a.pow(1e40), lambda: (_ints(),)),
    "double leaky_relu, slope 1e40 (taken in double)": (
        lambda a: F.leaky_relu(a.double() - 2, 1e40),
        lambda: (_ints(),),
    ),
    "half addmm, beta 1e5 (taken in float)": (
        lambda a: torch.addmm(a.half()[:2], a.half()[:2, None], a.half()[None, :2], beta=1e5),
        lambda: (_ints(),),
    ),
    "double logit, eps 1e40": (lambda a: torch.logit(a.double() / 4, 1e40), lambda: (_ints(),)),
    "half elu, alpha 1e5 (taken in float)": (
        lambda a: F.elu(a.half() - 2, 1e5),
        lambda: (_ints(),),
    ),
    "half threshold, threshold 1e5 (taken in float)": (
        lambda a: F.threshold(a.half(), 1e5, 2.0),
        lambda: (_ints(),),
    ),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_accepted_as_in_eager(case: str) -> None:
    call, make = ACCEPTED[case]
    inputs = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a real complex cast into a float warns
        expected = call(*[t.clone() for t in inputs])
        got = call(*[_lazy(t) for t in inputs]).cpu()
    torch.testing.assert_close(got, expected, equal_nan=True)


# Error inputs (OpInfo's) where eager refuses and lazyfuse still computes
# something, each with the reason it is left so.
KNOWN_ACCEPTED = {
    ("masked_fill", "value cannot be converted"): "a complex value tensor into a real tensor: "
    "eager refuses a non-zero imaginary part, a value the trace cannot see without a sync; "
    "lazyfuse casts it, as `.to()` does",
}
# Why error inputs with an out= tensor are not held to eager's refusals.
OUT_ACCEPTED = (
    "functionalization writes an out= result through a copy: an out= of another dtype is "
    "cast into, and one that overlaps an input or itself is written safely, where eager's "
    "kernels refuse both"
)


def _sync(out: object) -> None:
    tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, out)


def test_every_opinfo_error_input_eager_refuses_is_refused() -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    silent = []
    checked = 0
    for info in op_db:
        if info.error_inputs_func is None:
            continue
        for error_input in info.error_inputs("cpu"):
            sample = error_input.sample_input
            if "out" in sample.kwargs:
                continue  # OUT_ACCEPTED
            try:
                info(sample.input, *sample.args, **sample.kwargs)
                continue  # eager accepts it on the CPU
            except Exception:
                pass
            try:
                inputs = (tree_map(_lazy, sample.input), tree_map(_lazy, sample.args))
                kwargs = tree_map(_lazy, sample.kwargs)
            except Exception:
                continue  # not a tensor lazyfuse takes (sparse, meta)
            checked += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _sync(info(inputs[0], *inputs[1], **kwargs))
                    _sync(inputs)
                    lazyfuse.mark_step()
            except Exception:
                continue
            regex = str(error_input.error_regex)
            if not any(op in ("*", info.name) and known in regex for op, known in KNOWN_ACCEPTED):
                silent.append(f"{info.name}: eager raises {regex!r}")
    assert checked > 450
    assert not silent, "lazyfuse computes what eager refuses:\n" + "\n".join(silent)


# A Scalar is an operand of its node, and a node whose operands match is
# reused without its argument check: after clamp(min=3), clamp(min=2**31) of
# an int32 tensor reused the node and clamped at -2**31.
SCALAR_REFUSED_AFTER_REUSE: dict[str, tuple[Callable[..., torch.Tensor], torch.Tensor, float]] = {
    "clamp": (lambda x, s: x.clamp(min=s), _ints(), 2**31),
    "clamp_min": (lambda x, s: torch.clamp_min(x, s), _ints(), 2**31),
    "clamp_max": (lambda x, s: torch.clamp_max(x, s), _ints(), 2**31),
    "hardtanh": (lambda x, s: F.hardtanh(x, -s, s), torch.tensor([5.0, -7.0]).half(), 7e4),
    "threshold": (lambda x, s: F.threshold(x, 1, s), _ints(), 2**31),
    "fill_": (lambda x, s: x.clone().fill_(s), _ints(), 2**31),
    "full_like": (lambda x, s: torch.full_like(x, s), _ints(), 2**31),
    "add alpha": (lambda x, s: torch.add(x, x, alpha=s), _ints(), 2**40),
}


@pytest.mark.parametrize("case", list(SCALAR_REFUSED_AFTER_REUSE))
def test_scalar_refused_after_an_accepted_one(case: str) -> None:
    call, tensor, refused = SCALAR_REFUSED_AFTER_REUSE[case]
    with pytest.raises(RuntimeError):
        call(tensor.clone(), refused)
    lazy_tensor = tensor.to(DEV)
    lazyfuse.mark_step()
    for accepted in (1, 2):
        torch.testing.assert_close(call(lazy_tensor, accepted).cpu(), call(tensor, accepted))
    result = None
    with pytest.raises(RuntimeError, match="cannot be converted|overflow"):
        result = call(lazy_tensor, refused)
    assert result is None
    lazyfuse.mark_step()
    torch.testing.assert_close(lazy_tensor.cpu(), tensor)


@pytest.mark.parametrize("source_size", [5, 0])
def test_masked_scatter_refuses_a_source_shorter_than_the_mask(source_size: int) -> None:
    mask = torch.ones(2, 3, dtype=torch.bool)
    source = torch.arange(1.0, 1.0 + source_size)
    with pytest.raises(RuntimeError, match="Number of elements of source"):
        torch.zeros(2, 3).masked_scatter(mask, source)
    result = torch.zeros(2, 3, device=DEV).masked_scatter(mask.to(DEV), source.to(DEV))
    # Eager counts the mask on the host; here the read raises, naming the gather.
    with pytest.raises(IndexError, match="aten::index_select"):
        result.cpu()
    enough = torch.arange(1.0, 7.0)
    for selected in (mask, torch.tensor([[True, False, True], [False, False, True]])):
        torch.testing.assert_close(
            torch.zeros(2, 3, device=DEV).masked_scatter(selected.to(DEV), enough.to(DEV)).cpu(),
            torch.zeros(2, 3).masked_scatter(selected, enough),
        )
    nothing = torch.zeros(2, 3, dtype=torch.bool)
    torch.testing.assert_close(
        torch.ones(2, 3, device=DEV).masked_scatter(nothing.to(DEV), source.to(DEV)).cpu(),
        torch.ones(2, 3).masked_scatter(nothing, source),
    )


BITWISE_OF_FLOATS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "and": lambda t: t & 1,
    "or": lambda t: t | t,
    "xor": lambda t: t ^ 1,
    "in-place and": lambda t: t.__iand__(1),
    "in-place or": lambda t: t.__ior__(t),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.half, torch.complex64])
@pytest.mark.parametrize("case", list(BITWISE_OF_FLOATS))
def test_bitwise_of_floats_raises_eagers_exception_type(case: str, dtype: torch.dtype) -> None:
    call = BITWISE_OF_FLOATS[case]
    with pytest.raises(Exception) as eager:  # noqa: PT011 - the type is what is compared
        call(torch.ones(2, dtype=dtype))
    with pytest.raises(Exception) as lazy:  # noqa: PT011
        call(torch.ones(2, dtype=dtype, device=DEV))
    assert type(lazy.value) is type(eager.value), (lazy.value, eager.value)
    assert "aten::bitwise_" in str(lazy.value)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0)])
@pytest.mark.parametrize("op", ["mode", "kthvalue"])
def test_selection_over_an_empty_dim_raises_index_error(op: str, shape: tuple[int, ...]) -> None:
    def call(t: torch.Tensor) -> object:
        dim = len(shape) - 1 if shape[-1] == 0 else 0
        return torch.mode(t, dim) if op == "mode" else torch.kthvalue(t, 1, dim)

    with pytest.raises(IndexError, match="non-zero size"):
        call(torch.empty(shape))
    with pytest.raises(IndexError, match=f"aten::{op}: Expected reduction dim"):
        call(torch.empty(shape, device=DEV))
    values, _ = call(torch.arange(6.0).reshape(2, 3).to(DEV))
    torch.testing.assert_close(values.cpu(), call(torch.arange(6.0).reshape(2, 3))[0])


def _leaky_relu_inplace_grad(x: torch.Tensor, slope: float) -> torch.Tensor:
    leaf = x.detach().requires_grad_()
    y = leaf * 1
    F.leaky_relu_(y, slope)
    y.sum().backward()
    assert leaf.grad is not None
    return leaf.grad


# Checks in a meta kernel, on a Scalar operand's value: a reused node skipped
# them, and the new value was computed silently (leaky_relu_'s gradient) or
# failed at the next read. (call, input, accepted value, refused value)
META_CHECKED_SCALARS: dict[str, tuple[Callable[..., torch.Tensor], torch.Tensor, float, float]] = {
    "leaky_relu_ backward, negative slope": (
        _leaky_relu_inplace_grad,
        torch.tensor([0.5, -2.0, 3.0]),
        0.1,
        -0.1,
    ),
    "pow of ints, negative exponent": (lambda x, e: torch.pow(x, e), _ints(), 2, -1),
    "softshrink, negative lambda": (lambda x, s: F.softshrink(x, s), torch.randn(5), 0.5, -1.0),
    "vector_norm of nothing, negative ord": (
        lambda x, o: torch.linalg.vector_norm(x, ord=o),
        torch.empty(0),
        2.0,
        -1.0,
    ),
    "renorm, negative p": (lambda x, p: torch.renorm(x, p, 0, 1.0), torch.randn(2, 2), 2.0, -1.0),
}


@pytest.mark.parametrize("case", list(META_CHECKED_SCALARS))
def test_a_reused_node_checks_a_new_scalar(case: str) -> None:
    call, tensor, accepted, refused = META_CHECKED_SCALARS[case]
    with pytest.raises(RuntimeError) as eager:
        call(tensor.clone(), refused)
    lazy_tensor = tensor.to(DEV)
    for _ in range(2):  # the second call reuses the first one's nodes
        torch.testing.assert_close(call(lazy_tensor, accepted).cpu(), call(tensor, accepted))
        lazyfuse.mark_step()
    with pytest.raises(type(eager.value)):
        call(lazy_tensor, refused)  # at the call, as eager: nothing is read
    lazyfuse.mark_step()
    torch.testing.assert_close(call(lazy_tensor, accepted).cpu(), call(tensor, accepted))
