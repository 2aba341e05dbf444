#include "ops/storage_view_steps.h"

#include <ATen/Operators.h>

namespace lazyfuse {
namespace {

// `tensor` as the lazy tensor describes it: contiguous, at offset 0 of a
// storage that holds it and nothing else.
at::Tensor OwnStorage(const at::Tensor& tensor) {
  const bool own =
      tensor.is_contiguous() && tensor.storage_offset() == 0 &&
      tensor.storage().nbytes() == static_cast<size_t>(tensor.numel()) * tensor.element_size();
  return own ? tensor : tensor.clone(at::MemoryFormat::Contiguous);
}

}  // namespace

at::Tensor AsStridedCopyStep(const at::Tensor& self,
                             c10::SymIntArrayRef size,
                             c10::SymIntArrayRef stride,
                             std::optional<c10::SymInt> storage_offset) {
  return at::_ops::as_strided_copy::call(OwnStorage(self), size, stride, std::move(storage_offset));
}

at::Tensor AsStridedScatterStep(const at::Tensor& self,
                                const at::Tensor& src,
                                c10::SymIntArrayRef size,
                                c10::SymIntArrayRef stride,
                                std::optional<c10::SymInt> storage_offset) {
  return at::_ops::as_strided_scatter::call(
      OwnStorage(self), src, size, stride, std::move(storage_offset));
}

}  // namespace lazyfuse
