"""The codegen step's own logic, checked without running torchgen: the same
header must serve every supported torch release (2.11 to 2.15)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "codegen"))
import gen_lazyfuse  # noqa: E402

SHAPE = "TORCH_API std::vector<torch::lazy::Shape> compute_shape_"


def test_parameter_names_do_not_count() -> None:
    # torch 2.15 renamed _cdist_backward's `grad` to `grad_output`.
    old = SHAPE + "_cdist_backward(const at::Tensor & grad, double p, const at::Tensor & cdist);"
    new = SHAPE + "_cdist_backward(const at::Tensor & grad_output, double p, const at::Tensor & c);"
    assert gen_lazyfuse.without_parameter_names(old) == gen_lazyfuse.without_parameter_names(new)


@pytest.mark.parametrize(
    "first, second",
    [
        ("f(double p, int64_t dim);", "f(int64_t p, double dim);"),
        ("f(at::IntArrayRef size);", "f(at::SymIntArrayRef size);"),
        ("f(const ::std::optional<at::Tensor> & w);", "f(const at::Tensor & w);"),
        ("f(const c10::List<::std::optional<at::Tensor>> & i);", "f(at::TensorList i);"),
        ("f(const at::Tensor & self);", "g(const at::Tensor & self);"),
    ],
)
def test_types_and_names_of_functions_still_count(first: str, second: str) -> None:
    assert gen_lazyfuse.without_parameter_names(
        SHAPE + first
    ) != gen_lazyfuse.without_parameter_names(SHAPE + second)


def test_validation_names_what_is_missing(tmp_path: Path) -> None:
    header = tmp_path / "shape_inference.h"
    header.write_text(SHAPE + "mine(const at::Tensor & grad, double p);\n")
    validate = gen_lazyfuse.validate_with_torch_header(str(header))
    validate("", [SHAPE + "mine(const at::Tensor & grad_output, double scale);"])
    missing = SHAPE + "other(const at::Tensor & self);"
    with pytest.raises(RuntimeError, match="Missing shape inference function") as raised:
        validate("", [missing])
    assert missing in str(raised.value) and str(header) in str(raised.value)


def test_shape_overrides_are_read_from_the_lazyfuse_namespace_only() -> None:
    header = Path(__file__).resolve().parents[2] / "csrc" / "ops" / "shape_inference.h"
    overrides = gen_lazyfuse.shape_overrides(header.read_text())
    assert "convolution_backward" in overrides
    # torch::lazy's declarations (ours or torch's) are never overrides.
    assert "kthvalue" not in overrides and "where" not in overrides
