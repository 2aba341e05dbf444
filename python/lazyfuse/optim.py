"""torch.optim on the lazy device: ``capturable=True`` is accepted.

A capturable optimizer keeps its step count on the parameters' device and
takes a tensor lr, so no Python number that changes from step to step reaches
the graph: exactly what a replayed step (:mod:`lazyfuse.replay`) needs. torch
allows it only for the devices it lists (cuda, xla, ...); lazyfuse adds
``lazy`` to that list, in every optimizer module that imported it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

import torch.optim

__all__: list[str] = []

_ATTRIBUTE = "_get_capturable_supported_devices"


def _with_lazy(devices: Callable[..., list[str]]) -> Callable[..., list[str]]:
    def supported(*args: object, **kwargs: object) -> list[str]:
        return [*devices(*args, **kwargs), "lazy"]

    supported.__wrapped__ = devices  # type: ignore[attr-defined]
    return supported


def _install() -> None:
    for info in pkgutil.iter_modules(torch.optim.__path__):
        module = importlib.import_module(f"torch.optim.{info.name}")
        devices = getattr(module, _ATTRIBUTE, None)
        if devices is not None and not hasattr(devices, "__wrapped__"):
            setattr(module, _ATTRIBUTE, _with_lazy(devices))


_install()
