"""Golden tests of the fusion planner: which steps land in which group for
the representative graphs. The planner works on the Program alone, so these
run on any backing device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from fusion_graphs import GRAPHS, parse_plan

ADAM_OPS = [
    "aten::zero",
    "aten::mul.Tensor",
    "aten::addcmul",
    "aten::sqrt",
    "aten::div.Tensor",
    "aten::add.Tensor",
    "aten::zero",
    "aten::lerp.Scalar",
    "aten::detach_copy",
    "aten::addcdiv",
    "aten::detach_copy",
]

# The fused groups of each graph, in order. The randn calls that make the
# inputs stay ATen groups and are left out here.
EXPECTED_FUSED = {
    "mlp_layer": [("view", ["aten::t_copy"]), ("pointwise", ["aten::relu"])],
    "softmax": [("reduction", ["aten::mul.Tensor", "aten::_softmax"])],
    "layer_norm": [("reduction", ["aten::native_layer_norm"])],
    "gelu_chain": [
        (
            "pointwise",
            [
                "aten::mul.Tensor",
                "aten::add.Tensor",
                "aten::gelu",
                "aten::tanh",
                "aten::mul.Tensor",
            ],
        )
    ],
    # The parameter's detached view is a result: an alias, not a copy.
    "adam_update": [("pointwise", ADAM_OPS), ("view", ["aten::detach_copy"])],
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_plan_groups(name: str, lazy: torch.device) -> None:
    groups = parse_plan(lazyfuse.debug.fusion_plan(GRAPHS[name](lazy)))
    fused = [g for g in groups if g[0] != "aten"]
    assert fused == EXPECTED_FUSED[name]


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_pointwise_tail_is_one_kernel(name: str, lazy: torch.device) -> None:
    groups = parse_plan(lazyfuse.debug.fusion_plan(GRAPHS[name](lazy)))
    last_aten = max((i for i, g in enumerate(groups) if g[0] == "aten"), default=-1)
    kernels = [g for g in groups[last_aten + 1 :] if g[0] != "view"]
    assert len(kernels) == 1, groups


def test_mlp_matmul_stays_aten(lazy: torch.device) -> None:
    groups = parse_plan(lazyfuse.debug.fusion_plan(GRAPHS["mlp_layer"](lazy)))
    assert ("aten", ["aten::addmm"]) in groups


def test_read_by_opaque_op_splits_groups(lazy: torch.device) -> None:
    # exp(x) feeds a matmul and is also the input of a later pointwise op: the
    # later op cannot join the first group, which must run before the matmul.
    x = torch.randn(8, 8, device=lazy)
    a = x.exp()
    b = a @ a
    c = (a + b).relu()
    groups = parse_plan(lazyfuse.debug.fusion_plan([c]))
    kinds = [g for g in groups if g[1] != ["aten::normal_functional"]]
    assert kinds == [
        ("pointwise", ["aten::exp"]),
        ("aten", ["aten::mm"]),
        ("pointwise", ["aten::add.Tensor", "aten::relu"]),
    ]


def test_broadcast_grows_domain(lazy: torch.device) -> None:
    bias = torch.randn(16, device=lazy)
    x = torch.randn(4, 16, device=lazy)
    y = (bias * 2).sigmoid() + x
    text = lazyfuse.debug.fusion_plan([y])
    assert "[pointwise [4,16]]: aten::mul.Tensor aten::sigmoid aten::add.Tensor" in text


def test_sibling_consumers_share_a_kernel(lazy: torch.device) -> None:
    x = torch.randn(32, device=lazy)
    lazyfuse.mark_step()
    a = x * 2
    b = x + 1
    groups = parse_plan(lazyfuse.debug.fusion_plan([a, b]))
    assert groups == [("pointwise", ["aten::mul.Tensor", "aten::add.Tensor"])]


def test_row_reduction_epilogue(lazy: torch.device) -> None:
    x = torch.randn(8, 64, device=lazy)
    lazyfuse.mark_step()
    y = (x * x).sum(-1).sqrt()
    groups = parse_plan(lazyfuse.debug.fusion_plan([y]))
    assert groups == [("reduction", ["aten::mul.Tensor", "aten::sum.dim_IntList", "aten::sqrt"])]


def test_prologue_value_read_after_row_reduction_is_a_new_group(lazy: torch.device) -> None:
    x = torch.randn(8, 64, device=lazy)
    lazyfuse.mark_step()
    e = x.exp()
    s = e.sum(-1, keepdim=True)
    y = e / s
    groups = parse_plan(lazyfuse.debug.fusion_plan([y]))
    assert groups == [
        ("reduction", ["aten::exp", "aten::sum.dim_IntList"]),
        ("pointwise", ["aten::div.Tensor"]),
    ]


def test_permute_does_not_join_a_reduction_epilogue(lazy: torch.device) -> None:
    x = torch.randn(4, 5, 64, device=lazy)
    lazyfuse.mark_step()
    groups = parse_plan(lazyfuse.debug.fusion_plan([x.sum(-1).t() * 3, x.softmax(-1).view(20, 64)]))
    # The softmax's reshape is a result: an alias of the softmax's output.
    assert groups == [
        ("reduction", ["aten::sum.dim_IntList"]),
        ("pointwise", ["aten::t_copy", "aten::mul.Tensor"]),
        ("reduction", ["aten::_softmax"]),
        ("view", ["aten::view_copy"]),
    ]


def test_integer_sum_stays_aten(lazy: torch.device) -> None:
    x = torch.arange(12).reshape(3, 4).to(lazy)
    lazyfuse.mark_step()
    groups = parse_plan(lazyfuse.debug.fusion_plan([x.sum(0)]))
    assert groups == [("aten", ["aten::sum.dim_IntList"])]


def test_last_plan_after_mark_step(lazy: torch.device) -> None:
    x = torch.randn(4, 4, device=lazy)
    y = (x + 1).relu()
    lazyfuse.mark_step()
    assert "aten::add.Tensor aten::relu" in lazyfuse.debug.fusion_plan()
    assert y.cpu().min() >= 0


# Ops the planner treats as views (fusion/rules.cpp ViewRuleFor).
VIEW_OPS = {
    "aten::view_copy",
    "aten::_unsafe_view",
    "aten::alias_copy",
    "aten::detach_copy",
    "aten::unsqueeze_copy",
    "aten::squeeze_copy",
    "aten::squeeze_copy.dim",
    "aten::squeeze_copy.dims",
    "aten::expand_copy",
    "aten::permute_copy",
    "aten::t_copy",
    "aten::transpose_copy.int",
    "aten::slice_copy.Tensor",
    "aten::select_copy.int",
}


def _training_step_plan(model: torch.nn.Module, x: torch.Tensor) -> list[tuple[str, list[str]]]:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lazyfuse.mark_step()
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    lazyfuse.mark_step()
    return parse_plan(lazyfuse.debug.fusion_plan())


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_training_step_launches_no_view_only_kernel(name: str, lazy: torch.device) -> None:
    torch.manual_seed(0)
    if name == "mlp":
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
        )
        x = torch.randn(16, 64)
    else:
        model = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
        x = torch.randn(4, 8, 32)
    groups = _training_step_plan(model.to(lazy), x.to(lazy))
    kernels = [ops for kind, ops in groups if kind in ("pointwise", "reduction")]
    view_only = [ops for ops in kernels if set(ops) <= VIEW_OPS]
    assert view_only == [], f"view-only kernels: {view_only}"
    # The transposes of forward and backward are still there, as aliases.
    assert any(kind == "view" for kind, _ in groups), groups


@pytest.mark.parametrize("optimizer", [torch.optim.Adam, torch.optim.AdamW])
def test_a_capturable_adam_step_runs_its_bias_corrections_in_the_update_kernel(
    optimizer: type[torch.optim.Adam], lazy: torch.device
) -> None:
    # beta ** step (pow.Scalar) ran as two ATen calls per parameter, each
    # uploading beta: on an H100, 4 extra launches per parameter of a
    # replayed step (a replay needs capturable=True).
    model = torch.nn.Linear(4, 3).to(lazy)
    lr = torch.tensor(1e-3, device=lazy)
    opt = optimizer(model.parameters(), lr=lr, capturable=True)
    x = torch.randn(2, 4, device=lazy)
    for _ in range(2):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        lazyfuse.mark_step()
    aten = [ops for kind, ops in parse_plan(lazyfuse.debug.fusion_plan()) if kind == "aten"]
    assert aten == [["aten::addmm"], ["aten::mm"]], aten


def test_attention_training_runs_its_qkv_gradient_and_safe_softmax_fused(
    lazy: torch.device,
) -> None:
    # nn.MultiheadAttention selects q, k and v from one projection: their
    # gradients were three ATen select_backward calls, each zero-filling the
    # whole projection's gradient, then adds. SDPA's softmax checks its rows
    # with isneginf, which was an ATen call beside the fused softmax.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).to(lazy)
    x = torch.randn(2, 8, 32, device=lazy)
    lazyfuse.mark_step()
    layer(x).sum().backward()
    grads = [p.grad for p in layer.parameters()]
    groups = parse_plan(lazyfuse.debug.fusion_plan(grads))
    aten_ops = [op for kind, ops in groups if kind == "aten" for op in ops]
    assert "aten::select_backward" not in aten_ops and "aten::isneginf" not in aten_ops
    (qkv,) = [ops for _, ops in groups if "aten::select_backward" in ops]
    assert qkv.count("aten::select_backward") == 3


def test_linear_gelu_is_one_aten_call_and_one_kernel(lazy: torch.device) -> None:
    x, w, b, r = (torch.randn(s, device=lazy) for s in ((8, 16), (32, 16), (32,), (8, 32)))
    lazyfuse.mark_step()
    y = F.gelu(F.linear(x, w, b)) * 0.5 + r
    groups = [g for g in parse_plan(lazyfuse.debug.fusion_plan([y])) if g[0] != "view"]
    assert groups == [
        ("aten", ["aten::addmm"]),
        ("pointwise", ["aten::gelu", "aten::mul.Tensor", "aten::add.Tensor"]),
    ]


def test_a_shrinking_view_of_a_private_value_computes_only_the_view(lazy: torch.device) -> None:
    # gelu(x * 2) is read only through the slice, so its kernel runs over the
    # slice's [16, 32], computing gelu at the elements the slice reads, and
    # never writes the full [16, 64].
    x = torch.randn(16, 64, device=lazy)
    lazyfuse.mark_step()
    y = F.gelu(x * 2)[:, :32] * 3
    plan = lazyfuse.debug.fusion_plan([y])
    assert "[pointwise [16,32]]: aten::mul.Tensor aten::gelu aten::slice_copy.Tensor" in plan, plan
    assert parse_plan(plan) == [
        (
            "pointwise",
            ["aten::mul.Tensor", "aten::gelu", "aten::slice_copy.Tensor", "aten::mul.Tensor"],
        )
    ]
    # Kept as a result, the full value is computed and stored over its domain.
    g = F.gelu(x * 2)
    plan = lazyfuse.debug.fusion_plan([g[:, :32] * 3, g])
    assert "[pointwise [16,64]]" in plan, plan
    # A reduction of the view takes the shrunk group over as its prologue.
    plan = lazyfuse.debug.fusion_plan([(x * x)[2:, 5:].sum(-1)])
    assert parse_plan(plan) == [
        (
            "reduction",
            [
                "aten::mul.Tensor",
                "aten::slice_copy.Tensor",
                "aten::slice_copy.Tensor",
                "aten::sum.dim_IntList",
            ],
        )
    ], plan


def test_pointwise_work_after_a_reduction_joins_its_epilogue(lazy: torch.device) -> None:
    # SGD momentum on a bias: buf * 0.9 is its own group until the add reads
    # it with the gradient's sum; it then joins the sum's epilogue, so the
    # whole update is one kernel.
    g = torch.randn(8, 32, device=lazy)
    b = torch.randn(32, device=lazy)
    buf = torch.randn(32, device=lazy)
    new_buf = buf * 0.9 + g.sum(0)
    lazyfuse.mark_step()
    new_buf = buf * 0.9 + g.sum(0)
    plan = parse_plan(lazyfuse.debug.fusion_plan([new_buf, b - 0.1 * new_buf]))
    assert [kind for kind, _ in plan] == ["reduction"], plan
    # Over the reduction's input shape, it cannot: the epilogue runs per row.
    plan = parse_plan(lazyfuse.debug.fusion_plan([(g * 2 + g.sum(0)).exp()]))
    assert [kind for kind, _ in plan] == ["reduction", "pointwise"], plan
