// Ops returning Tensor[] (split, chunk, unbind). torchgen's lazy codegen
// cannot emit them, so they are assembled here from slice_copy / select_copy,
// which are lowered. ATen's own composite kernels would instead slice bare
// lazy tensors through as_strided, which has no lowering.

#include "ops/split_functions.h"

#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/library.h>

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
  TORCH_CHECK(self.dim() > 0, "Dimension specified as 0 but tensor has no dimensions");
  dim = at::maybe_wrap_dim(dim, self.dim());
  std::vector<at::Tensor> parts;
  parts.reserve(self.size(dim));
  for (int64_t i = 0; i < self.size(dim); ++i) {
    parts.push_back(at::select_copy(self, dim, i));
  }
  return parts;
}

namespace {

// tensor_split with a tensor of split points. Eager insists the tensor is on
// the CPU; a lazy one is read on the host first, because the split points
// decide the result's shapes (counted as LazyFuseDataDependentSync, as a
// boolean mask's nonzero is). The checks and their messages are eager's.
std::vector<at::Tensor> TensorSplitByTensor(const at::Tensor& self,
                                            const at::Tensor& indices_or_sections,
                                            int64_t dim) {
  at::Tensor host = indices_or_sections;
  if (host.device().is_lazy()) {
    TORCH_LAZY_COUNTER("LazyFuseDataDependentSync", 1);
    host = host.cpu();
  }
  TORCH_CHECK(host.device().is_cpu(),
              "tensor_split expected tensor_indices_or_sections to be on cpu, but it's on ",
              host.device());
  TORCH_CHECK(host.scalar_type() == at::kLong,
              "tensor_split expected tensor_indices_or_sections to have dtype of long, but got ",
              host.scalar_type());
  TORCH_CHECK(host.dim() <= 1,
              "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
              "one-dimensional tensor, but got a tensor with ",
              host.dim(),
              " dims");
  if (host.dim() == 0) {
    return at::tensor_split(self, host.item<int64_t>(), dim);
  }
  const at::Tensor contiguous = host.contiguous();
  const int64_t* begin = contiguous.const_data_ptr<int64_t>();
  return at::tensor_split(self, std::vector<int64_t>(begin, begin + contiguous.numel()), dim);
}

}  // namespace

void RegisterSplitOverrides() {
  // At the autograd key, above the composite kernel that holds eager's CPU
  // check; the int overloads it calls record autograd as usual. Leaked on
  // purpose: registrations must outlive every dispatcher call.
  static auto* library = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutogradLazy, __FILE__, __LINE__);
  library->impl("tensor_split.tensor_indices_or_sections", TORCH_FN(TensorSplitByTensor));
}

}  // namespace lazyfuse
