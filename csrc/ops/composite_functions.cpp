// ATen ops whose only kernel is a CompositeExplicitAutograd one that builds
// its result through views of bare lazy tensors (reshape, slice().copy_(),
// clone().masked_scatter_()). Below functionalization a view cannot be
// recorded, so these kernels compose the same result from lowered ops.
// Listed under "supported" in codegen/lazyfuse_ops.yaml; checks and their
// messages are eager's.

#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/TypeProperties.h>
#include <c10/util/MathConstants.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/lazy/core/metrics.h>

#include "generated/LazyNativeFunctions.h"
#include "ops/device_checks.h"

namespace lazyfuse {
namespace {

bool ScalarIs(const at::Scalar& scalar, double value) {
  return scalar.toComplexDouble() == c10::complex<double>(value, 0.0);
}

// at::zeros would zero_() a bare lazy tensor in place; fill is functional.
at::Tensor Zeros(at::IntArrayRef size, const at::TensorOptions& options) {
  return at::fill(at::empty(size, options), 0);
}

}  // namespace

at::Tensor LazyNativeFunctions::addr(const at::Tensor& self,
                                     const at::Tensor& vec1,
                                     const at::Tensor& vec2,
                                     const at::Scalar& beta,
                                     const at::Scalar& alpha) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::addr", "self", self);
  CheckOnLazyDevice("aten::addr", "vec1", vec1);
  CheckOnLazyDevice("aten::addr", "vec2", vec2);
  TORCH_CHECK(vec1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", vec1.dim(), "-D");
  TORCH_CHECK(vec2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", vec2.dim(), "-D");
  const at::ScalarType result_type = at::promoteTypes(
      at::promoteTypes(self.scalar_type(), vec1.scalar_type()), vec2.scalar_type());
  // Eager's checks: the graph's multiplications would truncate a fractional
  // beta into an integer result silently.
  for (const auto& [name, value] : {std::pair<const char*, const at::Scalar&>{"beta", beta},
                                    std::pair<const char*, const at::Scalar&>{"alpha", alpha}}) {
    TORCH_CHECK(!value.isBoolean() || result_type == at::kBool,
                "aten::addr: Boolean ",
                name,
                " only supported for Boolean results.");
    TORCH_CHECK(at::isFloatingType(result_type) || at::isComplexType(result_type) ||
                    value.isIntegral(/*includeBool=*/true),
                "aten::addr: For integral input tensors, argument ",
                name,
                " must not be a floating point number.");
  }
  at::Tensor outer = at::mul(at::unsqueeze_copy(vec1, 1), vec2);
  if (!ScalarIs(alpha, 1.0)) {
    outer = at::mul(outer, alpha);
  }
  if (ScalarIs(beta, 0.0)) {
    // Values in self are ignored, so its NaNs and infs do not propagate.
    const std::vector<int64_t> shape = at::infer_size(self.sizes(), outer.sizes());
    return at::expand_copy(outer, shape).to(result_type);
  }
  const at::Tensor scaled_self = ScalarIs(beta, 1.0) ? self : at::mul(self, beta);
  return at::add(scaled_self, outer).to(result_type);
}

at::Tensor LazyNativeFunctions::block_diag(at::TensorList tensors) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::block_diag", "tensors", tensors);
  TORCH_CHECK(!tensors.empty(), "torch.block_diag: expected at least one tensor");
  const at::ScalarType result_type = at::native::result_type(tensors);
  std::vector<at::Tensor> blocks;
  int64_t total_columns = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& tensor = tensors[i];
    TORCH_CHECK(tensor.dim() <= 2,
                "torch.block_diag: Input tensors must have 2 or fewer dimensions. Input ",
                i,
                " has ",
                tensor.dim(),
                " dimensions");
    // A 1-D tensor is one row, a 0-D tensor a 1x1 block, as in eager.
    at::Tensor block = tensor.dim() == 2   ? tensor
                       : tensor.dim() == 1 ? at::unsqueeze_copy(tensor, 0)
                                           : at::view_copy(tensor, {1, 1});
    blocks.push_back(block.to(result_type));
    total_columns += block.size(1);
  }
  const at::TensorOptions options = tensors[0].options().dtype(result_type);
  std::vector<at::Tensor> rows;
  int64_t columns_before = 0;
  for (const at::Tensor& block : blocks) {
    const int64_t height = block.size(0);
    const int64_t width = block.size(1);
    if (height == 0) {
      columns_before += width;
      continue;
    }
    std::vector<at::Tensor> pieces;
    if (columns_before > 0) {
      pieces.push_back(Zeros({height, columns_before}, options));
    }
    if (width > 0) {
      pieces.push_back(block);
    }
    const int64_t columns_after = total_columns - columns_before - width;
    if (columns_after > 0) {
      pieces.push_back(Zeros({height, columns_after}, options));
    }
    rows.push_back(pieces.empty() ? Zeros({height, 0}, options) : at::cat(pieces, 1));
    columns_before += width;
  }
  if (rows.empty()) {
    return Zeros({0, total_columns}, options);
  }
  return at::cat(rows, 0);
}

at::Tensor LazyNativeFunctions::_chunk_cat(at::TensorList tensors,
                                           int64_t dim,
                                           int64_t num_chunks) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::_chunk_cat", "tensors", tensors);
  TORCH_CHECK(!tensors.empty(), "_chunk_cat expects a non-empty input tensor list");
  TORCH_CHECK(num_chunks >= 1, "_chunk_cat expects positive num_chunks");
  const int64_t wrapped = at::maybe_wrap_dim(dim, tensors[0].dim());
  // Each tensor is zero-padded along dim to a multiple of num_chunks, viewed
  // as [leading dims..., num_chunks, -1], and the views are concatenated.
  std::vector<at::Tensor> chunked;
  for (const at::Tensor& tensor : tensors) {
    TORCH_CHECK(tensor.numel() > 0, "_chunk_cat expects non-empty tensor");
    TORCH_CHECK(tensor.scalar_type() == tensors[0].scalar_type(),
                "_chunk_cat expects all input tensors with the same dtype");
    TORCH_CHECK(tensor.dim() > wrapped, "_chunk_cat expects every tensor to have dim ", wrapped);
    TORCH_CHECK(tensor.sizes().slice(0, wrapped) == tensors[0].sizes().slice(0, wrapped),
                "_chunk_cat expects same sizes of 0,...,dim-1 dimensions for all tensors");
    const int64_t size = tensor.size(wrapped);
    const int64_t padded = (size + num_chunks - 1) / num_chunks * num_chunks;
    at::Tensor piece = tensor;
    if (padded != size) {
      std::vector<int64_t> pad(2 * (tensor.dim() - wrapped), 0);
      pad.back() = padded - size;
      piece = at::constant_pad_nd(tensor, pad, 0);
    }
    std::vector<int64_t> view(tensor.sizes().begin(), tensor.sizes().begin() + wrapped);
    view.push_back(num_chunks);
    view.push_back(-1);
    chunked.push_back(at::view_copy(piece, view));
  }
  return at::cat(chunked, wrapped + 1);
}

at::Tensor LazyNativeFunctions::trace(const at::Tensor& self) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::trace", "self", self);
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool,
                              "aten::trace: not implemented for 'Bool'");
  // sum promotes integer dtypes to int64, as eager's trace does.
  return at::sum(at::diagonal_copy(self));
}

at::Tensor LazyNativeFunctions::rot90(const at::Tensor& self, int64_t k, at::IntArrayRef dims) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::rot90", "self", self);
  const int64_t total_dims = self.dim();
  TORCH_CHECK(dims.size() == 2, "expected total rotation dims == 2, but got dims = ", dims.size());
  TORCH_CHECK(total_dims >= 2, "expected total dims >= 2, but got total dims = ", total_dims);
  TORCH_CHECK(dims[0] != dims[1] && std::abs(dims[0] - dims[1]) != total_dims,
              "expected rotation dims to be different, but got dim0 = ",
              dims[0],
              " and dim1 = ",
              dims[1]);
  TORCH_CHECK(dims[0] < total_dims && dims[0] >= -total_dims,
              "Rotation dim0 out of range, dim0 = ",
              dims[0]);
  TORCH_CHECK(dims[1] < total_dims && dims[1] >= -total_dims,
              "Rotation dim1 out of range, dim1 = ",
              dims[1]);
  // Eager's kernel ends in an in-place transpose_ of a bare tensor, which
  // cannot be recorded; transpose_copy is.
  switch ((4 + (k % 4)) % 4) {
    case 1:
      return at::transpose_copy(at::flip(self, {dims[1]}), dims[0], dims[1]);
    case 2:
      return at::flip(self, dims);
    case 3:
      return at::transpose_copy(at::flip(self, {dims[0]}), dims[0], dims[1]);
    default:
      return self.clone();
  }
}

at::Tensor LazyNativeFunctions::masked_scatter(const at::Tensor& self,
                                               const at::Tensor& mask,
                                               const at::Tensor& source) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::masked_scatter", "self", self);
  CheckOnLazyDevice("aten::masked_scatter", "mask", mask);
  CheckOnLazyDevice("aten::masked_scatter", "source", source);
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter: expected self and source to have same dtypes but got",
              self.scalar_type(),
              " and ",
              source.scalar_type());
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  const at::Tensor full_self = at::expand_copy(self, shape);
  const at::Tensor full_mask = at::expand_copy(mask, shape);
  // The k-th selected position takes source's k-th element (row-major), at
  // k + 1 behind one spare element that every unselected position reads.
  // Eager refuses a source with fewer elements than the mask selects, on the
  // host; here the gather's index is out of range then, and the read raises.
  const at::Tensor flat_mask = at::view_copy(full_mask, {-1});
  const at::Tensor position = at::mul(at::cumsum(flat_mask, 0, at::kLong), flat_mask);
  const at::Tensor padded = at::cat({Zeros({1}, source.options()), at::view_copy(source, {-1})}, 0);
  const at::Tensor taken = at::index_select(padded, 0, position);
  return at::where(full_mask, at::view_copy(taken, shape), full_self);
}

at::Tensor LazyNativeFunctions::masked_scatter_backward(const at::Tensor& grad_output,
                                                        const at::Tensor& mask,
                                                        at::IntArrayRef sizes) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::masked_scatter_backward", "grad_output", grad_output);
  CheckOnLazyDevice("aten::masked_scatter_backward", "mask", mask);
  // Source element k received the k-th selected position's value, so its
  // gradient is grad_output there; sources past the selection get zero.
  // Eager gathers with masked_select, whose size depends on the mask's
  // values; an index_add into one spare slot needs no host read.
  const int64_t numel = c10::multiply_integers(sizes);
  const std::vector<int64_t> shape = at::infer_size(grad_output.sizes(), mask.sizes());
  const at::Tensor flat_mask = at::view_copy(at::expand_copy(mask, shape), {-1});
  const at::Tensor flat_grad = at::view_copy(at::expand_copy(grad_output, shape), {-1});
  const at::Tensor ordinal = at::sub(at::cumsum(flat_mask, 0, at::kLong), 1);
  const at::Tensor spare = at::fill(at::empty(ordinal.sizes(), ordinal.options()), numel);
  const at::Tensor slot = at::where(flat_mask, at::clamp_max(ordinal, numel), spare);
  const at::Tensor accumulated =
      at::index_add(Zeros({numel + 1}, grad_output.options()), 0, slot, flat_grad);
  return at::view_copy(at::slice_copy(accumulated, 0, 0, numel), sizes);
}

at::Tensor LazyNativeFunctions::mvlgamma(const at::Tensor& self, int64_t p) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::mvlgamma", "self", self);
  TORCH_CHECK(self.scalar_type() != at::kBool, "The input tensor may not be a boolean tensor.");
  TORCH_CHECK(p >= 1, "p has to be greater than or equal to 1");
  const at::ScalarType dtype = at::isIntegralType(self.scalar_type(), /*includeBool=*/true)
                                   ? c10::typeMetaToScalarType(c10::get_default_dtype())
                                   : self.scalar_type();
  const at::Tensor x = self.to(dtype);
  // sum_i lgamma(x - i/2) for i < p, added in eager's order (its arange runs
  // from -(p-1)/2 up to 0), plus p(p-1)/4 * log(pi).
  std::vector<at::Tensor> terms;
  for (int64_t i = p - 1; i >= 0; --i) {
    terms.push_back(at::lgamma(at::sub(x, 0.5 * static_cast<double>(i))));
  }
  const double constant = static_cast<double>(p * (p - 1)) * std::log(c10::pi<double>) * 0.25;
  return at::add(at::sum(at::stack(terms, -1), -1), constant);
}

}  // namespace lazyfuse
