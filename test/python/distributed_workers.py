"""Rank bodies for test_distributed.py: each runs in a fresh process, checks
lazy collectives against the same calls on eager CPU tensors over the same
Gloo group, and raises on the first difference (the parent reports it)."""

from __future__ import annotations

import copy
import datetime
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.nn.parallel import DistributedDataParallel

TIMEOUT = datetime.timedelta(seconds=45)
Case = Callable[[torch.device, int, int], list[torch.Tensor]]


def init(rank: int, world: int, store_path: str, fused: bool) -> None:
    """Joins the group; `fused`: fused kernels (emulated off a GPU), strict."""
    import dataclasses

    import lazyfuse

    if fused:
        settings = lazyfuse.config.kernel_settings()
        on_cuda = lazyfuse.config.backing_device().type == "cuda"
        lazyfuse.config.set_kernel_settings(
            dataclasses.replace(settings, emulate_cuda=not on_cuda, strict=True)
        )
    dist.init_process_group(
        "gloo", init_method=f"file://{store_path}", rank=rank, world_size=world, timeout=TIMEOUT
    )


def lazy_device() -> torch.device:
    import lazyfuse

    return lazyfuse.lazy_device()


def mark_step() -> None:
    import lazyfuse

    lazyfuse.mark_step()


def ranked(device: torch.device, rank: int, shape: tuple[int, ...] = (4,)) -> torch.Tensor:
    """A tensor that differs per rank and per element."""
    base = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    return (base + 10 * (rank + 1)).to(device)


def all_reduce(op: dist.ReduceOp) -> Case:
    def case(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
        t = ranked(device, rank)
        dist.all_reduce(t, op=op)
        return [t]

    return case


def all_reduce_int(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    t = ranked(device, rank).long()
    dist.all_reduce(t)
    return [t]


def broadcast(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    t = ranked(device, rank, (2, 3))
    dist.broadcast(t, src=world - 1)
    return [t]


def all_gather(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    out = [torch.zeros(3).to(device) for _ in range(world)]
    dist.all_gather(out, ranked(device, rank, (3,)))
    return out


def all_gather_into_tensor(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    out = torch.zeros(2 * world, 3).to(device)
    dist.all_gather_into_tensor(out, ranked(device, rank, (2, 3)))
    return [out]


def reduce_scatter(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    out = torch.zeros(3).to(device)
    dist.reduce_scatter(out, [ranked(device, rank + r, (3,)) for r in range(world)])
    return [out]


def reduce_scatter_tensor(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    out = torch.zeros(2, 3).to(device)
    dist.reduce_scatter_tensor(out, ranked(device, rank, (2 * world, 3)))
    return [out]


def functional(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    group = dist.group.WORLD
    x = ranked(device, rank, (2, 3))
    reduced = funcol.all_reduce(x * 2, "sum", group) + 1
    gathered = funcol.all_gather_tensor(x, 0, group)
    scattered = funcol.reduce_scatter_tensor(torch.cat([x] * world), "sum", 0, group)
    return [reduced, funcol.wait_tensor(gathered), scattered]


def through_a_view(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    base = ranked(device, rank, (2, 4))
    dist.all_reduce(base[1])
    return [base]


def through_a_strided_view(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    # Eager Gloo reduces a non-contiguous view's memory as if it were
    # contiguous (wrong values), so eager's side reduces a contiguous copy.
    base = ranked(device, rank, (2, 4))
    if device.type == "lazy":
        dist.all_reduce(base[:, 1:3])
    else:
        columns = base[:, 1:3].contiguous()
        dist.all_reduce(columns)
        base[:, 1:3] = columns
    return [base]


def chained(device: torch.device, rank: int, world: int) -> list[torch.Tensor]:
    t = ranked(device, rank)
    dist.all_reduce(t)
    t = t.sin() * (rank + 1)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.broadcast(t, src=0)
    return [t]


CASES: dict[str, Case] = {
    "all_reduce_sum": all_reduce(dist.ReduceOp.SUM),
    "all_reduce_max": all_reduce(dist.ReduceOp.MAX),
    "all_reduce_min": all_reduce(dist.ReduceOp.MIN),
    "all_reduce_product": all_reduce(dist.ReduceOp.PRODUCT),
    "all_reduce_int64": all_reduce_int,
    "broadcast": broadcast,
    "all_gather": all_gather,
    "all_gather_into_tensor": all_gather_into_tensor,
    "reduce_scatter": reduce_scatter,
    "reduce_scatter_tensor": reduce_scatter_tensor,
    "functional": functional,
    "through_a_view": through_a_view,
    "through_a_strided_view": through_a_strided_view,
    "chained": chained,
}


def check_collectives(rank: int, world: int, store_path: str, fused: bool) -> None:
    import lazyfuse

    init(rank, world, store_path, fused)
    lazy = lazy_device()
    cpu = torch.device("cpu")
    for name, case in CASES.items():
        expected = case(cpu, rank, world)
        actual = case(lazy, rank, world)
        mark_step()
        for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
            torch.testing.assert_close(a.cpu(), e, msg=lambda m, n=name, i=k: f"{n}[{i}]: {m}")
    assert lazyfuse.metrics.fallback_counts() == {}, lazyfuse.metrics.fallback_counts()
    if fused:
        assert lazyfuse.metrics.counter_value("LazyFuseKernelLaunches") > 0
    dist.destroy_process_group()


def check_lockstep(rank: int, world: int, store_path: str, fused: bool) -> None:
    import lazyfuse

    init(rank, world, store_path, fused)
    lazy = lazy_device()
    # A read on one rank alone runs the collective once on every rank: the
    # read syncs every live tensor, and the other rank's mark_step runs it.
    t = ranked(lazy, rank)
    dist.all_reduce(t)
    doubled = t * 2
    if rank == 0:
        assert doubled.sum().item() == 2 * (4 * 30 + 2 * 6)
    mark_step()
    torch.testing.assert_close(t.cpu(), torch.arange(4.0) * 2 + 30)
    # Graphs hash alike on every rank: no rank in the hash.
    lazyfuse.debug.clear_compile_log()
    u = ranked(lazy, rank) * 3
    dist.all_reduce(u)
    mark_step()
    hashes: list[list[str]] = [[] for _ in range(world)]
    dist.all_gather_object(hashes, [entry["hash"] for entry in lazyfuse.debug.compile_log()])
    assert hashes[0] == hashes[1] and hashes[0], hashes
    # An op that does not run in the graph raises on every rank, naming it,
    # before anything is sent; the group stays usable.
    try:
        dist.all_to_all_single(torch.zeros(2).to(lazy), torch.ones(2).to(lazy))
    except RuntimeError as error:
        assert "c10d::alltoall_base_ is not supported on lazy tensors" in str(error), error
    else:
        raise AssertionError("all_to_all_single on lazy tensors did not raise")
    v = ranked(lazy, rank)
    dist.all_reduce(v)
    torch.testing.assert_close(v.cpu(), torch.arange(4.0) * 2 + 30)
    # A collective that fails is never retried: its values are lost, and say so.
    w = ranked(lazy, rank)
    dist.all_reduce(w)
    dist.destroy_process_group()
    for _ in range(2):
        try:
            w.cpu()
        except RuntimeError as error:
            assert "c10d::allreduce_" in str(error) and "never retried" in str(error), error
        else:
            raise AssertionError("a collective on a destroyed group did not raise")
    fresh = torch.ones(2).to(lazy) + 1
    torch.testing.assert_close(fresh.cpu(), torch.full((2,), 2.0))


def after_a_while(t: torch.Tensor, rank: int) -> torch.Tensor:
    """`t`, in a graph that on rank 0 computes for a while before it."""
    if rank != 0:
        return t
    m = torch.randn(256, 256).to(t.device) / 16
    for _ in range(12):
        m = (m @ m).tanh()
    return t + m.sum() * 0


def check_collectives_on_the_stream(rank: int, world: int, store_path: str, fused: bool) -> None:
    """Under asynchronous execution, a graph's collectives run on the CPU
    stream. Rank 0's graph reaches its all-reduce late and rank 1's at once,
    so an eager collective called right after mark_step would pair with the
    other rank's lazy one unless it waits for this rank's graph."""
    import lazyfuse

    init(rank, world, store_path, fused)
    lazyfuse.config.set_async_execution(True)
    lazy = lazy_device()
    expected = ranked(torch.device("cpu"), 0) + ranked(torch.device("cpu"), 1)
    for _ in range(3):
        runs = lazyfuse.metrics.counter_value("LazyFuseStreamRuns")
        t = after_a_while(ranked(lazy, rank), rank)
        dist.all_reduce(t)
        mark_step()
        assert lazyfuse.metrics.counter_value("LazyFuseStreamRuns") == runs + 1
        eager = ranked(torch.device("cpu"), rank) * 100
        dist.all_reduce(eager)
        torch.testing.assert_close(eager, expected * 100)
        torch.testing.assert_close(t.cpu(), expected)
    # DDP's steps, their gradients all-reduced on the stream: every rank
    # ends with the same parameters.
    torch.manual_seed(0)
    model = DistributedDataParallel(mlp().to(lazy))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    runs = lazyfuse.metrics.counter_value("LazyFuseStreamRuns")
    for step in range(4):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(10 * step + rank))
        optimizer.zero_grad()
        model(after_a_while(x.to(lazy), rank)).square().mean().backward()
        optimizer.step()
        mark_step()
    assert lazyfuse.metrics.counter_value("LazyFuseStreamRuns") >= runs + 4
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty(flat.shape) for _ in range(world)]
    dist.all_gather(gathered, flat.cpu())
    assert torch.equal(gathered[0], gathered[1])
    # A group destroyed while a graph that uses it is still on the stream:
    # the graph's collective runs as eager's had, before the destroy.
    u = after_a_while(ranked(lazy, rank), rank)
    dist.all_reduce(u)
    mark_step()
    dist.destroy_process_group()
    torch.testing.assert_close(u.cpu(), expected)
    assert lazyfuse.metrics.fallback_counts() == {}, lazyfuse.metrics.fallback_counts()


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1, bias=False),  # BatchNorm follows
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 5 * 5, 3),
    )


MODELS = {"mlp": (mlp, (6,)), "cnn": (cnn, (2, 5, 5))}


def check_training(
    rank: int, world: int, store_path: str, fused: bool, model_name: str, wrap: str
) -> None:
    """Data-parallel training over lazy tensors against one process training
    on the global batch. `wrap`: "ddp", "ddp_bucket_view" (DDP's two ways
    to hold gradients) or "helpers" (lazyfuse.distributed.optimizer_step)."""
    import lazyfuse

    init(rank, world, store_path, fused)
    lazy = lazy_device()
    build, sample = MODELS[model_name]
    torch.manual_seed(0)
    reference = build()
    model = copy.deepcopy(reference).to(lazy)
    forward: torch.nn.Module = model
    if wrap.startswith("ddp"):
        # Small buckets: several allreduces per step.
        forward = DistributedDataParallel(
            model, gradient_as_bucket_view=wrap == "ddp_bucket_view", bucket_cap_mb=0.0005
        )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    reference_optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1)
    steps, per_rank = 10, 4
    graphs: list[int] = []
    for _ in range(steps):
        x = torch.randn(world * per_rank, *sample, generator=generator)
        y = torch.randn(world * per_rank, 3, generator=generator)
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        before = lazyfuse.metrics.counter_value(lazyfuse.metrics.GRAPHS_EXECUTED)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(forward(x[mine].to(lazy)), y[mine].to(lazy))
        loss.backward()
        if wrap == "helpers":
            lazyfuse.distributed.optimizer_step(optimizer)
        else:
            optimizer.step()
        mark_step()
        graphs.append(lazyfuse.metrics.counter_value(lazyfuse.metrics.GRAPHS_EXECUTED) - before)
        # The global batch in one process, split as the ranks split it:
        # BatchNorm normalises each rank's part on its own, and DDP averages
        # the ranks' gradients.
        reference_optimizer.zero_grad()
        parts = [
            torch.nn.functional.mse_loss(reference(x[k : k + per_rank]), y[k : k + per_rank])
            for k in range(0, world * per_rank, per_rank)
        ]
        (sum(parts) / world).backward()
        reference_optimizer.step()
    # One graph per step once DDP has rebuilt its buckets (first iterations).
    assert graphs[2:] == [1] * (steps - 2), graphs
    assert lazyfuse.metrics.fallback_counts() == {}, lazyfuse.metrics.fallback_counts()
    if fused:
        assert lazyfuse.metrics.counter_value("LazyFuseKernelLaunches") > 0
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=1e-6, rtol=1e-5, msg=name)
    dist.destroy_process_group()


def check_replayed_training(rank: int, world: int, store_path: str, fused: bool, wrap: str) -> None:
    """lazyfuse.compile(step, replay=True) around a data-parallel step: the
    replayed run (collectives included) gives the traced run's parameters,
    bit for bit, on every rank. DDP's reducer keeps its gradient buckets in
    C++, where no capture can bind them: a DDP step stays traced."""
    import lazyfuse

    init(rank, world, store_path, fused)
    lazy = lazy_device()
    generator = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(4, 6, generator=generator), torch.randn(4, 3, generator=generator))
        for _ in range(12)
    ]
    results = []
    for replay in (False, True):
        torch.manual_seed(0)
        model = mlp().to(lazy)
        forward: torch.nn.Module = DistributedDataParallel(model) if wrap == "ddp" else model
        optimizer = torch.optim.Adam(
            model.parameters(), lr=torch.tensor(0.01, device=lazy), capturable=True
        )

        def step(
            x: torch.Tensor,
            y: torch.Tensor,
            optimizer: torch.optim.Optimizer = optimizer,
            forward: torch.nn.Module = forward,
        ) -> torch.Tensor:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(forward(x), y)
            loss.backward()
            if wrap == "helpers":
                lazyfuse.distributed.optimizer_step(optimizer)
            else:
                optimizer.step()
            return loss

        fn = lazyfuse.compile(step, replay=True) if replay else lazyfuse.compile(step)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DDP's step says why it is not replayed
            for x, y in batches:
                fn((x + rank).to(lazy), y.to(lazy))
        if replay and wrap == "ddp":
            assert fn.replayed_calls == 0 and "differs" in fn.last_reason, fn.last_reason
        elif replay:
            assert fn.replayed_calls >= len(batches) - 4, fn.last_reason
        results.append([p.detach().cpu() for p in model.parameters()])
    for traced, replayed in zip(*results, strict=True):
        assert torch.equal(traced, replayed)
    # The ranks averaged their gradients: their parameters agree. Gathered on
    # lazy tensors: a Gloo worker that frees an eager collective's tensors
    # takes the GIL, and at interpreter exit that aborts the process (the
    # kept records hold the group, so its workers outlive the script).
    mine = torch.cat([p.reshape(-1) for p in results[1]]).to(lazy)
    theirs = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(theirs, mine)
    assert all(torch.equal(mine.cpu(), other.cpu()) for other in theirs)
    dist.destroy_process_group()
