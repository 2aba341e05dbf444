"""Activation checkpointing on lazy tensors: torch.utils.checkpoint and HF's
gradient_checkpointing_enable, through torch.lazy, the lazy device's runtime
module (python/lazyfuse/device_module.py)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import lazyfuse
from conftest import REFERENCE_DEVICE
from lazyfuse.metrics import track_memory


def test_torch_finds_the_lazy_device_module(lazy: torch.device) -> None:
    module = torch.get_device_module("lazy")
    assert module is lazyfuse.device_module and torch.lazy is module
    assert module.device_count() == 1 and module.is_available()
    with pytest.raises(ValueError, match="one index"):
        module.set_device(1)
    # The lazy device draws its seeds from the CPU generator.
    state = module.get_rng_state()
    first = torch.rand(4, device=lazy).cpu()
    with torch.random.fork_rng(devices=[0], device_type="lazy"):
        module.set_rng_state(state)
        again = torch.rand(4, device=lazy).cpu()
    assert torch.equal(first, again)


def block_run(
    device: torch.device, reentrant: bool, preserve: bool, p: float, checkpointed: bool = True
) -> list[torch.Tensor]:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(16, 16), nn.Dropout(p), nn.GELU(), nn.Linear(16, 16)).to(device)
    x = torch.randn(4, 16).to(device).requires_grad_()
    torch.manual_seed(1)
    if checkpointed:
        y = checkpoint(block, x, use_reentrant=reentrant, preserve_rng_state=preserve)
    else:
        y = block(x)
    y.square().sum().backward()
    lazyfuse.mark_step()
    return [y.detach().cpu(), x.grad.cpu(), block[0].weight.grad.cpu()]


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("preserve", [True, False])
def test_checkpoint_matches_eager(lazy: torch.device, reentrant: bool, preserve: bool) -> None:
    expected = block_run(torch.device(REFERENCE_DEVICE), reentrant, preserve, p=0.0)
    got = block_run(lazy, reentrant, preserve, p=0.0)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e.cpu(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_recomputes_the_same_dropout_mask(lazy: torch.device, reentrant: bool) -> None:
    # Lazy dropout draws other numbers than eager's, so the reference is the
    # same lazy block without checkpointing. Without preserve_rng_state the
    # recomputation draws a new mask, and the gradients differ, as in eager.
    plain = block_run(lazy, reentrant, True, p=0.5, checkpointed=False)
    kept = block_run(lazy, reentrant, True, p=0.5)
    redrawn = block_run(lazy, reentrant, False, p=0.5)
    for a, b in zip(plain, kept, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert torch.equal(redrawn[0], plain[0])
    assert not torch.allclose(redrawn[1], plain[1])


class Deep(nn.Module):
    def __init__(self, mode: str | None, width: int = 64, depth: int = 8) -> None:
        super().__init__()
        self.mode = mode
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU())
            for _ in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            if self.mode is None:
                x = block(x)
            else:
                x = checkpoint(block, x, use_reentrant=self.mode == "reentrant")
        return x


def deep_peak(device: torch.device, mode: str | None) -> tuple[int, list[float]]:
    torch.manual_seed(0)
    model = Deep(mode).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 64).to(device).requires_grad_()
    losses = []
    for _ in range(3):
        with track_memory() as reading:
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            lazyfuse.mark_step()
        losses.append(loss.item())
    return reading.peak_bytes, losses


@pytest.mark.parametrize("mode", ["reentrant", "non-reentrant"])
def test_checkpointing_lowers_the_peak(lazy: torch.device, mode: str) -> None:
    plain_peak, plain_losses = deep_peak(lazy, None)
    peak, losses = deep_peak(lazy, mode)
    _, eager_losses = deep_peak(torch.device(REFERENCE_DEVICE), mode)
    assert losses == pytest.approx(eager_losses, rel=1e-4)
    assert losses == pytest.approx(plain_losses, rel=1e-4)
    assert peak < 0.75 * plain_peak, (peak, plain_peak)


def test_hf_gradient_checkpointing_trains_like_eager(lazy: torch.device) -> None:
    transformers = pytest.importorskip("transformers", reason="HF models are optional")

    def run(device: torch.device, checkpointed: bool) -> tuple[list[float], int]:
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            num_hidden_layers=3,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=100,
            max_position_embeddings=64,
        )
        model = transformers.LlamaForCausalLM(config).to(device)
        if checkpointed:
            model.gradient_checkpointing_enable()
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.randint(0, 100, (4, 32), generator=torch.Generator().manual_seed(1))
        ids = ids.to(device)
        losses = []
        for _ in range(3):
            with track_memory() as reading:
                opt.zero_grad()
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                lazyfuse.mark_step()
            losses.append(loss.item())
        return losses, reading.peak_bytes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # use_cache=True is incompatible with checkpointing
        eager_losses, _ = run(torch.device(REFERENCE_DEVICE), True)
        losses, peak = run(lazy, True)
        _, plain_peak = run(lazy, False)
    assert losses == pytest.approx(eager_losses, rel=1e-4)
    assert peak < plain_peak, (peak, plain_peak)


def _selective_block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w1).sin()
    h = h.transpose(0, 1).reshape(-1, h.shape[0]).t()
    return torch.softmax(h @ w2, -1)


def _save_matmuls(ctx: object, op: object, *args: object, **kwargs: object) -> object:
    from torch.utils.checkpoint import CheckpointPolicy

    saved = op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    return CheckpointPolicy.MUST_SAVE if saved else CheckpointPolicy.PREFER_RECOMPUTE


@pytest.mark.parametrize("policy", ["recompute", "save", "save_matmuls"])
def test_selective_checkpointing_matches_eager(policy: str, lazy: torch.device) -> None:
    """torch's selective checkpointing skips aten.detach, which reaches its
    dispatch mode as aten.detach_copy on a lazy tensor, and it saved the meta
    tensors of lazyfuse's view bookkeeping (python/lazyfuse/selective_checkpoint.py)."""
    from functools import partial

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    policies = {
        "recompute": lambda ctx, op, *a, **k: CheckpointPolicy.PREFER_RECOMPUTE,
        "save": lambda ctx, op, *a, **k: CheckpointPolicy.MUST_SAVE,
        "save_matmuls": _save_matmuls,
    }
    context_fn = partial(create_selective_checkpoint_contexts, policies[policy])
    torch.manual_seed(0)
    inputs = (torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 3))
    grads = []
    for device in (REFERENCE_DEVICE, lazy):
        leaves = [t.detach().to(device, copy=True).requires_grad_() for t in inputs]
        out = checkpoint(_selective_block, *leaves, use_reentrant=False, context_fn=context_fn)
        (out * torch.arange(3.0, device=device)).sum().backward()
        grads.append([leaf.grad.cpu() for leaf in leaves])
    for got, want in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(got, want)
