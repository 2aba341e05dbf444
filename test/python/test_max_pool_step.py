"""max_pool2d_with_indices as a step runs it (csrc/ops/max_pool_step.cpp):
on the CPU backing device a contiguous float or double input takes
lazyfuse's own loop, and gives eager's values and indices exactly; every
other input is ATen's call."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from conftest import ON_CUDA

pytestmark = pytest.mark.skipif(ON_CUDA, reason="the own loop is the CPU backing device's")

OWN = "LazyFuseOwnMaxPool"


def awkward(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random values with NaN, infinities, ties and both zeros among them."""
    torch.manual_seed(0)
    x = torch.randn(*shape).to(dtype)
    flat = x.view(-1)
    flat[::11] = float("nan")
    flat[3::13] = float("inf")
    flat[4::13] = -float("inf")
    flat[5::7] = 0.0
    flat[6::7] = -0.0
    flat[8::9] = 1.0  # ties of a window's largest
    return x


WINDOWS: dict[str, dict[str, Any]] = {
    "2x2_stride_2": {"kernel_size": 2, "stride": 2},
    "3x3_stride_2_padded": {"kernel_size": 3, "stride": 2, "padding": 1},
    "3x3_stride_1": {"kernel_size": 3, "stride": 1, "padding": 1},
    "rectangular_dilated_ceil": {
        "kernel_size": (3, 2),
        "stride": (2, 1),
        "padding": (1, 1),
        "dilation": (1, 2),
        "ceil_mode": True,
    },
    "4x4_ceil": {"kernel_size": 4, "stride": 3, "ceil_mode": True},
    "1x1": {"kernel_size": 1},
}


@pytest.mark.parametrize("window", sorted(WINDOWS))
# "wide": rows of many more outputs than a vector pass takes, between edges.
@pytest.mark.parametrize(
    "shape", [(3, 4, 13, 11), (5, 9, 8), (2, 3, 7, 203)], ids=["4d", "3d", "wide"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float", "double"])
def test_values_and_indices_are_eagers(
    window: str, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x = awkward(shape, dtype)
    expected, expected_at = F.max_pool2d(x, return_indices=True, **WINDOWS[window])
    before = lazyfuse.metrics.counter_value(OWN)
    got, at = F.max_pool2d(x.to(lazyfuse.lazy_device()), return_indices=True, **WINDOWS[window])
    lazyfuse.mark_step()
    assert lazyfuse.metrics.counter_value(OWN) == before + 1  # the own loop ran
    assert torch.equal(at.cpu(), expected_at)
    got = got.cpu()
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num(), expected.nan_to_num())
    assert torch.equal(got.signbit(), expected.signbit())


def test_training_through_a_pool_matches_eager() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.MaxPool2d(2), torch.nn.ReLU())
    x = torch.randn(2, 3, 12, 12)
    lazy_layer = copy.deepcopy(layer).to(lazyfuse.lazy_device())
    layer(x).square().sum().backward()
    lazy_layer(x.to(lazyfuse.lazy_device())).square().sum().backward()
    lazyfuse.mark_step()
    for ours, theirs in zip(lazy_layer.parameters(), layer.parameters(), strict=True):
        torch.testing.assert_close(ours.grad.cpu(), theirs.grad)


# A channels-last input is contiguous on the lazy device, as all device data.
OTHER_INPUTS = {
    "bfloat16": lambda: awkward((2, 3, 8, 8), torch.bfloat16),
    "empty_batch": lambda: torch.randn(0, 3, 8, 8),
}


@pytest.mark.parametrize("case", [*sorted(OTHER_INPUTS), "cpu_kernels_off"])
def test_other_inputs_are_atens_call(case: str) -> None:
    x = OTHER_INPUTS[case]() if case in OTHER_INPUTS else awkward((2, 3, 8, 8))
    expected, expected_at = F.max_pool2d(x, 2, return_indices=True)
    before = lazyfuse.metrics.counter_value(OWN)
    off = case == "cpu_kernels_off"  # bisecting: every step is ATen's call
    with lazyfuse.config.kernel_settings_as(cpu_kernels=not off, emulate_cuda=False):
        got, at = F.max_pool2d(x.to(lazyfuse.lazy_device()), 2, return_indices=True)
        lazyfuse.mark_step()
    assert lazyfuse.metrics.counter_value(OWN) == before
    assert torch.equal(at.cpu(), expected_at)
    assert torch.equal(got.cpu().nan_to_num(), expected.nan_to_num())


def test_a_graph_on_the_cpu_stream_runs_under_the_settings_it_was_compiled_with() -> None:
    # Found as a flaky count in the test above: the step decided on its own
    # loop as it ran, on the stream's thread, and the settings had already
    # been put back when the graph got there. The choice is now made when the
    # graph is lowered, and setting the settings no longer waits for the
    # stream, so a step that read them as it ran would fail here.
    torch.manual_seed(0)
    x, weight = torch.randn(4, 8, 96, 96), torch.randn(16, 8, 5, 5)
    expected = F.max_pool2d(F.conv2d(x, weight), 2)
    before = lazyfuse.metrics.counter_value(OWN)
    lazy = lazyfuse.lazy_device()
    with lazyfuse.config.async_execution_as(True):
        with lazyfuse.config.kernel_settings_as(cpu_kernels=False, emulate_cuda=False):
            # The convolution keeps the graph running after mark_step returns.
            got = F.max_pool2d(F.conv2d(x.to(lazy), weight.to(lazy)), 2)
            lazyfuse.mark_step()
        assert lazyfuse.metrics.counter_value(OWN) == before
    torch.testing.assert_close(got.cpu(), expected)


def test_a_bad_window_raises_eagers_error() -> None:
    x = torch.randn(1, 1, 4, 4, device=lazyfuse.lazy_device())
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(x, 2, padding=2)
    assert torch.equal(x.cpu(), x.cpu())  # the process stays usable
