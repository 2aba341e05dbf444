// Factories whose values depend only on their scalars (arange, linspace,
// logspace): computed on the host by eager's own kernel, then entered into
// the graph as data, like a tensor moved to the lazy device. Graphs that use
// them stay whole, where an eager fallback would split them.

#include <ATen/Functions.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/csrc/lazy/core/tensor_impl.h>

#include "generated/LazyNativeFunctions.h"

namespace lazyfuse {
namespace {

at::Tensor& EnterHostValues(const at::Tensor& host, at::Tensor& out, const char* op) {
  auto lazy_out = torch::lazy::TryGetLtcTensor(out);
  TORCH_CHECK(lazy_out, "lazyfuse: ", op, ": out must be a lazy tensor");
  lazy_out->UpdateFromTensorOut(host);
  if (auto* impl = dynamic_cast<torch::lazy::LTCTensorImpl*>(out.unsafeGetTensorImpl())) {
    impl->force_refresh_sizes();
  }
  return out;
}

at::TensorOptions OnHost(const at::Tensor& out) {
  return out.options().device(c10::kCPU);
}

}  // namespace

at::Tensor& LazyNativeFunctions::arange_out(const at::Scalar& start,
                                            const at::Scalar& end,
                                            const at::Scalar& step,
                                            at::Tensor& out) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return EnterHostValues(at::arange(start, end, step, OnHost(out)), out, "aten::arange.start_out");
}

at::Tensor& LazyNativeFunctions::linspace_out(const at::Scalar& start,
                                              const at::Scalar& end,
                                              int64_t steps,
                                              at::Tensor& out) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return EnterHostValues(at::linspace(start, end, steps, OnHost(out)), out, "aten::linspace.out");
}

at::Tensor& LazyNativeFunctions::logspace_out(
    const at::Scalar& start, const at::Scalar& end, int64_t steps, double base, at::Tensor& out) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return EnterHostValues(
      at::logspace(start, end, steps, base, OnHost(out)), out, "aten::logspace.out");
}

}  // namespace lazyfuse
