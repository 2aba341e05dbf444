// GradScaler's two ops on lazy tensors, composed from lazy ops so that a
// scaled training step needs no eager fallback. Functionalization turns
// GradScaler's in-place calls into these functional forms. Semantics follow
// ATen's CUDA kernels (AmpKernels.cu).
//
// Registered by hand, not listed in codegen/lazyfuse_ops.yaml: torchgen
// cannot emit the out= wrapper of an op whose out argument is a Tensor[].

#include "ops/amp_functions.h"

#include <ATen/Functions.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/library.h>

#include "ops/device_checks.h"

namespace lazyfuse {
namespace {

std::tuple<std::vector<at::Tensor>, at::Tensor> NonFiniteCheckAndUnscale(
    at::TensorList self, const at::Tensor& found_inf, const at::Tensor& inv_scale) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  constexpr const char* kOp = "aten::_amp_foreach_non_finite_check_and_unscale";
  CheckOnLazyDevice(kOp, "self", self);
  CheckOnLazyDevice(kOp, "found_inf", found_inf);
  CheckOnLazyDevice(kOp, "inv_scale", inv_scale);
  TORCH_CHECK(inv_scale.numel() == 1 && inv_scale.scalar_type() == at::kFloat,
              kOp,
              ": inv_scale must be a one-element float tensor");
  TORCH_CHECK(found_inf.numel() == 1 && found_inf.scalar_type() == at::kFloat,
              kOp,
              ": found_inf must be a one-element float tensor");
  std::vector<at::Tensor> unscaled;
  unscaled.reserve(self.size());
  at::Tensor any_non_finite;
  for (const at::Tensor& grad : self) {
    TORCH_CHECK(at::isFloatingType(grad.scalar_type()),
                kOp,
                ": expected floating-point gradients, got ",
                grad.scalar_type());
    // Multiplied in float, then rounded once, as the CUDA kernel's opmath.
    unscaled.push_back(at::mul(grad.to(at::kFloat), inv_scale).to(grad.scalar_type()));
    const at::Tensor bad = at::logical_not(at::isfinite(grad)).any();
    any_non_finite = any_non_finite.defined() ? at::logical_or(any_non_finite, bad) : bad;
  }
  if (!any_non_finite.defined()) {
    return {std::move(unscaled), found_inf.clone()};
  }
  const at::Tensor found = at::where(any_non_finite, at::ones_like(found_inf), found_inf);
  return {std::move(unscaled), found};
}

std::tuple<at::Tensor, at::Tensor> UpdateScale(const at::Tensor& self,
                                               const at::Tensor& growth_tracker,
                                               const at::Tensor& found_inf,
                                               double scale_growth_factor,
                                               double scale_backoff_factor,
                                               int64_t growth_interval) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  constexpr const char* kOp = "aten::_amp_update_scale";
  CheckOnLazyDevice(kOp, "self", self);
  CheckOnLazyDevice(kOp, "growth_tracker", growth_tracker);
  CheckOnLazyDevice(kOp, "found_inf", found_inf);
  TORCH_CHECK(growth_tracker.scalar_type() == at::kInt,
              kOp,
              ": growth_tracker must be an int32 tensor, got ",
              growth_tracker.scalar_type());
  TORCH_CHECK(self.scalar_type() == at::kFloat,
              kOp,
              ": the scale must be a float tensor, got ",
              self.scalar_type());
  // A step with an inf or NaN backs off and restarts the count; growth_interval
  // clean steps in a row grow the scale, unless the grown scale overflows.
  const at::Tensor found = at::ne(found_inf, 0);
  const at::Tensor successful = at::add(growth_tracker, 1);
  const at::Tensor grow =
      at::logical_and(at::logical_not(found), at::eq(successful, growth_interval));
  const at::Tensor grown = at::mul(self, scale_growth_factor);
  const at::Tensor grown_or_kept = at::where(at::isfinite(grown), grown, self);
  const at::Tensor scale =
      at::where(found, at::mul(self, scale_backoff_factor), at::where(grow, grown_or_kept, self));
  const at::Tensor restart = at::logical_or(found, grow);
  const at::Tensor tracker = at::mul(successful, at::logical_not(restart).to(at::kInt));
  return {scale, tracker};
}

}  // namespace

void RegisterAmpFunctions() {
  // Leaked on purpose: registrations must outlive every dispatcher call.
  static auto* library =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::Lazy, __FILE__, __LINE__);
  library->impl("_amp_foreach_non_finite_check_and_unscale", TORCH_FN(NonFiniteCheckAndUnscale));
  library->impl("_amp_update_scale", TORCH_FN(UpdateScale));
}

}  // namespace lazyfuse
