"""Step replay: ``lazyfuse.compile(fn, replay=True)`` runs a step's cached
graph without running ``fn``'s Python (csrc/ltc/step_replay.h does the work).

A call is traced, as without replay, until two consecutive traced calls
capture the same graph reading the same tensors. From then on a call whose
guards hold is replayed: the graph runs on the data its tensors hold now, and
its results go back into them. Every ``check_every`` replays one call is
traced again and compared with the capture, which catches a value that
changed where no guard looks.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from lazyfuse import _C

__all__ = ["ReplayedStep"]

_DONE, _INPUT_PENDING = 0, 1
# A replayed step as one CUDA graph (csrc/ltc/static_step.h). "auto": on a
# CUDA backing device; "0": never; "emulate": on any device, on the same
# static memory, with the step's own run where a graph would launch (what
# the CPU tests check).
_CUDA_GRAPHS_MODES = ("auto", "0", "emulate")
# Graphs that fail (no plan, a failed capture, dropped within two launches)
# before a step stays a plain replay: each costs a capture and a memory pool.
_MAX_GRAPH_FAILURES = 3
# A step on static memory (lazyfuse._C._StaticStep) and what launches it.
_Graph = tuple[Any, Callable[[], object]]
# LAZYFUSE_DEBUG=1 prints each capture's outcome and each call traced instead
# of replayed, with why; 2 also each replayed call.
_DEBUG = int(os.environ.get("LAZYFUSE_DEBUG", "0") or 0)

# How many replays run between two traced checks. A check costs one traced
# step, so 1 in 100 keeps the host cost within 1-2% of pure replay, while a
# value that changed unseen is caught within 100 steps.
DEFAULT_CHECK_EVERY = 100
# Consecutive captures that disagree before a step is run traced for the
# next `check_every` calls: the cost of capturing is then not paid every call.
_MAX_DISAGREEMENTS = 4

# Bumped whenever a module changes training mode or gains or swaps a
# parameter, buffer or submodule, and whenever a hook is added or removed
# outside a step's trace: a replayed step guards on all three.
_epochs = {"train": 0, "structure": 0, "hooks": 0}
_module_train = torch.nn.Module.train


def _train(self: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
    _epochs["train"] += 1
    return _module_train(self, mode)


def _structure_changed(*_: object) -> None:
    _epochs["structure"] += 1


_tracing = threading.local()  # depth of replayed steps tracing on this thread

# Every hook (module, global module, tensor, optimizer) is added through a
# RemovableHandle and removed through it. A hook runs Python that computes
# tensors, which a replay does not run: one added or removed between calls
# changes the step. One added inside a step's trace is part of its graph.
_RemovableHandle = torch.utils.hooks.RemovableHandle
_handle_init = _RemovableHandle.__init__
_handle_remove = _RemovableHandle.remove


def _hooks_changed() -> None:
    if not getattr(_tracing, "depth", 0):
        _epochs["hooks"] += 1


@functools.wraps(_handle_init)
def _hook_added(self: Any, *args: Any, **kwargs: Any) -> None:
    _handle_init(self, *args, **kwargs)
    _hooks_changed()


@functools.wraps(_handle_remove)
def _hook_removed(self: Any) -> None:
    _handle_remove(self)
    _hooks_changed()


_RemovableHandle.__init__ = _hook_added  # type: ignore[method-assign]
_RemovableHandle.remove = _hook_removed  # type: ignore[method-assign]

# Every replayed step, so a swap can drop their captures.
_steps: weakref.WeakSet[ReplayedStep] = weakref.WeakSet()
_swap_tensors = torch.utils.swap_tensors


def _swap_forgetting_captures(t1: torch.Tensor, t2: torch.Tensor) -> None:
    # A capture refers to the tensors it binds (C++ weak references), which
    # swap_tensors refuses: Module.to(dtype) and load_state_dict(assign=True)
    # swap parameters. A swapped tensor is another tensor anyway.
    for step in list(_steps):
        step.reset()
    _epochs["structure"] += 1
    _swap_tensors(t1, t2)


torch.utils.swap_tensors = _swap_forgetting_captures


@atexit.register
def _keep_captures_until_exit() -> None:
    for step in list(_steps):
        for record in (step._record, step._candidate):
            if record is not None:
                _C._keep_until_exit(record)
    # Cyclic garbage left for interpreter teardown may hold a Gloo work or
    # process group, whose threads then abort the process; a capture's gc
    # scans keep such garbage longer. Freed here, the interpreter is whole.
    gc.collect()


torch.nn.Module.train = _train  # type: ignore[method-assign]
torch.nn.modules.module.register_module_parameter_registration_hook(_structure_changed)
torch.nn.modules.module.register_module_buffer_registration_hook(_structure_changed)
torch.nn.modules.module.register_module_module_registration_hook(_structure_changed)


_LRScheduler = torch.optim.lr_scheduler.LRScheduler


def _live_lazy_tensors() -> tuple[list[torch.Tensor], list[torch.optim.Optimizer], list[Any]]:
    """Every lazy tensor alive now (with the gradients of parameters), every
    optimizer and every LR scheduler. Only captures pay for the scan."""
    tensors: dict[int, torch.Tensor] = {}
    optimizers = []
    schedulers = []
    for obj in gc.get_objects():
        kind = type(obj)
        if _is_lazy_tensor(obj):
            tensors[id(obj)] = obj
        elif issubclass(kind, torch.optim.Optimizer):
            optimizers.append(obj)
        elif issubclass(kind, _LRScheduler):
            schedulers.append(obj)
    return _with_gradients(list(tensors.values())), optimizers, schedulers


def _is_lazy_tensor(obj: object) -> bool:
    # type(), not isinstance(): module proxies warn when asked for __class__.
    return issubclass(type(obj), torch.Tensor) and obj.device.type == "lazy"  # type: ignore[attr-defined]


def _young_lazy_tensors() -> list[torch.Tensor]:
    return [
        obj for generation in (0, 1) for obj in gc.get_objects(generation) if _is_lazy_tensor(obj)
    ]


def _apply_writes_through_views(tensors: list[torch.Tensor]) -> None:
    """Functionalization applies a write through a view (`buffer[1:3] = v`)
    to the base only when the base is next read, after the step's graph. The
    captured graph must hold it, or a replay computes the write and puts it
    nowhere."""
    for tensor in tensors:
        if torch._is_functional_tensor(tensor):  # type: ignore[attr-defined]
            torch._sync(tensor)  # type: ignore[attr-defined]


def _with_gradients(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """`tensors` without repeats, with the gradients of the leaves among them."""
    found = {id(t): t for t in tensors}
    for tensor in tensors:
        if tensor.is_leaf and tensor.requires_grad and tensor.grad is not None:
            found[id(tensor.grad)] = tensor.grad
    return list(found.values())


def _hyperparameters(optimizers: list[torch.optim.Optimizer]) -> list[object]:
    # Tensor values (a tensor lr) are read by the graph: their identity is
    # what a replay must keep; float values are frozen into it.
    return [
        [
            tuple(
                (key, ("tensor", id(value)) if isinstance(value, torch.Tensor) else value)
                for key, value in group.items()
                if key != "params"
            )
            # The list and its length, not every parameter: this runs on each
            # call, and a swapped parameter already bumps the structure epoch.
            + (("params", id(group["params"]), len(group["params"])),)
            for group in optimizer.param_groups
        ]
        for optimizer in optimizers
    ]


def _same(a: object, b: object) -> bool:
    # Arguments and returns may hold values whose == is not a bool (arrays).
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - any such value counts as changed
        return False


def _process_state() -> tuple[object, ...]:
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        tuple(_C._autocast_state()),
        _epochs["train"],
        _epochs["structure"],
        _epochs["hooks"],
    )


class ReplayedStep:
    """``fn`` wrapped for replay (see :func:`lazyfuse.compile`)."""

    def __init__(self, fn: Callable[..., Any], check_every: int = DEFAULT_CHECK_EVERY) -> None:
        if check_every < 1:
            raise ValueError(f"lazyfuse.compile: check_every must be at least 1, got {check_every}")
        functools.update_wrapper(self, fn)
        _steps.add(self)
        self.fn = fn
        self.check_every = check_every
        self.traced_calls = 0
        self.replayed_calls = 0
        self.last_reason = ""  # why the last call was not replayed
        self._label = f"lazyfuse.compile({getattr(fn, '__qualname__', fn)!r}, replay=True)"
        self.graph_launches = 0
        self.graph_reason = ""  # why the last call was not one graph launch
        mode = os.environ.get("LAZYFUSE_CUDA_GRAPHS", "auto") or "auto"
        if mode not in _CUDA_GRAPHS_MODES:
            raise ValueError(
                f"LAZYFUSE_CUDA_GRAPHS={mode!r}: expected one of {', '.join(_CUDA_GRAPHS_MODES)}"
            )
        on_cuda = _C._backing_device().startswith("cuda")
        self._graph_mode = {"emulate": "emulate", "auto": "cuda" if on_cuda else None}.get(mode)
        self.reset()

    def _log(self, level: int, message: str) -> None:
        if _DEBUG >= level:
            print(f"lazyfuse: {self._label}: {message}", file=sys.stderr, flush=True)

    def reset(self) -> None:
        """Drops the capture: the next calls trace and capture again."""
        self._record: Any = None  # the capture replays run
        self._candidate: Any = None  # the latest capture, awaiting one that agrees
        self._guards: tuple[object, ...] = ()
        self._optimizers: list[torch.optim.Optimizer] = []
        self._schedulers: list[Any] = []
        self._hyper: list[object] = []
        self._outputs: tuple[object, ...] = ()
        self._since_check = 0
        self._disagreements = 0
        self._pause_until = 0
        self._warned = False
        self._graph: _Graph | None = None
        self._graph_failures = 0
        self._launches_since_capture = 0

    # ---- the call ----
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(_tracing, "depth", 0):
            # Called from a step being traced: part of that step's graph.
            return self.fn(*args, **kwargs)
        leaves, spec = pytree.tree_flatten((args, kwargs))
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        key = (spec, tuple(None if isinstance(x, torch.Tensor) else x for x in leaves))
        if self._record is not None:
            if self._since_check >= self.check_every:
                self.last_reason = f"the periodic check (every {self.check_every} replays)"
            elif _same(self._guards, (key, _process_state())) and _same(
                self._hyper, _hyperparameters(self._optimizers)
            ):
                returned = self._replay(tensors)
                if returned is not None:
                    self._since_check += 1
                    self.replayed_calls += 1
                    self._log(2, "replayed")
                    out_spec, constants = self._outputs
                    it = iter(returned)
                    return pytree.tree_unflatten(
                        [next(it) if c is _TENSOR else c for c in constants], out_spec
                    )
            else:
                self.last_reason = "a guard changed (arguments, modes or hyperparameters)"
            self._log(1, f"traced: {self.last_reason}")
        return self._trace(args, kwargs, tensors, key)

    def _replay(self, tensors: list[torch.Tensor]) -> list[torch.Tensor] | None:
        if self._graph_mode is not None:
            returned = self._launch_graph(tensors)
            if returned is not None:
                return returned
        status, why, returned = _C._replay(self._record, tensors)
        if status == _INPUT_PENDING:
            # What the traced call's entry would sync anyway.
            _C._mark_step(False)
            status, why, returned = _C._replay(self._record, tensors)
        if status != _DONE:
            self.last_reason = why
            return None
        return returned

    # ---- a replay as one CUDA graph ----
    def _launch_graph(self, tensors: list[torch.Tensor]) -> list[torch.Tensor] | None:
        if self._graph is None:
            # From the second replay on: the first ran every kernel once.
            if self.replayed_calls < 1 or self._graph_failures >= _MAX_GRAPH_FAILURES:
                return None
            self._graph = self._capture_graph(tensors)
            if self._graph is None:
                self._graph_failures += 1
                self._log(1, f"not one graph: {self.graph_reason}")
                return None
        step, launch = self._graph
        bound, why = _bind(step, tensors)
        if bound and launch() is False:
            bound, why = False, step.why
        if not bound:
            self._drop_graph(why)
            return None
        self.graph_launches += 1
        self._launches_since_capture += 1
        return step.finish(tensors)

    def _capture_graph(self, tensors: list[torch.Tensor]) -> _Graph | None:
        step, why = _C._static_step(self._record, tensors)
        if step is None:
            self.graph_reason = why
            return None
        self._launches_since_capture = 0
        bound, why = _bind(step, tensors)  # the capture reads the arguments' buffers
        if not bound:
            self.graph_reason = why
            return None
        if self._graph_mode == "emulate":
            return step, step.run  # everything else as on a GPU
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                ran = step.run()
        except Exception as error:  # noqa: BLE001 - the call then replays as usual
            self.graph_reason = f"the capture failed: {type(error).__name__}: {error}"
            return None
        if not ran:
            self.graph_reason = step.why
            return None
        self._log(1, "captured one CUDA graph")
        return step, graph.replay

    def _drop_graph(self, why: str) -> None:
        if self._graph is not None and self._launches_since_capture < 2:
            self._graph_failures += 1
        self._graph = None
        self.graph_reason = why
        self._log(1, f"graph dropped: {why}")

    def _trace(self, args: Any, kwargs: Any, tensors: list[torch.Tensor], key: object) -> Any:
        from lazyfuse import mark_step

        self.traced_calls += 1
        _tracing.depth = getattr(_tracing, "depth", 0) + 1
        try:
            return self._trace_and_capture(args, kwargs, tensors, key, mark_step)
        finally:
            _tracing.depth -= 1

    def _trace_and_capture(
        self, args: Any, kwargs: Any, tensors: list[torch.Tensor], key: object, mark_step: Any
    ) -> Any:
        mark_step()
        capturing = self.traced_calls > self._pause_until
        if not capturing:
            out = self.fn(*args, **kwargs)
            mark_step()
            return out
        checking = self._record
        if checking is not None:
            # A periodic check: the capture must bind what the record binds,
            # so the record's tensors are all it needs (a gc scan costs tens
            # of ms in a large process). Anything new makes it disagree. The
            # lazy arguments too: a step may write into one (bound by position).
            arguments = [t for t in tensors if t.device.type == "lazy"]
            live = _with_gradients(checking.bound_tensors() + arguments)
            optimizers, schedulers = self._optimizers, self._schedulers
        else:
            live, optimizers, schedulers = _live_lazy_tensors()
        epochs = [scheduler.last_epoch for scheduler in schedulers]
        _C._capture_begin(tensors, live)
        try:
            out = self.fn(*args, **kwargs)
            out_leaves, out_spec = pytree.tree_flatten(out)
            returned = [leaf for leaf in out_leaves if isinstance(leaf, torch.Tensor)]
            if checking is not None:
                # Tensors made during the call are young: gc generations 0 and 1.
                after = _with_gradients(checking.bound_tensors() + live + _young_lazy_tensors())
            else:
                after = _live_lazy_tensors()[0]
            _apply_writes_through_views(after)
            mark_step()
        except BaseException:
            _C._capture_abort()
            raise
        record = _C._capture_end(after, returned)
        stepped = [s for s, epoch in zip(schedulers, epochs, strict=True) if s.last_epoch != epoch]
        why_not = (
            f"{type(stepped[0]).__name__}.step() ran inside the step: its Python decides the "
            "lr anew each call, which a replay would freeze. Call it outside the replayed "
            "function"
            if stepped
            else ""
        )
        # As the next call will find it: a step that calls model.train()
        # itself leaves the mode it set.
        state = _process_state()
        outputs = (
            out_spec,
            tuple(_TENSOR if isinstance(x, torch.Tensor) else x for x in out_leaves),
        )
        self._consider(record, (key, state), optimizers, outputs, why_not)
        if self._record is record:
            self._schedulers = schedulers
        return out

    def _consider(
        self,
        record: Any,
        guards: tuple[object, ...],
        optimizers: list[torch.optim.Optimizer],
        outputs: tuple[object, ...],
        why_not: str,
    ) -> None:
        previous = self._record if self._record is not None else self._candidate
        if why_not:
            why = why_not
        elif previous is None:
            why = record.not_replayable or "first capture"
        else:
            why = _C._record_disagreement(previous, record, self._record is not None)
            if not why and not _same(outputs, self._outputs):
                why = "the calls returned different Python values or structures"
        checked = self._record is not None and self._since_check >= self.check_every
        self._outputs = outputs
        self._log(1, f"captured; {'replays from the next call' if not why else why}")
        if self._graph is not None:
            self._drop_graph("the step was captured again")
        if not why:
            _C._bind_repeated_tensors(previous, record)
            self._record, self._candidate = record, None
            self._guards, self._optimizers = guards, optimizers
            self._hyper = _hyperparameters(optimizers)
            self._since_check = 0
            self._disagreements = 0
            return
        if checked:
            warnings.warn(
                f"{self._label}: the step changed since it was captured ({why}). The last "
                f"{self._since_check} replayed calls may have used the old value. It is traced "
                "and captured again.",
                stacklevel=4,
            )
        self.last_reason = why
        self._record, self._candidate = None, record
        if why != "first capture":
            self._disagreements += 1
        if self._disagreements >= _MAX_DISAGREEMENTS:
            self._disagreements = 0
            self._candidate = None
            self._pause_until = self.traced_calls + self.check_every
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"{self._label}: the step cannot be replayed, so it runs traced: {why}. "
                    f"It tries again every {self.check_every} calls.",
                    stacklevel=4,
                )


def _bind(step: Any, tensors: list[torch.Tensor]) -> tuple[bool, str]:
    bound, why = step.bind(tensors)
    if not bound and "pending IR" in why:
        _C._mark_step(False)  # what a replay would sync anyway
        bound, why = step.bind(tensors)
    return bound, why


class _TensorSlot:
    def __repr__(self) -> str:
        return "<tensor>"


_TENSOR = _TensorSlot()
