// ATen ops whose only kernel is a CompositeExplicitAutograd one that reads
// its arguments' storage. A lazy tensor has none, and reports a contiguous
// layout of its own (README, "Notes for PyTorch users"): its storage would
// hold exactly its own elements, at offset 0. Listed under "supported" in
// codegen/lazyfuse_ops.yaml.

#include <ATen/Functions.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <vector>

#include "generated/LazyNativeFunctions.h"
#include "ops/device_checks.h"

namespace lazyfuse {

// Forward-mode AD keeps each tangent in its primal's layout
// (torch/csrc/autograd/autograd_meta.cpp, has_same_meta); a tangent that
// has it is used as it is.
bool LazyNativeFunctions::_has_same_storage_numel(const at::Tensor& self, const at::Tensor& other) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return self.sym_numel() == other.sym_numel();
}

// A tangent that has not its primal's layout is copied into zeros that
// have: `other`'s sizes after `self`'s first self_num_batch_dims (vmap's
// batch dimensions over forward AD), in `self`'s dtype.
at::Tensor LazyNativeFunctions::_new_zeros_with_same_feature_meta(const at::Tensor& self,
                                                                  const at::Tensor& other,
                                                                  int64_t self_num_batch_dims) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::_new_zeros_with_same_feature_meta", "self", self);
  TORCH_CHECK(self_num_batch_dims >= 0 && self_num_batch_dims <= self.dim(),
              "aten::_new_zeros_with_same_feature_meta: self_num_batch_dims is ",
              self_num_batch_dims,
              ", but self has ",
              self.dim(),
              " dimensions");
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().begin() + self_num_batch_dims);
  sizes.insert(sizes.end(), other.sizes().begin(), other.sizes().end());
  // at::zeros would zero_() a bare lazy tensor in place; fill is functional.
  return at::fill(at::empty(sizes, self.options()), 0);
}

// The copy-on-write clone shares storage until a write; a lazy tensor's
// value is immutable data, so a clone is that.
at::Tensor LazyNativeFunctions::_lazy_clone(const at::Tensor& self) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return at::clone(self);
}

}  // namespace lazyfuse
