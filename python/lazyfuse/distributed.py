"""Data-parallel training on lazy tensors, for loops that do not use DDP.

``DistributedDataParallel(model)`` works on a lazy model unchanged. For a
hand-written loop, as with torch_xla's ``xm.reduce_gradients`` and
``xm.optimizer_step``::

    loss.backward()
    lazyfuse.distributed.optimizer_step(optimizer)  # all-reduce, average, step
    lazyfuse.mark_step()

Every collective on lazy tensors (``dist.all_reduce`` and the rest) is
recorded in the graph and runs at ``mark_step`` on the process group's
backend for the backing device: Gloo on the CPU, NCCL on CUDA. Under
``torchrun``, each process backs the lazy device with the GPU its
``LOCAL_RANK`` names, unless ``LAZYFUSE_DEVICE`` says otherwise.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def reduce_gradients(
    optimizer: torch.optim.Optimizer, group: dist.ProcessGroup | None = None
) -> None:
    """Replaces the gradient of every parameter ``optimizer`` holds with its
    mean over the ranks of ``group`` (the default group when None). One
    all-reduce per dtype, over the gradients laid end to end."""
    world = dist.get_world_size(group)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for param_group in optimizer.param_groups:
        for param in param_group["params"]:
            if param.grad is None:
                continue
            if param.grad.is_sparse:
                raise RuntimeError(
                    "lazyfuse.distributed.reduce_gradients: sparse gradients are not supported "
                    "on the lazy device"
                )
            by_dtype.setdefault(param.grad.dtype, []).append(param.grad)
    for grads in by_dtype.values():
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        dist.all_reduce(flat, group=group)
        flat = flat / world
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()


def optimizer_step(
    optimizer: torch.optim.Optimizer, group: dist.ProcessGroup | None = None
) -> None:
    """``reduce_gradients(optimizer, group)``, then ``optimizer.step()``."""
    reduce_gradients(optimizer, group)
    optimizer.step()
