#pragma once

// Shapes by running ATen's meta kernels: a tensor's stand-in on the meta
// device has its sizes, strides and dtype, and no data.

#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>

namespace lazyfuse {

// A user's TorchDispatchMode sees the ops of lazy kernels that run above the
// Python key (autograd, functionalization). Their meta computations are
// lazyfuse's own, absent from eager, and stay hidden: selective activation
// checkpointing tried to save them.
class HiddenFromDispatchModes {
 private:
  c10::impl::ExcludeDispatchKeyGuard guard_{
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot})};
};

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
