"""lazyfuse.autocast: CUDA's autocast policy on lazy tensors, and GradScaler.

References are eager CPU computations with the same casts written by hand.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from conftest import graphs_executed

LOW = (torch.bfloat16, torch.float16)


def _lazy_randn(lazy: torch.device, *shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(lazy)


# (name, call on lazy float32 tensors made by `t(*shape)`, expected dtype or
# "low" for the region's dtype)
def _policy_cases() -> list[tuple[str, Callable[..., torch.Tensor], object]]:
    cases: list[tuple[str, Callable[..., torch.Tensor], object]] = [
        ("mm", lambda t: torch.mm(t(3, 4), t(4, 5)), "low"),
        ("matmul", lambda t: t(2, 3, 4) @ t(4, 5), "low"),
        ("bmm", lambda t: torch.bmm(t(2, 3, 4), t(2, 4, 5)), "low"),
        ("baddbmm", lambda t: torch.baddbmm(t(2, 3, 5), t(2, 3, 4), t(2, 4, 5)), "low"),
        ("addmm", lambda t: torch.addmm(t(5), t(3, 4), t(4, 5)), "low"),
        ("addmv", lambda t: torch.addmv(t(3), t(3, 4), t(4)), "low"),
        ("mv", lambda t: torch.mv(t(3, 4), t(4)), "low"),
        ("linear", lambda t: F.linear(t(3, 4), t(5, 4), t(5)), "low"),
        ("einsum", lambda t: torch.einsum("ij,jk->ik", t(3, 4), t(4, 5)), "low"),
        ("conv1d", lambda t: F.conv1d(t(1, 2, 8), t(3, 2, 3)), "low"),
        ("conv2d", lambda t: F.conv2d(t(1, 2, 6, 6), t(3, 2, 3, 3), t(3)), "low"),
        ("conv_transpose2d", lambda t: F.conv_transpose2d(t(1, 2, 4, 4), t(2, 3, 3, 3)), "low"),
        ("prelu", lambda t: F.prelu(t(2, 3, 4), t(3)), "low"),
        (
            "scaled_dot_product_attention",
            lambda t: F.scaled_dot_product_attention(t(1, 2, 4, 8), t(1, 2, 4, 8), t(1, 2, 4, 8)),
            "low",
        ),
        ("softmax", lambda t: torch.softmax(t(3, 4).bfloat16(), -1), torch.float32),
        ("log_softmax", lambda t: F.log_softmax(t(3, 4).half(), -1), torch.float32),
        ("softmax dtype given", lambda t: t(3, 4).softmax(-1, dtype=torch.float64), torch.float64),
        ("sum", lambda t: t(3, 4).bfloat16().sum(), torch.float32),
        ("sum dim", lambda t: t(3, 4).half().sum(1), torch.float32),
        ("cumsum", lambda t: t(3, 4).bfloat16().cumsum(0), torch.float32),
        ("prod", lambda t: t(3, 4).bfloat16().prod(1), torch.float32),
        ("layer_norm", lambda t: F.layer_norm(t(3, 4).bfloat16(), (4,)), torch.float32),
        ("group_norm", lambda t: F.group_norm(t(2, 4, 3).half(), 2), torch.float32),
        ("mse_loss", lambda t: F.mse_loss(t(3, 4).bfloat16(), t(3, 4)), torch.float32),
        ("l1_loss", lambda t: F.l1_loss(t(3, 4).bfloat16(), t(3, 4)), torch.float32),
        ("smooth_l1_loss", lambda t: F.smooth_l1_loss(t(3, 4).half(), t(3, 4)), torch.float32),
        ("huber_loss", lambda t: F.huber_loss(t(3, 4).half(), t(3, 4)), torch.float32),
        (
            "cross_entropy",
            lambda t: F.cross_entropy(t(3, 5).bfloat16(), torch.tensor([0, 4, 2]).to(t(1).device)),
            torch.float32,
        ),
        (
            "nll_loss",
            lambda t: F.nll_loss(t(3, 5).half(), torch.tensor([0, 4, 2]).to(t(1).device)),
            torch.float32,
        ),
        (
            "binary_cross_entropy_with_logits",
            lambda t: F.binary_cross_entropy_with_logits(t(3, 4).bfloat16(), t(3, 4).sigmoid()),
            torch.float32,
        ),
        (
            "kl_div",
            lambda t: F.kl_div(t(3, 4).bfloat16(), t(3, 4).softmax(-1), reduction="sum"),
            torch.float32,
        ),
        ("softplus", lambda t: F.softplus(t(3, 4).bfloat16()), torch.float32),
        ("pow", lambda t: torch.pow(t(3, 4).bfloat16(), 2), torch.float32),
        ("logsumexp", lambda t: torch.logsumexp(t(3, 4).half(), 1), torch.float32),
        (
            "cosine_similarity",
            lambda t: F.cosine_similarity(t(3, 4).half(), t(3, 4)),
            torch.float32,
        ),
        ("norm", lambda t: t(3, 4).bfloat16().norm(), torch.float32),
        (
            "addcmul promotes",
            lambda t: torch.addcmul(t(3).half(), t(3), t(3).half()),
            torch.float32,
        ),
        ("atan2 promotes", lambda t: torch.atan2(t(3).bfloat16(), t(3).bfloat16()), torch.bfloat16),
        ("dot promotes", lambda t: torch.dot(t(3).bfloat16(), t(3)), torch.float32),
        # Off the lists: computed as the inputs are.
        ("relu untouched", lambda t: torch.relu(t(3, 4)), torch.float32),
        ("add untouched", lambda t: t(3).bfloat16() + t(3).bfloat16(), torch.bfloat16),
        ("float64 mm untouched", lambda t: t(3, 4).double() @ t(4, 2).double(), torch.float64),
    ]
    for name in ("acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2"):
        cases.append(
            (name, lambda t, n=name: getattr(torch, n)(t(4).sigmoid().bfloat16()), torch.float32)
        )
    for name in ("log1p", "reciprocal", "rsqrt", "sinh", "tan"):
        cases.append(
            (name, lambda t, n=name: getattr(torch, n)(t(4).sigmoid().half()), torch.float32)
        )
    return cases


POLICY_CASES = _policy_cases()
# Ops that fall back to eager with or without autocast: their dtype is still
# checked here; their lowering is a coverage gap (docs/ops.md).
FALLS_BACK_ANYWAY = {
    "prelu": "aten::_prelu_kernel has no lowering",
    "smooth_l1_loss": "aten::smooth_l1_loss has no lowering",
    "huber_loss": "aten::huber_loss has no lowering",
}


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
@pytest.mark.parametrize(
    ("name", "call", "expected"), POLICY_CASES, ids=[c[0] for c in POLICY_CASES]
)
def test_policy_output_dtype(
    lazy: torch.device, dtype: torch.dtype, name: str, call: Callable[..., object], expected: object
) -> None:
    torch.manual_seed(0)
    with lazyfuse.autocast(dtype=dtype):
        out = call(lambda *shape: _lazy_randn(lazy, *shape))
    assert out.dtype == (dtype if expected == "low" else expected), name
    lazyfuse.mark_step()
    assert torch.isfinite(out.cpu().float()).all(), name
    if name not in FALLS_BACK_ANYWAY:
        assert lazyfuse.metrics.fallback_counts() == {}, name


def test_every_list_entry_of_this_torch_has_the_policy_kernel() -> None:
    entries = lazyfuse._C._autocast_policy()
    assert len(entries) >= 100
    kinds = {kind for _, kind in entries}
    assert kinds == {"lower_precision", "float32", "float32_opt_dtype", "promote", "banned"}
    for name, _ in entries:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastIPU"), name


def test_values_match_eager_casts_by_hand(lazy: torch.device) -> None:
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with lazyfuse.autocast(dtype=torch.bfloat16):
        out = torch.softmax(a.to(lazy) @ b.to(lazy), -1)
    expected = torch.softmax((a.bfloat16() @ b.bfloat16()).float(), -1)
    torch.testing.assert_close(out.cpu(), expected)


def test_regions_nest_and_restore(lazy: torch.device) -> None:
    x = _lazy_randn(lazy, 2, 2)
    assert not lazyfuse.amp.is_autocast_enabled()
    with lazyfuse.autocast(dtype=torch.float16):
        assert (x @ x).dtype == torch.float16
        with lazyfuse.autocast(enabled=False):
            assert (x @ x).dtype == torch.float32
            with lazyfuse.autocast(dtype=torch.bfloat16):
                assert (x @ x).dtype == torch.bfloat16
                assert lazyfuse.amp.get_autocast_dtype() == torch.bfloat16
        assert (x @ x).dtype == torch.float16
    assert (x @ x).dtype == torch.float32
    with pytest.raises(RuntimeError):
        with lazyfuse.autocast(dtype=torch.bfloat16):
            raise RuntimeError("leaves the region")
    assert not lazyfuse.amp.is_autocast_enabled() and (x @ x).dtype == torch.float32

    @lazyfuse.autocast(dtype=torch.bfloat16)
    def project(t: torch.Tensor) -> torch.Tensor:
        return t @ t

    assert project(x).dtype == torch.bfloat16


def test_torch_autocast_api_answers_for_the_lazy_device(lazy: torch.device) -> None:
    # Model code asks torch's API with a tensor's device.type: transformers'
    # maybe_autocast calls is_autocast_enabled(device_type), then
    # torch.autocast(device_type, enabled=False) to force float32. For "lazy"
    # both raised (HF Llama's rotary embedding, with some transformers).
    x = _lazy_randn(lazy, 2, 2)
    kind = x.device.type
    assert torch.is_autocast_enabled(kind) is False
    with torch.autocast(kind, dtype=torch.float16):
        assert torch.is_autocast_enabled(kind) and lazyfuse.amp.is_autocast_enabled()
        assert torch.get_autocast_dtype(kind) == torch.float16
        assert (x @ x).dtype == torch.float16
        with torch.autocast(kind, enabled=False):
            assert not torch.is_autocast_enabled(kind)
            assert (x @ x).dtype == torch.float32
        assert (x @ x).dtype == torch.float16
        assert not torch.is_autocast_enabled("cpu")  # each device keeps its own state
    assert not torch.is_autocast_enabled(kind) and (x @ x).dtype == torch.float32
    with lazyfuse.autocast(dtype=torch.bfloat16):
        assert torch.is_autocast_enabled(device_type=kind)
        assert torch.get_autocast_dtype(kind) == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled(kind)

    @torch.autocast(kind, dtype=torch.bfloat16)
    def project(t: torch.Tensor) -> torch.Tensor:
        return t @ t

    assert project(x).dtype == torch.bfloat16
    try:
        from transformers.utils.generic import maybe_autocast  # transformers 5 and later
    except ImportError:
        return
    with torch.autocast(kind, dtype=torch.float16):
        with maybe_autocast(device_type=kind, enabled=False):
            assert (x @ x).dtype == torch.float32


def test_cpu_tensors_in_a_region_are_untouched(lazy: torch.device) -> None:
    with lazyfuse.autocast(dtype=torch.bfloat16):
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.float32


def test_bad_dtype_and_banned_op_say_why(lazy: torch.device) -> None:
    with pytest.raises(ValueError, match="bfloat16, torch.float16"):
        lazyfuse.autocast(dtype=torch.int32)
    p = torch.rand(4).to(lazy)
    with lazyfuse.autocast(dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="binary_cross_entropy: unsafe to autocast"):
            F.binary_cross_entropy(p, p)
        # The process stays usable, and so does the region.
        assert (p @ p).dtype == torch.bfloat16


# ---- training next to eager CPU with the same casts by hand ----


def _mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 3))


def _mlp_by_hand(model: torch.nn.Sequential, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    first, act, last = model
    h = F.linear(x.to(dtype), first.weight.to(dtype), first.bias.to(dtype))
    return F.linear(act(h), last.weight.to(dtype), last.bias.to(dtype))


def _encoder_layer() -> torch.nn.TransformerEncoderLayer:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)


def _encoder_by_hand(
    layer: torch.nn.TransformerEncoderLayer, x: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    attn = layer.self_attn
    batch, length, width = x.shape
    heads = attn.num_heads
    qkv = F.linear(x.to(dtype), attn.in_proj_weight.to(dtype), attn.in_proj_bias.to(dtype))
    q, k, v = (
        t.reshape(batch, length, heads, width // heads).transpose(1, 2) for t in qkv.chunk(3, -1)
    )
    mixed = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, length, width)
    out = attn.out_proj
    x = x + F.linear(mixed, out.weight.to(dtype), out.bias.to(dtype))  # promotes to float32
    x = F.layer_norm(x, (width,), layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
    l1, l2 = layer.linear1, layer.linear2
    hidden = F.relu(F.linear(x.to(dtype), l1.weight.to(dtype), l1.bias.to(dtype)))
    x = x + F.linear(hidden, l2.weight.to(dtype), l2.bias.to(dtype))
    return F.layer_norm(x, (width,), layer.norm2.weight, layer.norm2.bias, layer.norm2.eps)


TRAINED = {
    "mlp": (_mlp, _mlp_by_hand, (16, 12), (16, 3)),
    "transformer_layer": (_encoder_layer, _encoder_by_hand, (4, 6, 16), (4, 6, 16)),
}


def _train(
    model_name: str, dtype: torch.dtype, lazy: torch.device | None, scaled: bool, steps: int = 4
) -> tuple[list[float], list[float], int]:
    make, by_hand, x_shape, y_shape = TRAINED[model_name]
    torch.manual_seed(1)
    batches = [(torch.randn(*x_shape), torch.randn(*y_shape)) for _ in range(steps)]
    model = make()
    device = lazy or torch.device("cpu")
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0**10) if scaled else None
    losses, scales = [], []
    graphs_before = graphs_executed()
    for x, y in batches:
        optimizer.zero_grad()
        if lazy is None:
            out = by_hand(model, x, dtype)
        else:
            with lazyfuse.autocast(dtype=dtype):
                out = model(x.to(lazy))
        with lazyfuse.autocast(dtype=dtype):
            loss = F.mse_loss(out, y.to(device)) if lazy else F.mse_loss(out.float(), y)
        assert loss.dtype == torch.float32
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if lazy is not None:
            lazyfuse.mark_step()
        # Read after mark_step: both are computed by then and cost no graph.
        losses.append(loss.item())
        if scaler is not None:
            scales.append(float(scaler.get_scale()))
    graphs = graphs_executed() - graphs_before
    return losses, scales, graphs


@pytest.mark.parametrize("model_name", sorted(TRAINED))
def test_bf16_training_matches_eager_casts(lazy: torch.device, model_name: str) -> None:
    expected, _, _ = _train(model_name, torch.bfloat16, None, scaled=False)
    actual, _, _ = _train(model_name, torch.bfloat16, lazy, scaled=False)
    torch.testing.assert_close(actual, expected, rtol=3e-2, atol=3e-3)
    assert lazyfuse.metrics.fallback_counts() == {}


@pytest.mark.parametrize("model_name", sorted(TRAINED))
def test_fp16_training_with_grad_scaler_matches_eager(lazy: torch.device, model_name: str) -> None:
    expected, expected_scales, _ = _train(model_name, torch.float16, None, scaled=True)
    actual, scales, graphs = _train(model_name, torch.float16, lazy, scaled=True)
    torch.testing.assert_close(actual, expected, rtol=1e-2, atol=1e-3)
    assert scales == expected_scales
    assert lazyfuse.metrics.fallback_counts() == {}
    # Per step: the scaler's one read of found_inf, then mark_step.
    assert graphs <= 2 * len(actual)


def test_grad_scaler_skips_a_step_with_inf_and_backs_off(lazy: torch.device) -> None:
    results = {}
    for device in (torch.device("cpu"), lazy):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device.type, init_scale=8.0, growth_interval=2)
        history = []
        for step in range(5):
            optimizer.zero_grad()
            scale = float("inf") if step == 1 else 1.0
            loss = (model(torch.ones(3, 4).to(device)) * scale).sum()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if device == lazy:
                lazyfuse.mark_step()
            history.append((float(scaler.get_scale()), copy.deepcopy(model.weight.detach().cpu())))
        results[device.type] = history
    for (cpu_scale, cpu_weight), (lazy_scale, lazy_weight) in zip(
        results["cpu"], results["lazy"], strict=True
    ):
        assert cpu_scale == lazy_scale
        torch.testing.assert_close(lazy_weight, cpu_weight)
    assert lazyfuse.metrics.fallback_counts() == {}
