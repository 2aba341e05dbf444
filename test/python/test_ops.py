"""Every op in codegen/lazyfuse_ops.yaml, lazy against eager CPU: forward
results and gradients, with no eager fallback."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

import lazyfuse
from conftest import REFERENCE_DEVICE
from test_opinfo import VIA_OPINFO, opinfo_entry, run_sample
from test_random import RANDOM_OPS

YAML = Path(__file__).resolve().parents[2] / "codegen" / "lazyfuse_ops.yaml"


@dataclass
class Case:
    fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]
    inputs: Callable[[], list[torch.Tensor]]
    grad: bool = True
    # lazyfuse kernels this case must reach (default: the op's own name).
    kernels: list[str] = field(default_factory=list)


def randn(*shape: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(*shape)


def inputs(*makers: Callable[[], torch.Tensor]) -> Callable[[], list[torch.Tensor]]:
    return lambda: [m() for m in makers]


def positive(*shape: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.rand(*shape) + 0.5


def rounded(*shape: int) -> Callable[[], torch.Tensor]:
    # Small integers in float, so that equal elements are likely.
    return lambda: torch.randint(-2, 3, shape).float()


def mask(*shape: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.rand(*shape) > 0.5


def labels(n: int, classes: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randint(0, classes, (n,))


def fresh(x: torch.Tensor) -> torch.Tensor:
    # An intermediate we may mutate in place (a leaf requiring grad may not be).
    return x * 1


CASES: dict[str, Case] = {
    "abs": Case(torch.abs, inputs(randn(4, 5))),
    "add.Tensor": Case(lambda a, b: torch.add(a, b, alpha=2), inputs(randn(4, 5), randn(5))),
    "sub.Tensor": Case(lambda a, b: a - b, inputs(randn(4, 5), randn(4, 5))),
    "mul.Tensor": Case(lambda a, b: a * b * 3, inputs(randn(4, 5), randn(4, 1))),
    "div.Tensor": Case(lambda a, b: a / b, inputs(randn(4, 5), positive(4, 5))),
    "neg": Case(torch.neg, inputs(randn(6))),
    "exp": Case(torch.exp, inputs(randn(6))),
    "log": Case(torch.log, inputs(positive(6))),
    "sqrt": Case(torch.sqrt, inputs(positive(6))),
    "rsqrt": Case(torch.rsqrt, inputs(positive(6))),
    "pow.Tensor_Scalar": Case(lambda a: a**3, inputs(randn(6)), kernels=["pow"]),
    "sgn": Case(torch.sgn, inputs(randn(6)), grad=False),
    "maximum": Case(torch.maximum, inputs(randn(3, 4), randn(3, 4))),
    "minimum": Case(torch.minimum, inputs(randn(3, 4), randn(3, 4))),
    "where.self": Case(
        torch.where, inputs(mask(3, 4), randn(3, 4), randn(3, 4)), kernels=["where"]
    ),
    "eq.Tensor": Case(torch.eq, inputs(rounded(5), rounded(5)), kernels=["eq"]),
    "gt.Tensor": Case(torch.gt, inputs(randn(5), randn(5)), kernels=["gt"]),
    "lt.Tensor": Case(torch.lt, inputs(randn(5), randn(5)), kernels=["lt"]),
    "lerp.Tensor": Case(torch.lerp, inputs(randn(4), randn(4), positive(4)), kernels=["lerp"]),
    "addcmul": Case(
        lambda a, b, c: torch.addcmul(a, b, c, value=0.5), inputs(randn(4), randn(4), randn(4))
    ),
    "addcdiv": Case(
        lambda a, b, c: torch.addcdiv(a, b, c, value=-2), inputs(randn(4), randn(4), positive(4))
    ),
    "lerp.Scalar": Case(
        lambda a, b: torch.lerp(a, b, 0.3), inputs(randn(4), randn(4)), kernels=["lerp"]
    ),
    "relu": Case(torch.relu, inputs(randn(4, 5))),
    "threshold_backward": Case(torch.relu, inputs(randn(4, 5)), kernels=["threshold_backward"]),
    "sigmoid": Case(torch.sigmoid, inputs(randn(4, 5))),
    "sigmoid_backward": Case(torch.sigmoid, inputs(randn(4, 5)), kernels=["sigmoid_backward"]),
    "tanh": Case(torch.tanh, inputs(randn(4, 5))),
    "tanh_backward": Case(torch.tanh, inputs(randn(4, 5)), kernels=["tanh_backward"]),
    "fill.Scalar": Case(lambda a: fresh(a).fill_(2.5), inputs(randn(3, 3)), kernels=["fill"]),
    # An LR scheduler fills a capturable optimizer's tensor lr with a tensor.
    "fill.Tensor": Case(
        lambda a, v: fresh(a).fill_(v[0] * 2), inputs(randn(3, 3), randn(1)), kernels=["fill"]
    ),
    "zero": Case(lambda a: fresh(a).zero_() + a, inputs(randn(3, 3))),
    "sum": Case(torch.sum, inputs(randn(3, 4))),
    "sum.dim_IntList": Case(
        lambda a: a.sum(dim=1, keepdim=True), inputs(randn(3, 4)), kernels=["sum"]
    ),
    "mean": Case(torch.mean, inputs(randn(3, 4))),
    "mean.dim": Case(lambda a: a.mean(0), inputs(randn(3, 4)), kernels=["mean"]),
    "_softmax": Case(
        lambda a: torch.softmax(a, -1),
        inputs(randn(3, 5)),
        kernels=["_softmax", "_softmax_backward_data"],
    ),
    "_softmax_backward_data": Case(lambda a: torch.softmax(a, 0), inputs(randn(3, 5))),
    "_log_softmax": Case(
        lambda a: F.log_softmax(a, -1),
        inputs(randn(3, 5)),
        kernels=["_log_softmax", "_log_softmax_backward_data"],
    ),
    "_log_softmax_backward_data": Case(lambda a: F.log_softmax(a, 0), inputs(randn(3, 5))),
    "nll_loss_forward": Case(
        lambda a, t: F.nll_loss(F.log_softmax(a, -1), t), inputs(randn(6, 4), labels(6, 4))
    ),
    "nll_loss_backward": Case(
        lambda a, t: F.nll_loss(a, t, reduction="sum"), inputs(randn(6, 4), labels(6, 4))
    ),
    "nll_loss2d_forward": Case(
        lambda a, t: F.nll_loss(F.log_softmax(a, 1), t),
        inputs(randn(2, 3, 4, 4), lambda: torch.randint(0, 3, (2, 4, 4))),
        kernels=["nll_loss2d_forward", "nll_loss2d_backward"],
    ),
    "nll_loss2d_backward": Case(
        lambda a, t: F.nll_loss(a, t, reduction="sum"),
        inputs(randn(1, 3, 2, 5), lambda: torch.randint(0, 3, (1, 2, 5))),
    ),
    "constant_pad_nd": Case(lambda a: F.pad(a, (1, 2, 0, 1), value=0.5), inputs(randn(2, 3, 4))),
    "mse_loss": Case(
        F.mse_loss, inputs(randn(4, 3), randn(4, 3)), kernels=["mse_loss", "mse_loss_backward"]
    ),
    "mse_loss_backward": Case(
        lambda a, b: F.mse_loss(a, b, reduction="sum"), inputs(randn(5), randn(5))
    ),
    "mm": Case(torch.mm, inputs(randn(3, 4), randn(4, 2))),
    "addmm": Case(
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2),
        inputs(randn(2), randn(3, 4), randn(4, 2)),
    ),
    "bmm": Case(torch.bmm, inputs(randn(2, 3, 4), randn(2, 4, 5))),
    "convolution": Case(
        lambda x, w, b: F.conv2d(x, w, b, padding=1),
        inputs(randn(2, 3, 6, 6), randn(4, 3, 3, 3), randn(4)),
        kernels=["convolution", "convolution_backward"],
    ),
    "convolution_backward": Case(
        lambda x, w: F.conv2d(x, w, stride=2), inputs(randn(1, 2, 7, 7), randn(3, 2, 3, 3))
    ),
    "avg_pool2d": Case(
        lambda x: F.avg_pool2d(x, 2),
        inputs(randn(2, 3, 6, 6)),
        kernels=["avg_pool2d", "avg_pool2d_backward"],
    ),
    "avg_pool2d_backward": Case(
        lambda x: F.avg_pool2d(x, 3, stride=1, padding=1), inputs(randn(1, 2, 5, 5))
    ),
    "max_pool2d_with_indices": Case(
        lambda x: F.max_pool2d(x, 2),
        inputs(randn(2, 3, 6, 6)),
        kernels=["max_pool2d_with_indices", "max_pool2d_with_indices_backward"],
    ),
    "max_pool2d_with_indices_backward": Case(
        lambda x: F.max_pool2d(x, 3, stride=2), inputs(randn(1, 2, 7, 7))
    ),
    "alias_copy": Case(lambda a: torch.ops.aten.alias(a) * 2, inputs(randn(3))),
    "detach_copy": Case(lambda a, b: a.detach() * b, inputs(randn(3), randn(3))),
    "view_copy": Case(lambda a: a.view(-1, 2), inputs(randn(3, 4))),
    "expand_copy": Case(lambda a: a.expand(3, 4) * 1, inputs(randn(1, 4))),
    "permute_copy": Case(lambda a: a.permute(2, 0, 1), inputs(randn(2, 3, 4))),
    "t_copy": Case(lambda a: a.t(), inputs(randn(2, 3))),
    "transpose_copy.int": Case(
        lambda a: a.transpose(0, 2), inputs(randn(2, 3, 4)), kernels=["transpose_copy"]
    ),
    "unsqueeze_copy": Case(lambda a: a.unsqueeze(1), inputs(randn(2, 3))),
    "squeeze_copy": Case(lambda a: a.squeeze(), inputs(randn(1, 3, 1))),
    "squeeze_copy.dim": Case(
        lambda a: a.squeeze(0), inputs(randn(1, 3, 1)), kernels=["squeeze_copy"]
    ),
    "squeeze_copy.dims": Case(
        lambda a: a.squeeze((0, 2)), inputs(randn(1, 3, 1)), kernels=["squeeze_copy"]
    ),
    "select_copy.int": Case(lambda a: a[1], inputs(randn(3, 4)), kernels=["select_copy"]),
    "slice_copy.Tensor": Case(lambda a: a[1:3, ::2], inputs(randn(4, 6)), kernels=["slice_copy"]),
    "as_strided_copy": Case(
        lambda a: a.as_strided((2, 2), (1, 2), 1) * 1, inputs(randn(3, 3)), grad=False
    ),
    "select_backward": Case(lambda a: a[1] * 2, inputs(randn(3, 4))),
    "slice_backward": Case(lambda a: a[1:3] * 2, inputs(randn(4, 3))),
}


CASES["pow.Scalar"] = Case(lambda a: 2.0**a, inputs(randn(5)), kernels=["pow"])
# Not through OpInfo: median's entry also reduces the whole tensor, which
# stays an eager fallback.
CASES["median.dim"] = Case(lambda a: torch.median(a, 1), inputs(randn(3, 5)), kernels=["median"])
# Not through OpInfo: its value tensor's gradient takes _unique, an eager
# fallback; the gradient of self does not.
# Forward AD's kernels for glu and its backward, as their formulas call them
# (torch.func.jvp of glu, and of its gradient).
CASES["glu_jvp"] = Case(
    lambda x, dx: torch.ops.aten.glu_jvp(F.glu(x, 1), x, dx, 1),
    inputs(randn(3, 4), randn(3, 4)),
    grad=False,
)
CASES["glu_backward_jvp"] = Case(
    lambda x, g, dg, dx: torch.ops.aten.glu_backward_jvp(
        torch.ops.aten.glu_backward(g, x, 1), g, x, dg, dx, 1
    ),
    inputs(randn(3, 4), randn(3, 2), randn(3, 2), randn(3, 4)),
    grad=False,
)
CASES["index_fill.int_Scalar"] = Case(
    lambda a: a.index_fill(1, torch.tensor([0, 2]).to(a.device), -1.5), inputs(randn(3, 4))
)
CASES["index_fill.int_Tensor"] = Case(
    lambda a, v: a.index_fill(0, torch.tensor([1]).to(a.device), v.detach()),
    inputs(randn(3, 4), lambda: torch.randn(())),
)


def test_every_yaml_op_has_a_case() -> None:
    declared = yaml.safe_load(YAML.read_text())
    ops = set(declared["full_codegen"])
    covered = set(CASES) | set(VIA_OPINFO) | RANDOM_OPS
    assert sorted(ops - covered) == [], "add a Case, or a VIA_OPINFO entry, for each new yaml op"
    # Cases may also cover hand-written kernels ("supported").
    assert sorted(covered - ops - set(declared["supported"])) == []
    assert len(covered) == len(CASES) + len(VIA_OPINFO) + len(RANDOM_OPS)


@pytest.mark.parametrize("name", sorted(VIA_OPINFO))
def test_op_reached_through_opinfo(name: str, lazy: torch.device) -> None:
    """The OpInfo claimed for a yaml op really drives that op's lazy kernel."""
    op = opinfo_entry(*VIA_OPINFO[name])
    kernel = f"lazy::{name.split('.')[0]}"
    dtype = torch.float32 if torch.float32 in op.supported_dtypes("cpu") else torch.int64
    grad = op.supports_autograd and dtype.is_floating_point
    for sample in op.sample_inputs(REFERENCE_DEVICE, dtype, requires_grad=grad):
        run_sample(op, sample, lazy)
        if lazyfuse.metrics.counter_value(kernel) > 0:
            return
    pytest.fail(f"no {VIA_OPINFO[name]} sample reached {kernel}")


def _as_tuple(out: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_eager(name: str, lazy: torch.device) -> None:
    case = CASES[name]
    torch.manual_seed(0)
    eager_inputs = [t.to(REFERENCE_DEVICE) for t in case.inputs()]
    lazy_inputs = [t.to(lazy) for t in eager_inputs]
    needs_grad = [case.grad and t.is_floating_point() for t in eager_inputs]
    for tensors in (eager_inputs, lazy_inputs):
        for t, flag in zip(tensors, needs_grad, strict=True):
            t.requires_grad_(flag)

    eager_out = _as_tuple(case.fn(*eager_inputs))
    lazy_out = _as_tuple(case.fn(*lazy_inputs))
    differentiable = [o for o in eager_out if o.requires_grad]
    if differentiable:
        weights = [torch.randn_like(o) for o in differentiable]
        sum(((o * w).sum() for o, w in zip(differentiable, weights, strict=True))).backward()
        lazy_diff = [o for o in lazy_out if o.requires_grad]
        sum(((o * w.to(lazy)).sum() for o, w in zip(lazy_diff, weights, strict=True))).backward()
    lazyfuse.mark_step()

    for e, z in zip(eager_out, lazy_out, strict=True):
        assert z.device.type == "lazy"
        torch.testing.assert_close(z.cpu(), e.detach().cpu())
    for e, z in zip(eager_inputs, lazy_inputs, strict=True):
        if e.grad is not None:
            torch.testing.assert_close(z.grad.cpu(), e.grad.cpu())
    if differentiable:
        assert any(e.grad is not None for e in eager_inputs)

    counters = lazyfuse.metrics.counters()
    assert lazyfuse.metrics.fallback_counts() == {}
    for kernel in case.kernels or [name.split(".")[0]]:
        assert counters.get(f"lazy::{kernel}", 0) > 0, f"{kernel} never reached lazyfuse"


def test_copy_accepts_a_source_on_any_device(lazy: torch.device) -> None:
    target = torch.zeros(3, 4, dtype=torch.float64).to(lazy)
    target.copy_(torch.arange(4, dtype=torch.float32))  # CPU source, broadcast and cast
    lazy_source = torch.ones(3, 4).to(lazy)
    other = torch.zeros(3, 4).to(lazy)
    other.copy_(lazy_source * 2)
    lazyfuse.mark_step()
    expected = torch.arange(4, dtype=torch.float64).expand(3, 4)
    torch.testing.assert_close(target.cpu(), expected)
    torch.testing.assert_close(other.cpu(), torch.full((3, 4), 2.0))
    assert lazyfuse.metrics.fallback_counts() == {}


def test_copy_into_an_eager_tensor(lazy: torch.device) -> None:
    # Functionalization refuses a functional source for a plain destination
    # (it exempts only XLA); DDP's parameter check does exactly this.
    source = torch.arange(6.0).reshape(2, 3).to(lazy) * 2
    target = torch.zeros(2, 3, dtype=torch.float64)
    returned = target.copy_(source)
    assert returned is target
    torch.testing.assert_close(target, torch.arange(6.0, dtype=torch.float64).reshape(2, 3) * 2)
    column = torch.zeros(3)
    column.copy_(source[1])
    torch.testing.assert_close(column, torch.tensor([6.0, 8.0, 10.0]))


def test_functionalize_keeps_its_own_copy_rules() -> None:
    # lazyfuse takes over copy_ under functionalization only for lazy sources.
    def fill(x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros_like(x)
        y.copy_(x * 2)
        return y

    x = torch.arange(3.0)
    torch.testing.assert_close(torch.func.functionalize(fill)(x), x * 2)
    plain = torch.zeros(3)

    def leak(x: torch.Tensor) -> torch.Tensor:
        plain.copy_(x)
        return x

    with pytest.raises(RuntimeError, match="mutating a non-functional tensor"):
        torch.func.functionalize(leak)(x)


def test_creation_directly_on_the_lazy_device(lazy: torch.device) -> None:
    made = {
        "arange": torch.arange(2, 11, 3, device=lazy),
        "arange_float": torch.arange(0.0, 1.0, 0.25, device=lazy),
        "full": torch.full((2, 3), 1.5, device=lazy),
        "zeros": torch.zeros(4, dtype=torch.int32, device=lazy),
        "ones": torch.ones(2, 2, device=lazy),
        "linspace": torch.linspace(-1.0, 2.0, 7, device=lazy),
        "linspace_float64": torch.linspace(0, 1, 5, dtype=torch.float64, device=lazy),
        "linspace_int": torch.linspace(0, 10, 4, dtype=torch.int64, device=lazy),
        "linspace_one": torch.linspace(3.0, 5.0, 1, device=lazy),
        "linspace_empty": torch.linspace(3.0, 5.0, 0, device=lazy),
        "logspace": torch.logspace(0, 2, 5, device=lazy),
        "logspace_base2": torch.logspace(-1, 3, 4, base=2.0, device=lazy),
    }
    expected = {
        "arange": torch.arange(2, 11, 3),
        "arange_float": torch.arange(0.0, 1.0, 0.25),
        "full": torch.full((2, 3), 1.5),
        "zeros": torch.zeros(4, dtype=torch.int32),
        "ones": torch.ones(2, 2),
        "linspace": torch.linspace(-1.0, 2.0, 7),
        "linspace_float64": torch.linspace(0, 1, 5, dtype=torch.float64),
        "linspace_int": torch.linspace(0, 10, 4, dtype=torch.int64),
        "linspace_one": torch.linspace(3.0, 5.0, 1),
        "linspace_empty": torch.linspace(3.0, 5.0, 0),
        "logspace": torch.logspace(0, 2, 5),
        "logspace_base2": torch.logspace(-1, 3, 4, base=2.0),
    }
    lazyfuse.mark_step()
    for name, tensor in made.items():
        assert tensor.device.type == "lazy", name
        torch.testing.assert_close(tensor.cpu(), expected[name], msg=name, rtol=0, atol=0)
    assert lazyfuse.metrics.fallback_counts() == {}


def test_linspace_with_lazy_bounds_and_bad_steps(lazy: torch.device) -> None:
    # The Tensor overloads read their bounds (a sync, as on eager CUDA) and
    # then take the scalar path; a negative count raises torch's own error.
    start, end = torch.tensor(1.0).to(lazy), torch.tensor(4.0).to(lazy)
    made = torch.linspace(start, end, 4, device=lazy) * 2
    torch.testing.assert_close(made.cpu(), torch.linspace(1.0, 4.0, 4) * 2, rtol=0, atol=0)
    assert "aten::linspace.out" not in lazyfuse.metrics.fallback_counts()
    for make in (torch.linspace, torch.logspace):
        out = torch.empty(0, device=lazy)
        for kwargs in ({"device": lazy}, {"out": out}):  # torch checks, before lazyfuse
            with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
                make(0.0, 1.0, -1, **kwargs)
        torch.testing.assert_close(make(0.0, 1.0, 3, out=out).cpu(), make(0.0, 1.0, 3))
    torch.testing.assert_close(torch.linspace(0, 1, 3, device=lazy).cpu(), torch.linspace(0, 1, 3))


def test_advanced_indexing_reads_and_writes(lazy: torch.device) -> None:
    x = torch.arange(12.0).view(3, 4)
    rows, cols = torch.tensor([0, 2]), torch.tensor([1, 3])
    lazy_x = x.to(lazy)
    picked = lazy_x[rows.to(lazy), cols.to(lazy)]
    mixed = lazy_x[:, cols]  # a CPU index, as eager CUDA also accepts
    written = lazy_x.clone()
    written[rows.to(lazy)] = torch.tensor(-1.0).to(lazy)
    accumulated = (
        torch.zeros(5)
        .to(lazy)
        .index_put_((torch.tensor([0, 0, 3]).to(lazy),), torch.ones(3).to(lazy), accumulate=True)
    )
    lazyfuse.mark_step()
    torch.testing.assert_close(picked.cpu(), x[rows, cols])
    torch.testing.assert_close(mixed.cpu(), x[:, cols])
    expected = x.clone()
    expected[rows] = -1.0
    torch.testing.assert_close(written.cpu(), expected)
    torch.testing.assert_close(accumulated.cpu(), torch.tensor([2.0, 0.0, 0.0, 1.0, 0.0]))
    assert lazyfuse.metrics.fallback_counts() == {}


def test_boolean_mask_indexing_syncs_once_and_counts_it(lazy: torch.device) -> None:
    x = torch.tensor([3.0, -1.0, 4.0, -1.5])
    lazy_x = x.to(lazy)
    selected = lazy_x[lazy_x > 0]
    torch.testing.assert_close(selected.cpu(), x[x > 0])
    assert lazyfuse.metrics.counter_value("LazyFuseDataDependentSync") == 1
    assert lazyfuse.metrics.fallback_counts() == {}


@pytest.mark.parametrize(
    "points", [[2, 5], [0, 0, 9], [], 3], ids=["indices", "repeated", "none", "sections"]
)
def test_tensor_split_with_lazy_split_points_syncs_once(lazy: torch.device, points: object) -> None:
    # Eager refuses split points that are not on the CPU; on the lazy device
    # they are read on the host, counted like a boolean mask's nonzero.
    x = torch.randn(10, 3, requires_grad=True)
    lazy_x = x.detach().to(lazy).requires_grad_()
    cpu_points = torch.tensor(points, dtype=torch.long)
    expected = torch.tensor_split(x, cpu_points)
    actual = torch.tensor_split(lazy_x, cpu_points.to(lazy))
    assert lazyfuse.metrics.counter_value("LazyFuseDataDependentSync") == 1
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a.cpu(), e)
    weights = [torch.randn_like(e) for e in expected]
    torch.autograd.backward(expected, weights)
    torch.autograd.backward(actual, [w.to(lazy) for w in weights])
    torch.testing.assert_close(lazy_x.grad.cpu(), x.grad)
    # CPU split points need no sync, as in eager.
    torch.tensor_split(lazy_x, cpu_points)
    assert lazyfuse.metrics.counter_value("LazyFuseDataDependentSync") == 1
    assert lazyfuse.metrics.fallback_counts() == {}


def test_tensor_split_points_keep_eager_checks(lazy: torch.device) -> None:
    x = torch.randn(6).to(lazy)
    with pytest.raises(RuntimeError, match="to have dtype of long, but got Float"):
        torch.tensor_split(x, torch.tensor([1.0, 2.0]).to(lazy))
    with pytest.raises(RuntimeError, match="but got a tensor with 2 dims"):
        torch.tensor_split(x, torch.tensor([[1, 2]]).to(lazy))
    assert len(torch.tensor_split(x, torch.tensor([1, 4]).to(lazy))) == 3


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("lengths", ["cpu", "lazy", "tuple"])
def test_ctc_loss_takes_length_tensors_where_eager_does(
    lazy: torch.device, engine: str, reduction: str, lengths: str
) -> None:
    """Eager takes input and target lengths as CPU tensors (cuDNN wants them
    there); lazy log-probs must too, forward and backward."""
    torch.manual_seed(0)
    log_probs = torch.randn(10, 2, 5).log_softmax(2)
    targets = torch.randint(1, 5, (2, 4))
    input_lengths, target_lengths = torch.tensor([10, 9]), torch.tensor([4, 3])

    def loss(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        probs = log_probs.detach().to(device).requires_grad_()
        il, tl = input_lengths, target_lengths
        if lengths == "lazy":
            il, tl = il.to(device), tl.to(device)
        elif lengths == "tuple":
            il, tl = tuple(il.tolist()), tuple(tl.tolist())
        out = F.ctc_loss(probs, targets.to(device), il, tl, reduction=reduction)
        out.sum().backward()
        return out, probs.grad

    expected = loss(torch.device("cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # _ctc_loss runs through the eager fallback
        got = loss(lazy)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e)
