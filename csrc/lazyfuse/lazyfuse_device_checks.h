#pragma once

// Argument checks the generated lazy kernels run before building IR, so that
// misuse ends in an exception naming the op instead of a crash, and the
// comparisons their IR reuse relies on.

#include <ATen/Tensor.h>
#include <ATen/core/ATen_fwd.h>
#include <c10/core/Scalar.h>
#include <torch/csrc/lazy/core/ir.h>

#include <initializer_list>
#include <optional>

namespace lazyfuse {

// A tensor argument of a lazy op must be lazy, or a CPU scalar (which, as in
// eager CUDA, may mix with device tensors).
void CheckOnLazyDevice(const char* op, const char* arg, const at::Tensor& tensor);
void CheckOnLazyDevice(const char* op, const char* arg, const std::optional<at::Tensor>& tensor);
void CheckOnLazyDevice(const char* op, const char* arg, const at::ITensorListRef& tensors);

// Whether the defined floating-point tensors among these differ in dtype.
bool HasMixedDtypes(std::initializer_list<std::optional<at::Tensor>> tensors);

// An uninitialised CPU tensor with the same sizes and dtype, to let an eager
// kernel raise its own argument errors.
at::Tensor CpuStandIn(const at::Tensor& tensor);
std::optional<at::Tensor> CpuStandIn(const std::optional<at::Tensor>& tensor);

// Exact equality of two scalars, type included (IR reuse must not recycle a
// node built for 1 when 1.0 is asked for).
bool SameScalar(const at::Scalar& a, const at::Scalar& b);

// Whether an operand of a node is this very value. LTC's Output == Value
// compares hashes, and device data hashes only its shape: with it, IR reuse
// took where(m, b, a) for where(m, a, b) and swapped the two inputs.
inline bool SameOperand(const torch::lazy::Output& operand, const torch::lazy::Value& value) {
  return operand.node == value.node.get() && operand.index == value.index;
}

}  // namespace lazyfuse
