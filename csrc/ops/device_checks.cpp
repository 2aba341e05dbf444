#include "ops/device_checks.h"

#include <ATen/Functions.h>
#include <ATen/core/IListRef.h>
#include <c10/util/Exception.h>

namespace lazyfuse {

void CheckOnLazyDevice(const char* op, const char* arg, const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.device().type() == c10::kLazy) {
    return;
  }
  const bool cpu_scalar = tensor.is_cpu() && tensor.dim() == 0;
  TORCH_CHECK(
      cpu_scalar,
      "Expected all tensors to be on the same device, but found at least two devices, lazy:0 and ",
      tensor.device(),
      "! (when checking argument '",
      arg,
      "' of ",
      op,
      "; move it with .to(lazyfuse.lazy_device()))");
}

void CheckOnLazyDevice(const char* op, const char* arg, const std::optional<at::Tensor>& tensor) {
  if (tensor.has_value()) {
    CheckOnLazyDevice(op, arg, *tensor);
  }
}

void CheckOnLazyDevice(const char* op, const char* arg, const at::ITensorListRef& tensors) {
  for (const at::Tensor& tensor : tensors) {
    CheckOnLazyDevice(op, arg, tensor);
  }
}

bool HasMixedDtypes(std::initializer_list<std::optional<at::Tensor>> tensors) {
  std::optional<at::ScalarType> seen;
  for (const auto& tensor : tensors) {
    // Integer operands (labels, indices) legitimately differ from the data.
    if (!tensor.has_value() || !tensor->defined() || !tensor->is_floating_point()) {
      continue;
    }
    if (seen && *seen != tensor->scalar_type()) {
      return true;
    }
    seen = tensor->scalar_type();
  }
  return false;
}

at::Tensor CpuStandIn(const at::Tensor& tensor) {
  if (!tensor.defined()) {
    return tensor;
  }
  return at::empty(tensor.sizes(), tensor.options().device(c10::kCPU));
}

std::optional<at::Tensor> CpuStandIn(const std::optional<at::Tensor>& tensor) {
  if (!tensor.has_value()) {
    return std::nullopt;
  }
  return CpuStandIn(*tensor);
}

}  // namespace lazyfuse
