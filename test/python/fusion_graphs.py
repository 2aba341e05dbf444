"""The representative graphs the fusion planner and the kernel codegen are
tested on: an MLP layer, softmax, layer norm, a GELU chain and an Adam update.
Each builder records its graph on the lazy device and returns the tensors to
plan; nothing runs."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def mlp_layer(device: torch.device) -> list[torch.Tensor]:
    x = torch.randn(32, 64, device=device)
    w = torch.randn(128, 64, device=device)
    b = torch.randn(128, device=device)
    return [F.relu(F.linear(x, w, b))]


def softmax(device: torch.device) -> list[torch.Tensor]:
    x = torch.randn(64, 256, device=device)
    return [torch.softmax(x * 0.5, dim=-1)]


def layer_norm(device: torch.device) -> list[torch.Tensor]:
    x = torch.randn(16, 128, device=device)
    w = torch.randn(128, device=device)
    b = torch.randn(128, device=device)
    return [F.layer_norm(x, (128,), w, b)]


def gelu_chain(device: torch.device) -> list[torch.Tensor]:
    x = torch.randn(1000, device=device)
    return [torch.tanh(F.gelu(x * 2.0 + 1.0)) * x]


def adam_update(device: torch.device) -> list[torch.Tensor]:
    param = torch.nn.Parameter(torch.randn(64, 32, device=device))
    optimizer = torch.optim.Adam([param], lr=1e-3)
    param.grad = torch.randn(64, 32, device=device)
    optimizer.step()
    state = optimizer.state[param]
    return [param.detach(), state["exp_avg"], state["exp_avg_sq"]]


GRAPHS: dict[str, Callable[[torch.device], list[torch.Tensor]]] = {
    "mlp_layer": mlp_layer,
    "softmax": softmax,
    "layer_norm": layer_norm,
    "gelu_chain": gelu_chain,
    "adam_update": adam_update,
}


def parse_plan(text: str) -> list[tuple[str, list[str]]]:
    """Turns lazyfuse.debug.fusion_plan() text into (kind, ops) per group."""
    groups = []
    for line in text.splitlines()[1:]:
        head, _, rest = line.partition("]:")
        kind = head.split("[", 1)[1].split()[0].rstrip("]")
        ops = rest.split("(")[0].split()
        groups.append((kind, ops))
    return groups
