"""torch's fused optimizer ops, called on lazy tensors: torch._fused_adam_
and its kin write lists of tensors. They run eagerly (no lowering), and the
eager fallback wrote back single tensors only, so a written list kept its
old values: _fused_adam (the functional form) returned its inputs unchanged,
and _fused_adam_ with amsgrad updated nothing. Without amsgrad, torch's
functionalization of _fused_adam_ raised an internal assert on the empty
max_exp_avg_sqs list. Values must be eager's, bit for bit: both run the
same CPU kernel."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import lazyfuse

Lists = list[list[torch.Tensor]]


def state(device: torch.device | str, lists: int, empty: tuple[int, ...] = ()) -> Lists:
    torch.manual_seed(0)
    made = [[torch.rand(4, 3), torch.rand(5)] for _ in range(lists)]  # sqs are >= 0
    for k in empty:
        made[k] = []
    return [[t.to(device) for t in tensors] for tensors in made]


def steps(device: torch.device | str) -> list[torch.Tensor]:
    return [torch.tensor(3.0).to(device), torch.tensor(3.0).to(device)]


ADAM = {"lr": 0.1, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.01, "eps": 1e-8}


def adam(op: Callable[..., object], amsgrad: bool) -> Callable[[torch.device | str], Lists]:
    def run(device: torch.device | str) -> Lists:
        lists = state(device, 5, empty=() if amsgrad else (4,))
        op(*lists, steps(device), **ADAM, amsgrad=amsgrad, maximize=False)
        return lists

    return run


def sgd(momentum: float) -> Callable[[torch.device | str], Lists]:
    def run(device: torch.device | str) -> Lists:
        lists = state(device, 3, empty=(2,) if momentum == 0 else ())
        torch._fused_sgd_(
            *lists,
            weight_decay=0.01,
            momentum=momentum,
            lr=0.1,
            dampening=0.0,
            nesterov=False,
            maximize=False,
            is_first_step=False,
        )
        return lists

    return run


def adagrad(device: torch.device | str) -> Lists:
    lists = state(device, 3)
    torch._fused_adagrad_(
        *lists, steps(device), lr=0.1, lr_decay=0.0, weight_decay=0.0, eps=1e-10, maximize=False
    )
    return lists


def functional_adam(device: torch.device | str) -> Lists:
    lists = state(device, 5, empty=(4,))
    out = torch.ops.aten._fused_adam(*lists, steps(device), **ADAM, amsgrad=False, maximize=False)
    return [*out, *lists]  # the results, then the inputs it must leave alone


STEPS: dict[str, Callable[[torch.device | str], Lists]] = {
    "adam": adam(torch._fused_adam_, amsgrad=False),
    "adam_amsgrad": adam(torch._fused_adam_, amsgrad=True),
    "adamw": adam(torch._fused_adamw_, amsgrad=False),
    "adamw_amsgrad": adam(torch._fused_adamw_, amsgrad=True),
    "sgd": sgd(momentum=0.0),
    "sgd_momentum": sgd(momentum=0.9),
    "adagrad": adagrad,
    "functional_adam": functional_adam,
}


@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_fused_optimizer_step_writes_eagers_values(engine: str, step: str) -> None:
    expected = STEPS[step]("cpu")
    got = STEPS[step](lazyfuse.lazy_device())
    lazyfuse.mark_step()
    assert [len(tensors) for tensors in got] == [len(tensors) for tensors in expected]
    for lazy_list, eager_list in zip(got, expected, strict=True):
        for lazy, eager in zip(lazy_list, eager_list, strict=True):
            torch.testing.assert_close(lazy.cpu(), eager, rtol=0, atol=0)
    # Each parameter moved: a lost write would leave it as it was.
    assert not torch.equal(got[0][0].cpu(), state("cpu", 1)[0][0])


def test_a_fused_step_with_a_cpu_tensor_among_lazy_ones_names_the_argument() -> None:
    lazy = lazyfuse.lazy_device()
    lists = state(lazy, 5, empty=(4,))
    lists[2][1] = lists[2][1].cpu()
    with pytest.raises(RuntimeError, match="_fused_adam_.*exp_avgs.*lazy"):
        torch._fused_adam_(*lists, steps(lazy), **ADAM, amsgrad=False, maximize=False)
    lazyfuse.mark_step()  # the process goes on
