// Ops returning Tensor[] (split, chunk, unbind). torchgen's lazy codegen
// cannot emit them, so they are assembled here from slice_copy / select_copy,
// which are lowered. ATen's own composite kernels would instead slice bare
// lazy tensors through as_strided, which has no lowering.

#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <torch/csrc/lazy/core/metrics.h>

#include "generated/LazyNativeFunctions.h"

namespace lazyfuse {
namespace {

std::vector<at::Tensor> SliceBySizes(const at::Tensor& self,
                                     at::IntArrayRef split_sizes,
                                     int64_t dim) {
  TORCH_CHECK(self.dim() != 0, "split expects at least a 1-dimensional tensor");
  dim = at::maybe_wrap_dim(dim, self.dim());
  const int64_t dim_size = self.size(dim);
  int64_t total = 0;
  for (int64_t size : split_sizes) {
    TORCH_CHECK(size >= 0,
                "split_with_sizes expects split_sizes have only non-negative entries, but got "
                "split_sizes=",
                split_sizes);
    total += size;
  }
  TORCH_CHECK(total == dim_size,
              "split_with_sizes expects split_sizes to sum exactly to ",
              dim_size,
              " (input tensor's size at dimension ",
              dim,
              "), but got split_sizes=",
              split_sizes);
  std::vector<at::Tensor> parts;
  parts.reserve(split_sizes.size());
  int64_t start = 0;
  for (int64_t size : split_sizes) {
    parts.push_back(at::slice_copy(self, dim, start, start + size, 1));
    start += size;
  }
  return parts;
}

std::vector<int64_t> EvenSplitSizes(const at::Tensor& self, int64_t split_size, int64_t dim) {
  TORCH_CHECK(self.dim() != 0, "split expects at least a 1-dimensional tensor");
  TORCH_CHECK(
      split_size >= 0, "split expects split_size be non-negative, but got split_size=", split_size);
  const int64_t dim_size = self.size(at::maybe_wrap_dim(dim, self.dim()));
  TORCH_CHECK(split_size > 0 || dim_size == 0,
              "split_size can only be 0 if dimension size is 0, but got dimension size of ",
              dim_size);
  const int64_t chunks =
      split_size == 0 ? 1 : std::max<int64_t>((dim_size + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes(chunks, split_size);
  sizes.back() = split_size == 0 ? 0 : dim_size - split_size * (chunks - 1);
  return sizes;
}

}  // namespace

std::vector<at::Tensor> LazyNativeFunctions::split_copy(const at::Tensor& self,
                                                        int64_t split_size,
                                                        int64_t dim) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return SliceBySizes(self, EvenSplitSizes(self, split_size, dim), dim);
}

std::vector<at::Tensor> LazyNativeFunctions::unsafe_split(const at::Tensor& self,
                                                          int64_t split_size,
                                                          int64_t dim) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return SliceBySizes(self, EvenSplitSizes(self, split_size, dim), dim);
}

std::vector<at::Tensor> LazyNativeFunctions::split_with_sizes_copy(const at::Tensor& self,
                                                                   at::IntArrayRef split_sizes,
                                                                   int64_t dim) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return SliceBySizes(self, split_sizes, dim);
}

std::vector<at::Tensor> LazyNativeFunctions::unsafe_split_with_sizes(const at::Tensor& self,
                                                                     at::IntArrayRef split_sizes,
                                                                     int64_t dim) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return SliceBySizes(self, split_sizes, dim);
}

std::vector<at::Tensor> LazyNativeFunctions::unbind_copy(const at::Tensor& self, int64_t dim) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  TORCH_CHECK_INDEX(self.dim() > 0, "Dimension specified as 0 but tensor has no dimensions");
  dim = at::maybe_wrap_dim(dim, self.dim());
  std::vector<at::Tensor> parts;
  parts.reserve(self.size(dim));
  for (int64_t i = 0; i < self.size(dim); ++i) {
    parts.push_back(at::select_copy(self, dim, i));
  }
  return parts;
}

}  // namespace lazyfuse
