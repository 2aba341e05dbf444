"""``torch.save`` and ``torch.load`` with lazy tensors.

A lazy tensor has no storage to write or to map a storage onto, so:

- ``torch.save`` writes a lazy tensor's value as a CPU tensor (a Parameter
  stays a Parameter), which ``torch.load`` returns on the CPU.
- ``torch.load(f, map_location=lazyfuse.lazy_device())``, as a script written
  for ``map_location="cuda"`` calls it, loads onto the CPU and moves each
  tensor, and each module, to the lazy device. A tensor loaded once and
  reached twice stays one tensor; views of one storage become separate
  tensors.
- A ``map_location`` dict or function that names the lazy device for a
  storage raises, saying what to pass instead.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch

_torch_reduce_ex = torch.Tensor.__reduce_ex__
_torch_load = torch.load
_MAP_TO_LAZY = (
    "lazyfuse: torch.load cannot map a storage onto the lazy device: lazy tensors have no "
    "storage. Pass map_location=lazyfuse.lazy_device() (or the string 'lazy') to load onto "
    "the lazy device, or map_location='cpu' and move the tensors yourself; load_state_dict "
    "copies CPU tensors into a lazy model."
)


def _reduce_ex(self: torch.Tensor, protocol: int) -> object:
    if self.device.type == "lazy":
        value = self.detach().cpu()
        if isinstance(self, torch.nn.Parameter):
            value = torch.nn.Parameter(value, requires_grad=self.requires_grad)
        return _torch_reduce_ex(value, protocol)
    return _torch_reduce_ex(self, protocol)


def _lazy_target(map_location: object) -> torch.device | None:
    if not isinstance(map_location, (str, torch.device)):
        return None
    try:
        device = torch.device(map_location)
    except RuntimeError:
        return None
    return device if device.type == "lazy" else None


def _moved(value: Any, device: torch.device, seen: dict[int, Any]) -> Any:
    if id(value) in seen:
        return seen[id(value)]
    if isinstance(value, torch.nn.Parameter):
        moved: Any = torch.nn.Parameter(value.detach().to(device), value.requires_grad)
    elif isinstance(value, torch.Tensor):  # a leaf, as torch.load returns it
        moved = value.detach().to(device).requires_grad_(value.requires_grad)
    elif isinstance(value, torch.nn.Module):
        moved = value.to(device)
    elif isinstance(value, dict):
        moved = copy.copy(value)  # an OrderedDict or a defaultdict keeps its kind
        for key, item in value.items():
            moved[key] = _moved(item, device, seen)
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        moved = type(value)(*(_moved(item, device, seen) for item in value))
    elif isinstance(value, (list, tuple)):
        moved = type(value)(_moved(item, device, seen) for item in value)
    else:
        return value
    seen[id(value)] = moved
    return moved


@functools.wraps(_torch_load)
def _load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
    device = _lazy_target(map_location)
    if device is None:
        return _torch_load(f, map_location, *args, **kwargs)
    return _moved(_torch_load(f, "cpu", *args, **kwargs), device, {})


def _refuse_lazy_storage(storage: Any, location: str) -> None:
    if location.startswith("lazy"):
        raise RuntimeError(_MAP_TO_LAZY)


def install() -> None:
    torch.Tensor.__reduce_ex__ = _reduce_ex  # type: ignore[method-assign]
    torch.load = _load
    torch.serialization.load = _load
    torch.serialization.register_package(100, lambda _: None, _refuse_lazy_storage)
