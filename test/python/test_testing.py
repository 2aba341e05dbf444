"""lazyfuse.testing and its pytest plugin, tested with planted faults: a
check that cannot fail them proves nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
import torch._lazy.config
from torch import nn

import lazyfuse
import lazyfuse.testing
from conftest import ON_CUDA

pytest_plugins = ["pytester"]

README = Path(__file__).resolve().parents[2] / "README.md"


class OffOnLazy(torch.autograd.Function):
    """Identity forward; its backward scales by `factor` on the lazy device
    only: a planted gradient bug."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor  # type: ignore[attr-defined]
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        factor = ctx.factor if grad.device.type == "lazy" else 1.0  # type: ignore[attr-defined]
        return grad * factor, None


class PlantedWeightGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = OffOnLazy.apply(self.proj.weight, 1.01)
        return x @ weight.t() + self.proj.bias


@pytest.fixture
def forced_fallback() -> Iterator[str]:
    torch._lazy.config.set_force_fallback("aten::sin")
    yield "aten::sin"
    torch._lazy.config.set_force_fallback("")


def test_matching_outputs_and_gradients_pass() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(3, 4, requires_grad=True)
    lazyfuse.testing.assert_matches_eager(model, x)
    lazyfuse.testing.assert_matches_eager(
        lambda a, b: {"sum": (a * b).sum(1), "parts": [a.exp(), b.argmax(1)]},
        x,
        torch.randn(3, 4),
    )


def test_a_planted_output_difference_is_named_by_its_path() -> None:
    def planted(x: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        shifted = x + (1e-3 if x.device.type == "lazy" else 0.0)
        return {"logits": [x * 2, shifted]}

    with pytest.raises(AssertionError) as raised:
        lazyfuse.testing.assert_matches_eager(planted, torch.zeros(2, 3))
    message = str(raised.value)
    assert "output['logits'][1] differs from eager" in message
    assert "6 of 6 elements differ" in message
    assert "largest absolute difference 0.001 at index (0, 0)" in message
    assert "fused kernels ran:" in message


def test_a_planted_input_gradient_difference_is_caught() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(AssertionError, match=r"gradient of args\[0\] differs"):
        lazyfuse.testing.assert_matches_eager(lambda t: OffOnLazy.apply(t, 1.01) * 3, x)


def test_a_planted_parameter_gradient_difference_names_the_parameter() -> None:
    with pytest.raises(AssertionError, match=r"gradient of proj\.weight differs from eager"):
        lazyfuse.testing.assert_matches_eager(PlantedWeightGrad(), torch.randn(4, 3))
    # The same model without gradients matches: the fault is in backward only.
    lazyfuse.testing.assert_matches_eager(PlantedWeightGrad(), torch.randn(4, 3), check_grad=False)


def test_a_failure_names_the_ops_that_fell_back(forced_fallback: str) -> None:
    def planted(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + (1.0 if x.device.type == "lazy" else 0.0)

    with pytest.raises(AssertionError, match=r"eager fallbacks in the lazy run: aten::sin \(1x\)"):
        lazyfuse.testing.assert_matches_eager(planted, torch.randn(3))


def test_training_parity_passes_and_catches_a_planted_loss_difference() -> None:
    batches = [(torch.randn(6, 4), torch.randint(0, 3, (6,))) for _ in range(2)]

    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    def sgd(params: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)

    lazyfuse.testing.assert_trains_like_eager(model, batches, sgd, steps=5)

    def planted_loss(m: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        loss = lazyfuse.testing.default_loss(m, batch)
        return loss * (1.01 if loss.device.type == "lazy" else 1.0)

    with pytest.raises(AssertionError, match=r"loss of step 0 differs from eager"):
        lazyfuse.testing.assert_trains_like_eager(model, batches, sgd, loss_fn=planted_loss)


def test_a_late_recompile_is_reported_with_its_cause() -> None:
    batches = [(torch.randn(6, 4), torch.randn(6, 2))]
    calls = []

    def loss_fn(m: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls.append(None)
        inputs, target = batch
        # From the fourth step on, one more op: a new graph.
        extra = inputs.sum() * 0 if len(calls) > 3 + 5 else 0
        return nn.functional.mse_loss(m(inputs), target) + extra

    with pytest.raises(AssertionError) as raised:
        lazyfuse.testing.assert_trains_like_eager(
            lambda: nn.Linear(4, 2), batches, lambda p: torch.optim.SGD(p, lr=0.1), 5, loss_fn
        )
    message = str(raised.value)
    assert re.search(r"1 graph\(s\) compiled after the first 2 steps", message), message
    assert "test_testing.py" in message  # the call site of the new graph


def test_the_plugin_is_installed_through_its_entry_point() -> None:
    plugins = {entry.value for entry in entry_points(group="pytest11")}
    assert "pytest_lazyfuse" in plugins


PLUGIN_TESTS = """
import pytest
import torch
import torch._lazy.config


def test_fixtures(lazy_device, lazyfuse_metrics):
    y = (torch.ones(3).to(lazy_device) * 2).sin()
    assert y.cpu().tolist() == pytest.approx([0.9093] * 3, abs=1e-4)
    assert lazyfuse_metrics.graphs_executed() >= 1
    assert lazyfuse_metrics.fallbacks() == {}
    print("KERNEL_LAUNCHES", lazyfuse_metrics.kernel_launches())


def cos_through_the_fallback(device):
    torch._lazy.config.set_force_fallback("aten::cos")
    try:
        torch.ones(2).to(device).cos().cpu()
    finally:
        torch._lazy.config.set_force_fallback("")


@pytest.mark.lazyfuse_no_fallback
def test_marked_with_a_fallback(lazy_device):
    cos_through_the_fallback(lazy_device)


def test_unmarked_with_a_fallback(lazy_device):
    cos_through_the_fallback(lazy_device)
"""


def test_the_plugin_fixtures_marker_and_summary(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=PLUGIN_TESTS)
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_marked_with_a_fallback*",
            "*lazyfuse: ops fell back to eager in a test marked lazyfuse_no_fallback: "
            "aten::cos (1x)*",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*= lazyfuse =*", "*graphs compiled*", "*eager fallbacks per op: aten::cos 2*"]
    )


def test_the_plugin_summary_sums_pytest_xdist_workers(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist", reason="pytest-xdist is not installed (scripts/setup_env.sh)")
    pytester.makepyfile(test_user=PLUGIN_TESTS)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*= lazyfuse =*",
            "3 tests ran with lazyfuse loaded*",
            "*eager fallbacks per op: aten::cos 2*",
        ]
    )


def test_the_plugin_leaves_lazyfuse_unloaded_for_tests_that_do_not_use_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_plain="""
import sys


def test_plain():
    assert "lazyfuse" not in sys.modules
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "= lazyfuse =" not in result.stdout.str()


@pytest.mark.skipif(ON_CUDA, reason="a CUDA backing device always runs fused kernels")
def test_the_plugin_emulate_option_runs_fused_kernels(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without CPU kernels (the CPU backing device's default), only the
    # option makes fused kernels run.
    monkeypatch.setenv("LAZYFUSE_CPU_KERNELS", "0")
    pytester.makepyfile(test_user=PLUGIN_TESTS)
    plain = pytester.runpytest_subprocess("-s", "-k", "test_fixtures")
    plain.stdout.fnmatch_lines(["*KERNEL_LAUNCHES 0*"])
    emulated = pytester.runpytest_subprocess("-s", "-k", "test_fixtures", "--lazyfuse-emulate")
    emulated.assert_outcomes(passed=1)
    launches = re.search(r"KERNEL_LAUNCHES (\d+)", emulated.stdout.str())
    assert launches and int(launches.group(1)) > 0, emulated.stdout.str()


def readme_block(name: str) -> str:
    """The Python block that follows `<!-- test: name -->` in the README."""
    match = re.search(
        rf"<!-- test: {name} -->\s*```python\n(.*?)```", README.read_text(), re.DOTALL
    )
    assert match, f"README has no block marked {name}"
    return match.group(1)


@pytest.mark.parametrize("block", ["readme_hf_parity", "readme_training_parity"])
def test_the_readme_examples_pass(pytester: pytest.Pytester, block: str) -> None:
    if block == "readme_hf_parity":
        pytest.importorskip("transformers", reason="the README's HF example needs transformers")
    pytester.makepyfile(test_readme=readme_block(block))
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
