"""After a graph fails on one step's values, a training loop goes on: it
traces more work on that graph's results (a running total of the losses) and
syncs again. Found from outside: under asynchronous execution, the default
with two cores or more, a graph reading a failed run's result that needs the
failing step raised that failure at every later mark_step, and nothing after
it ran.

The failure must be raised by one sync at most, and each tensor must read as
its inputs allow: a value computed from the values the failed graph left, or
the failure where an input has none."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

import lazyfuse
from conftest import FAILS_ON_VALUES_ON_THE_CPU_ONLY
from test_failed_step_reads import problems_by_seed, trace_around_a_failing_step

pytestmark = FAILS_ON_VALUES_ON_THE_CPU_ONLY

Recipe = tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], int, int]


def mark_step_raised() -> bool:
    try:
        lazyfuse.mark_step()
    except IndexError as error:
        assert "index_select" in str(error), error
        return True
    return False


def value_left(tensor: torch.Tensor) -> torch.Tensor | None:
    """What a tensor of the failed graph holds: its value, or None. Under
    asynchronous execution its first read may raise the failure, where no
    sync has yet, and a tensor updated in place reads as before the graph
    from then on."""
    for _ in range(2):
        try:
            return tensor.cpu()
        except IndexError:
            continue
    return None


def random_work_traced_on_a_failed_graph(seed: int) -> list[str]:
    rng = random.Random(seed)
    _, lazy, _, _, made = trace_around_a_failing_step(rng, seed)
    first = lazy + [tensor for tensor, _, _ in made]
    del made
    syncs_raising = int(mark_step_raised())
    tensors = list(first)
    recipes: list[Recipe] = []
    total = len(tensors) - 1
    for _ in range(rng.randint(2, 4)):
        with torch.no_grad():
            for _ in range(rng.randint(1, 4)):
                op = rng.choice([torch.add, torch.mul, torch.maximum])
                recipes.append((op, rng.randrange(len(tensors)), rng.randrange(len(tensors))))
                tensors.append(op(tensors[recipes[-1][1]], tensors[recipes[-1][2]]))
            recipes.append((torch.add, total, rng.randrange(len(tensors))))
            tensors.append(tensors[total] + tensors[recipes[-1][2]])
            total = len(tensors) - 1
        syncs_raising += mark_step_raised()
    problems = []
    if syncs_raising > 1:
        problems.append(f"{syncs_raising} syncs raised the failure")
    expected = [value_left(tensor) for tensor in first]
    for op, a, b in recipes:
        left, right = expected[a], expected[b]
        expected.append(None if left is None or right is None else op(left, right))
    got: torch.Tensor | None = None
    for k in rng.sample(range(len(first), len(tensors)), len(tensors) - len(first)):
        try:
            got = tensors[k].cpu()
        except IndexError:
            if expected[k] is not None:
                problems.append(f"tensor {k} has inputs with values, but raised")
            continue
        if expected[k] is None:
            problems.append(f"tensor {k} has an input with no value, but read")
        elif not torch.allclose(got, expected[k], atol=1e-5, equal_nan=True):
            problems.append(f"tensor {k} read a wrong value")
    del tensors, first, lazy, got
    try:
        lazyfuse.mark_step(wait=True)
    except IndexError as error:
        problems.append(f"a later mark_step raised: {error}")
    return problems


@pytest.mark.parametrize("execution", ["async", "sync"])
@pytest.mark.parametrize("steps", ["aten", "fused"])
def test_random_work_traced_on_a_failed_graph_reads_what_its_inputs_allow(
    execution: str, steps: str
) -> None:
    with lazyfuse.config.async_execution_as(execution == "async"):
        problems = problems_by_seed(random_work_traced_on_a_failed_graph, steps == "fused")
    assert not problems, problems
