"""Selective activation checkpointing on lazy tensors.

``torch.utils.checkpoint`` with a ``context_fn`` from
``create_selective_checkpoint_contexts`` matches the ops of the forward and of
the recompute one for one, under a ``TorchDispatchMode``, and skips
``aten.detach``: autograd detaches saved tensors a different number of times
in the two. On a lazy tensor, functionalization runs above the mode, so that
detach reaches it as ``aten.detach_copy``, which it did not skip; backward
raised "aten.detach_copy.default encountered during backward but not found in
storage" for any checkpointed op that saves a tensor. It skips both now.
"""

from __future__ import annotations

import torch
import torch.utils.checkpoint


def install() -> None:
    ignored = getattr(torch.utils.checkpoint, "SAC_IGNORED_OPS", None)
    if isinstance(ignored, set):
        ignored.add(torch.ops.aten.detach_copy.default)
