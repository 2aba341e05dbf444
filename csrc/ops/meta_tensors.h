#pragma once

// Shapes by running ATen's meta kernels: a tensor's stand-in on the meta
// device has its sizes, strides and dtype, and no data.

#include <ATen/ops/empty_strided.h>

#include <optional>

namespace lazyfuse {

inline at::Tensor OnMeta(const at::Tensor& tensor) {
  return at::empty_strided(tensor.sizes(), tensor.strides(), tensor.options().device(at::kMeta));
}

inline std::optional<at::Tensor> OnMeta(const std::optional<at::Tensor>& tensor) {
  if (!tensor.has_value() || !tensor->defined()) {
    return std::nullopt;
  }
  return OnMeta(*tensor);
}

}  // namespace lazyfuse
