"""torch.inference_mode() works on the lazy device wherever torch.no_grad()
does: evaluation and serving code (Lightning's validate, test and predict
loops) runs under it. Note [Inference mode and functionalization] in
csrc/ops/inference_mode.h says what had to change."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import lazyfuse
from lazyfuse.demo import LeNet5


class TinyEncoder(nn.Module):
    """Embedding, attention (scaled_dot_product_attention), layer norm and a
    GELU MLP: the layers of BERT, ViT and GPT-2 blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.position = nn.Parameter(torch.randn(1, 6, 16) * 0.1)
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)
        self.norm1, self.norm2 = nn.LayerNorm(16), nn.LayerNorm(16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
        self.head = nn.Linear(16, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        q, k, v = self.qkv(self.norm1(x)).view(x.shape[0], 6, 3, 2, 8).unbind(2)
        attention = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.out(attention.transpose(1, 2).reshape(x.shape))
        x = x + self.mlp(self.norm2(x))
        return self.head(x[:, 0])


def lenet() -> tuple[nn.Module, torch.Tensor]:
    return LeNet5(), torch.randn(4, 1, 28, 28)


def cnn() -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )
    model[1].running_mean.uniform_(-0.5, 0.5)
    return model, torch.randn(2, 3, 8, 8)


def mlp() -> tuple[nn.Module, torch.Tensor]:
    return nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 2)), torch.randn(7, 10)


def lstm() -> tuple[nn.Module, torch.Tensor]:
    return nn.LSTM(6, 8, num_layers=2, batch_first=True), torch.randn(3, 5, 6)


def encoder() -> tuple[nn.Module, torch.Tensor]:
    return TinyEncoder(), torch.randint(0, 50, (2, 6))


def transformer_layer() -> tuple[nn.Module, torch.Tensor]:
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)
    return layer, torch.randn(2, 5, 16)


MODELS: dict[str, Callable[[], tuple[nn.Module, torch.Tensor]]] = {
    "lenet": lenet,
    "cnn_batchnorm_dropout": cnn,
    "mlp": mlp,
    "lstm": lstm,
    "attention_encoder": encoder,
    "transformer_layer": transformer_layer,
}


def first(output: object) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output  # type: ignore[return-value]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_eval_under_inference_mode_matches_no_grad_and_eager(engine: str, name: str) -> None:
    torch.manual_seed(0)
    model, x = MODELS[name]()
    model.eval()
    with torch.no_grad():
        expected = first(copy.deepcopy(model)(x))
    lazy = lazyfuse.lazy_device()
    model = model.to(lazy)
    # Both graphs run the same way, in mark_step: under asynchronous execution
    # a graph mark_step runs takes one thread fewer than a read's, and ATen's
    # matmuls may round by thread count (MKL on AMD CPUs does).
    with torch.no_grad():
        y = first(model(x.to(lazy)))
        lazyfuse.mark_step()
        under_no_grad = y.cpu()
    with torch.inference_mode():
        y = first(model(x.to(lazy)))
        lazyfuse.mark_step()
        under_inference = y.cpu()
    assert torch.equal(under_inference, under_no_grad)
    torch.testing.assert_close(under_inference, expected, rtol=1e-4, atol=1e-5)
    assert lazyfuse.metrics.fallback_counts() == {}


def test_validation_under_inference_mode_between_training_steps(engine: str) -> None:
    """A Lightning-style loop: train, validate under inference mode, train on."""

    def loop(device: torch.device) -> list[float]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 1))
        model = model.to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
        x, y = x.to(device), y.to(device)
        losses = []
        for _ in range(3):
            model.train()
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            if device.type == "lazy":
                lazyfuse.mark_step()
            model.eval()
            with torch.inference_mode():
                losses.append(F.mse_loss(model(x), y).item())
        return losses

    torch.testing.assert_close(loop(lazyfuse.lazy_device()), loop(torch.device("cpu")))


def test_tensors_made_in_inference_mode_are_inference_tensors(lazy: torch.device) -> None:
    weight = torch.randn(4, 3).to(lazy)
    with torch.inference_mode():
        made = torch.randn(2, 3).to(lazy) * 2
        view = weight.t()
    assert made.is_inference()
    assert not view.is_inference()  # a view of a normal tensor, as in eager
    torch.testing.assert_close(view.cpu(), weight.cpu().t())


def test_inplace_composites_under_inference_mode_match_eager(lazy: torch.device) -> None:
    # square_, selu_ and feature_alpha_dropout_ only decompose (into pow_,
    # elu_, ...) at the autograd key, which inference mode skips;
    # functionalization refused them ("Found a custom (non-ATen) operator").
    x = torch.randn(3, 4)
    steps = [
        lambda t: t.square_(),
        lambda t: F.selu(t, inplace=True),
        lambda t: F.feature_alpha_dropout(t, 0.5, training=False, inplace=True),
    ]
    for step in steps:
        expected, actual = x.clone(), x.to(lazy)
        with torch.inference_mode():
            step(expected)
            step(actual)
        torch.testing.assert_close(actual.cpu(), expected)
