"""Wrong values and wasted work that users found from outside, each with the
class of bug behind it: views whose base is gone mixed with scalars, dtype
promotion in ops that take tensor lists, empty indices in every indexing op,
data from the host treated as pending work, and reads of computed tensors
that ran graphs."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

import lazyfuse

OPS_YAML = Path(__file__).resolve().parents[2] / "codegen" / "lazyfuse_ops.yaml"


def counter(name: str) -> int:
    return lazyfuse.metrics.counter_value(name)


def test_view_whose_base_was_dropped_keeps_its_value(lazy: torch.device) -> None:
    other = torch.tensor(-1.0).to(lazy)
    x = torch.tensor(5.0).to(lazy)[()]  # a view; its base is not kept
    y = torch.clamp(torch.tensor(9.0).to(lazy), min=0.5, max=x)
    lazyfuse.mark_step()
    assert other.detach().cpu().item() == -1.0
    assert (x * 1).cpu().item() == 5.0
    assert y.cpu().item() == 5.0


def test_view_whose_base_was_dropped_without_other_reads(lazy: torch.device) -> None:
    x = torch.tensor(5.0).to(lazy)[()]
    y = torch.clamp(torch.tensor(9.0).to(lazy), min=0.5, max=x)
    lazyfuse.mark_step()
    assert (x * 1).cpu().item() == 5.0 and y.cpu().item() == 5.0


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "index0": lambda t: t[()],
    "select": lambda t: t[1],
    "slice": lambda t: t[1:],
    "transpose": lambda t: t.t(),
    "expand": lambda t: t.expand(2, *t.shape),
}
MIXES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "clamp_scalar_then_view": lambda a, v: torch.clamp(a, min=0.5).clamp(max=v),
    "clamp_view_then_scalar": lambda a, v: torch.clamp(a, min=v).clamp(max=9.5),
    "where_scalar": lambda a, v: torch.where(a > 0, v, 2.0),
    "add_alpha": lambda a, v: torch.add(a, v, alpha=3),
    "rsub": lambda a, v: 1.5 - v * a,
}


@pytest.mark.parametrize("mix", sorted(MIXES))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_scalar_and_tensor_mixes_on_views_across_steps(
    lazy: torch.device, view: str, mix: str
) -> None:
    base = torch.arange(1.0, 7.0).reshape(2, 3) if view != "index0" else torch.tensor(4.0)
    decoy = torch.full_like(base, -7.0)
    v_eager = VIEWS[view](base)
    a_eager = torch.linspace(-2, 9, v_eager.numel()).reshape(v_eager.shape)
    lazy_decoy = decoy.to(lazy)
    v = VIEWS[view](base.to(lazy))  # the base is dropped
    a = a_eager.to(lazy)
    first = MIXES[mix](a, v)
    lazyfuse.mark_step()
    lazy_decoy.detach().cpu()  # new device data of the same shape
    second = MIXES[mix](a, v) * 2
    torch.testing.assert_close(first.cpu(), MIXES[mix](a_eager, v_eager))
    torch.testing.assert_close(second.cpu(), MIXES[mix](a_eager, v_eager) * 2)
    torch.testing.assert_close((v * 1).cpu(), v_eager)


DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32]
LIST_OPS: dict[str, Callable[[list[torch.Tensor]], torch.Tensor]] = {
    "stack": lambda ts: torch.stack(ts),
    "stack_last": lambda ts: torch.stack(ts, -1),
    "cat": lambda ts: torch.cat(ts),
    "block_diag": lambda ts: torch.block_diag(*ts),
    # refuses mixed dtypes; lazy must refuse them the same way
    "_chunk_cat": lambda ts: torch._chunk_cat(ts, 1, 2),
}


def test_every_tensor_list_op_is_tested_for_promotion() -> None:
    import torchgen

    native = yaml.safe_load(
        (Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml").read_text()
    )
    ops = yaml.safe_load(OPS_YAML.read_text())
    ours = set(ops.get("full_codegen", []) + ops.get("supported", []) + ops.get("ir_gen", []))
    list_ops = {
        f["func"].split("(")[0]
        for f in native
        if f["func"].split("(")[0] in ours and "Tensor[]" in f["func"].split("->")[0]
    }
    tested = {name.removesuffix("_last") for name in LIST_OPS}
    assert list_ops <= tested, f"tensor-list ops without a promotion test: {list_ops - tested}"


# Lowered ops whose ATen kernel writes an argument its schema does not mark
# written (torch's SchemaInfo knows them: batch norm's running statistics in
# training): each lowering returns the written value and assigns it
# (csrc/ops/norm_functions.cpp), since a step that wrote its input would
# change it only when, and where, the step ran.
HIDDEN_WRITES_HANDLED = {"native_batch_norm"}


def test_every_lowered_op_with_a_hidden_write_is_handled() -> None:
    from torch._C import _SchemaArgType, _SchemaArgument, _SchemaInfo

    ops = yaml.safe_load(OPS_YAML.read_text())
    ours = set(ops.get("full_codegen", []) + ops.get("supported", []) + ops.get("ir_gen", []))
    hidden = set()
    for name in ours:
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base, None)
        if packet is None or (overload or "default") not in packet.overloads():
            continue
        schema = getattr(packet, overload or "default")._schema
        info = _SchemaInfo(schema)
        for argument in schema.arguments:
            if argument.name in ("training", "train"):
                info.add_argument_value(argument.name, True)
        for i, argument in enumerate(schema.arguments):
            if argument.alias_info is None and info.is_mutable(
                _SchemaArgument(_SchemaArgType.input, i)
            ):
                hidden.add(name)
    assert "native_batch_norm" in hidden  # the check sees the known one
    assert hidden <= HIDDEN_WRITES_HANDLED, (
        f"hidden writes not handled: {hidden - HIDDEN_WRITES_HANDLED}"
    )


@pytest.mark.parametrize("op", sorted(LIST_OPS))
@pytest.mark.parametrize("first", DTYPES, ids=str)
@pytest.mark.parametrize("second", DTYPES, ids=str)
def test_tensor_list_ops_promote_like_eager(
    lazy: torch.device, op: str, first: torch.dtype, second: torch.dtype
) -> None:
    a = (torch.arange(6) % 3).reshape(2, 3).to(first)
    b = (torch.arange(6) * 0.75).reshape(2, 3).to(second)
    try:
        expected = LIST_OPS[op]([a, b])
    except RuntimeError as error:
        with pytest.raises(RuntimeError, match=re.escape(str(error))):
            LIST_OPS[op]([a.to(lazy), b.to(lazy)])
        return
    got = LIST_OPS[op]([a.to(lazy), b.to(lazy)]).cpu()
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)


EMPTY = torch.tensor([], dtype=torch.long)
INDEXING: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "index_add": lambda x, i, z: x.index_add(0, i, z),
    "index_copy": lambda x, i, z: x.index_copy(0, i, z),
    "index_fill": lambda x, i, z: x.index_fill(0, i, 1.0),
    "index_select": lambda x, i, z: x.index_select(0, i),
    "gather": lambda x, i, z: x.gather(0, i.view(0, 1).expand(0, 2)),
    "scatter": lambda x, i, z: x.scatter(0, i.view(0, 1).expand(0, 2), z),
    "scatter_add": lambda x, i, z: x.scatter_add(0, i.view(0, 1).expand(0, 2), z),
    "index": lambda x, i, z: x[i],
    "index_put": lambda x, i, z: x.index_put((i,), z),
    "index_put_accumulate": lambda x, i, z: x.index_put((i,), z, accumulate=True),
    "take": lambda x, i, z: x.take(i),
    "embedding": lambda x, i, z: torch.nn.functional.embedding(i, x),
}


@pytest.mark.parametrize("op", sorted(INDEXING))
def test_empty_index_in_indexing_ops_and_their_backward(lazy: torch.device, op: str) -> None:
    x = torch.randn(3, 2, requires_grad=True)
    source = torch.zeros(0, 2)
    expected = INDEXING[op](x, EMPTY, source)
    expected.sum().backward()
    lazy_x = x.detach().to(lazy).requires_grad_()
    got = INDEXING[op](lazy_x, EMPTY.to(lazy), source.to(lazy))
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), expected.detach())
    torch.testing.assert_close(lazy_x.grad.cpu(), x.grad)


def test_data_from_the_host_is_not_pending_work(lazy: torch.device) -> None:
    weights = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=lazy)
    bias = torch.randn(2).to(lazy)

    def step() -> torch.Tensor:
        return (weights @ bias).relu() + 1

    out = step()
    lazyfuse.mark_step()
    compiled = counter("UncachedCompile")
    for _ in range(2):
        out = step()
        lazyfuse.mark_step()
    assert counter("UncachedCompile") == compiled, lazyfuse.debug.compile_log()
    torch.testing.assert_close(out.cpu(), (weights.cpu() @ bias.cpu()).relu() + 1)


def test_fresh_data_is_no_graph_result(lazy: torch.device) -> None:
    torch.tensor([1.0, 2.0], device=lazy)
    x = torch.ones(3).to(lazy)
    lazyfuse.mark_step()
    assert counter("LazyFuseGraphsExecuted") == 0
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]


def test_reading_a_computed_tensor_runs_no_graph(lazy: torch.device) -> None:
    t = torch.randn(4).to(lazy) * 2
    lazyfuse.mark_step()
    executed = counter("LazyFuseGraphsExecuted")
    compiled = counter("UncachedCompile")
    a = t.detach().cpu()
    b = t.cpu()
    c = torch.ops.aten.alias(t).cpu()
    assert counter("LazyFuseGraphsExecuted") == executed
    assert counter("UncachedCompile") == compiled
    assert torch.equal(a, b) and torch.equal(b, c)


class TiedLM(torch.nn.Module):
    """A GPT-2-style model: the output head reuses the embedding, and one
    block is registered twice."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(11, 8)
        self.block = torch.nn.Linear(8, 8)
        self.blocks = torch.nn.ModuleList([self.block, torch.nn.Tanh(), self.block])
        self.lm_head = torch.nn.Linear(8, 11, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.wte(ids)
        for layer in self.blocks:
            h = layer(h)
        return self.lm_head(h)


def test_tied_and_shared_parameters_stay_shared(lazy: torch.device) -> None:
    torch.manual_seed(0)
    model = TiedLM()
    eager = TiedLM()
    eager.load_state_dict(model.state_dict())
    weight = model.wte.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # built before .to()
    model.to(lazy)
    assert model.lm_head.weight is model.wte.weight is weight
    assert model.blocks[0] is model.blocks[2]
    assert len(list(model.parameters())) == len(list(eager.parameters())) == 3
    ids = torch.tensor([[1, 4, 9, 2], [0, 3, 3, 10]])
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(3):
        for m, opt, x in ((model, optimizer, ids.to(lazy)), (eager, eager_opt, ids)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x).flatten(0, 1), x.flatten()).backward()
            opt.step()
        lazyfuse.mark_step()
        torch.testing.assert_close(model.wte.weight.grad.cpu(), eager.wte.weight.grad)
    torch.testing.assert_close(model.wte.weight.detach().cpu(), eager.wte.weight.detach())
    model.to("cpu")
    assert model.lm_head.weight is model.wte.weight is weight
    assert weight.device.type == "cpu"


@pytest.mark.parametrize("shape", [(), (3,)], ids=["0-dim", "1-dim"])
@pytest.mark.parametrize("read", ["item", "cpu", "print"])
def test_a_tensor_read_mid_step_stays_usable_in_later_steps(
    lazy: torch.device, shape: tuple[int, ...], read: str
) -> None:
    # Found through GradScaler: reading the scale mid-step left the tensor's
    # IR in place next to its data, so mark_step skipped it, its device data
    # was released with the step, and the next read raised "device data of a
    # finished step reached a graph". Consumers also recomputed its graph.
    for step in range(3):
        y = torch.full(shape, 3.0).to(lazy) * (step + 2)
        value = y.sum() if read == "item" else y
        if read == "item":
            value.item()
        elif read == "cpu":
            value.cpu()
        else:
            repr(value)
        assert "aten::mul" not in lazyfuse.debug.ir_text([value + 1])
        lazyfuse.mark_step()
        expected = torch.full(shape, 3.0 * (step + 2))
        torch.testing.assert_close((y * 1).cpu(), expected)
        torch.testing.assert_close(
            (value * 1).cpu(), expected.sum() if read == "item" else expected
        )


STRIDED_SOURCES: dict[str, Callable[[torch.Tensor, torch.device], torch.Tensor]] = {
    # host data whose strides are not contiguous
    "transposed host data": lambda x, lazy: x.transpose(0, 1).to(lazy),
    # a graph result produced by a view step, kept as device data
    "transposed step result": lambda x, lazy: x.to(lazy).transpose(0, 1),
}


@pytest.mark.parametrize("source", sorted(STRIDED_SOURCES))
@pytest.mark.parametrize("k", [1, 2, 3, -1])
def test_device_data_is_contiguous_whatever_its_source(
    lazy: torch.device, source: str, k: int
) -> None:
    # Found by the OpInfo sweep: rot90's gradient was wrong when the incoming
    # gradient was a transposed tensor. ATen kernels that run on bare lazy
    # tensors (rot90 ends in transpose_) rewrite the tensor's contiguous
    # description in place, which read strided device data in the wrong order.
    x = torch.randn(3, 4, 5)
    value = STRIDED_SOURCES[source](x, lazy)
    lazyfuse.mark_step()
    expected = torch.rot90(x.transpose(0, 1), k)
    torch.testing.assert_close(torch.rot90(value, k).cpu(), expected)
    leaf = torch.randn(4, 3, 5, requires_grad=True)
    lazy_leaf = leaf.detach().to(lazy).requires_grad_()
    torch.rot90(leaf, k).backward(expected)
    torch.rot90(lazy_leaf, k).backward(torch.rot90(value, k))
    torch.testing.assert_close(lazy_leaf.grad.cpu(), leaf.grad)
    assert lazyfuse.metrics.fallback_counts() == {}


def test_float64_batch_norm_without_running_stats_saves_float64_stats(
    lazy: torch.device,
) -> None:
    # torch's compute_shape_native_batch_norm gave the saved mean and inverse
    # std the default dtype, so the backward failed on mixed dtypes.
    x = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    lazy_x = x.detach().to(lazy).requires_grad_()
    expected = torch.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    actual = torch.native_batch_norm(lazy_x, None, None, None, None, True, 0.1, 1e-5)
    assert [t.dtype for t in actual] == [t.dtype for t in expected]
    expected[0].sum().backward()
    actual[0].sum().backward()
    torch.testing.assert_close(lazy_x.grad.cpu(), x.grad)


@pytest.mark.parametrize("target_shape", [(5,), (1, 5)], ids=["vector", "row"])
def test_addbmm_into_a_broadcast_target_raises_naming_the_op(
    lazy: torch.device, target_shape: tuple[int, ...]
) -> None:
    # Eager CPU resizes such a target to (3, 5) (README, "Known gaps"); an
    # in-place op must not grow its target, so lazyfuse raises instead, as
    # eager does for addmm_ and baddbmm_, and the target keeps its value.
    b1, b2 = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    target = torch.ones(target_shape).to(lazy)
    with pytest.raises(RuntimeError, match=r"aten::addbmm_.*\[3, 5\]"):
        target.addbmm_(b1.to(lazy), b2.to(lazy))
    torch.testing.assert_close(target.cpu(), torch.ones(target_shape))
    fitting = torch.ones(3, 5).to(lazy).addbmm_(b1.to(lazy), b2.to(lazy))
    torch.testing.assert_close(fitting.cpu(), torch.ones(3, 5).addbmm_(b1, b2))


# Tensors whose memory on the backing device is laid out unlike the lazy
# tensor's contiguous metadata: views that run as aliases of their base, a
# matmul every reader transposes (computed transposed), a fused kernel's
# output, and a view of a view.
LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transpose": lambda x: x.t(),
    "column slice": lambda x: x[:, 1:3],
    "row slice": lambda x: x[1:],
    "select": lambda x: x[1],
    "permuted view of a view": lambda x: x.view(3, 2, 3)[:, 1:].permute(2, 0, 1),
    "expand": lambda x: x[:1].expand(3, 6),
    "transposed matmul": lambda x: (x.t() @ x[:, :3]).t(),
    "fused output": lambda x: x.t() * 2 + 1,
}


def _storage_reads(t: torch.Tensor) -> list[torch.Tensor]:
    """as_strided and as_strided_scatter with coordinates from t's metadata,
    as user code computes them."""
    first = t.narrow(0, 0, 1)
    flat = t.flatten()
    return [
        t.as_strided(t.size(), t.stride(), t.storage_offset()),
        flat.as_strided((2, 2), (1, 1), flat.storage_offset() + 1),
        torch.as_strided_scatter(t, first * 2, first.size(), t.stride(), t.storage_offset()),
    ]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_as_strided_reads_a_tensor_as_its_metadata_describes(
    layout: str, lazy: torch.device, engine: str
) -> None:
    # A lazy tensor reports a contiguous layout of its own whatever memory it
    # runs on, as eager's contiguous copy of it has.
    x = torch.arange(18.0).view(3, 6)
    got = _storage_reads(LAYOUTS[layout](x.to(lazy)))
    expected = _storage_reads(LAYOUTS[layout](x).contiguous())
    for name, g, e in zip(("same", "window", "scatter"), got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0, msg=f"{layout}: {name}")


# Ops whose optional tensor operands (Tensor? in the schema) eager lets a
# 0-dim CPU tensor fill, as it does any tensor operand. (The others: a
# norm's or a convolution's weight and bias, a loss's weight, must have a
# size, and a loss expands its weight first.)
OPTIONAL_SCALAR_OPERANDS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "clamp_min": lambda x, s: x.clamp(min=s),
    "clamp_max": lambda x, s: x.clamp(max=s),
    "clamp_both": lambda x, s: torch.clamp(x, s, s + 0.5),
    "clamp_int_by_float": lambda x, s: (x * 4).to(torch.int64).clamp(min=s),
    "clamp_in_place": lambda x, s: x.clone().clamp_(max=s),
}


@pytest.mark.parametrize("op", sorted(OPTIONAL_SCALAR_OPERANDS))
def test_an_optional_operand_given_a_cpu_scalar_is_used(
    op: str, lazy: torch.device, engine: str
) -> None:
    # Found from outside: `x.clamp(min=torch.tensor(-0.5))` clamped nothing
    # (fused and CPU kernels) or raised "At least one of 'min' or 'max' must
    # not be None" (ATen steps): torchgen's stubs read an optional tensor
    # operand with TryGetLtcTensor, which finds no lazy tensor in a CPU one,
    # and dropped it.
    torch.manual_seed(0)
    x = torch.randn(16, requires_grad=True)
    scalar = torch.tensor(-0.25)
    expected = OPTIONAL_SCALAR_OPERANDS[op](x, scalar)
    x_lazy = x.detach().to(lazy).requires_grad_()
    got = OPTIONAL_SCALAR_OPERANDS[op](x_lazy, scalar)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected.detach(), rtol=1e-6, atol=1e-6)
    if expected.requires_grad:
        expected.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(x_lazy.grad.cpu(), x.grad, rtol=1e-6, atol=1e-6)
