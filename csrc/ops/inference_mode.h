#pragma once

// Note [Inference mode and functionalization]: under torch.inference_mode()
// two things break functionalization, which lazy tensors rely on:
//
// - A view of a tensor made outside inference mode is, in eager, a normal
//   tensor sharing its base's version counter. Functionalization wraps the
//   lazy view kernel's output, and a wrapper of a tensor made in inference
//   mode is an inference tensor, which cannot share a version counter
//   ("Cannot set version_counter for inference tensor" from F.linear's
//   weight.t()). So a lazy view of a normal tensor is made a normal tensor,
//   as eager's is (NormalViewGuard, in every generated view kernel).
// - Autograd keys are excluded, so CompositeImplicitAutograd ops (linear,
//   layer_norm, ...) no longer decompose above functionalization; they reach
//   its fallback, which runs them below it on bare lazy tensors, where their
//   views cannot be recorded. The functional ones get Functionalize kernels
//   that decompose them there when any argument, in a tensor list too, is
//   lazy, and act as the fallback on others (RegisterFunctionalizedComposites).
//   Kernels lazyfuse puts at the autograd key for lazy tensors (tensor_split
//   with lazy split points, ops/host_arguments.cpp) get a Functionalize
//   kernel too.

#include <ATen/Tensor.h>
#include <c10/core/InferenceMode.h>

#include <optional>

namespace lazyfuse {

// Inside inference mode, makes the tensors created in its scope normal
// tensors when `base` is one.
class NormalViewGuard {
 public:
  explicit NormalViewGuard(const at::Tensor& base) {
    if (c10::InferenceMode::is_enabled() && base.defined() && !base.is_inference()) {
      normal_.emplace(/*enabled=*/false);
    }
  }

 private:
  std::optional<c10::InferenceMode> normal_;
};

}  // namespace lazyfuse
