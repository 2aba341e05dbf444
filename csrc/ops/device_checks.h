#pragma once

// Argument checks the generated lazy kernels run before building IR, so that
// misuse ends in an exception naming the op instead of a crash.

#include <ATen/Tensor.h>
#include <ATen/core/ATen_fwd.h>
#include <c10/core/Scalar.h>

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

}  // namespace lazyfuse
