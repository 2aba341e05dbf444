#include "ops/shape_inference.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/TypeProperties.h>

#include "ops/meta_tensors.h"

namespace torch::lazy {
namespace {

using lazyfuse::OnMeta;

Shape ShapeOf(const at::Tensor& tensor) {
  return Shape(tensor.scalar_type(), tensor.sizes().vec());
}

// A floating tensor reduced over `dim` (all of them where none is given),
// shaped as ATen's reductions shape it, errors included. The meta kernels of
// var, logsumexp, nansum and prod are Python, some 10 us a node built
// (test_trace_cost.py); other dtypes and an empty dim list take them.
std::optional<Shape> FloatingReduction(const at::Tensor& self,
                                       at::OptionalIntArrayRef dim,
                                       bool keepdim) {
  const at::ScalarType type = self.scalar_type();
  const bool floating =
      type == at::kFloat || type == at::kDouble || type == at::kHalf || type == at::kBFloat16;
  if (!floating || self.dim() == 0 || (dim.has_value() && dim->empty())) {
    return std::nullopt;
  }
  const at::DimVector sizes =
      at::native::shape_from_dim_mask(self, at::native::make_dim_mask(dim, self.dim()), keepdim);
  return Shape(type, std::vector<int64_t>(sizes.begin(), sizes.end()));
}

}  // namespace

std::vector<Shape> compute_shape_where(const at::Tensor& condition,
                                       const at::Tensor& self,
                                       const at::Tensor& other) {
  TORCH_CHECK(condition.scalar_type() == at::kBool || condition.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  auto sizes = at::infer_size(condition.sizes(), at::infer_size(self.sizes(), other.sizes()));
  return {Shape(at::result_type(self, other), sizes)};
}

std::vector<Shape> compute_shape_fill(const at::Tensor& self, const at::Scalar& /*value*/) {
  return {Shape(self.scalar_type(), self.sizes().vec())};
}

std::vector<Shape> compute_shape_fill(const at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(),
              " dimensions.");
  return {Shape(self.scalar_type(), self.sizes().vec())};
}

std::vector<Shape> compute_shape_mse_loss_backward(const at::Tensor& /*grad_output*/,
                                                   const at::Tensor& self,
                                                   const at::Tensor& /*target*/,
                                                   int64_t /*reduction*/) {
  return {Shape(self.scalar_type(), self.sizes().vec())};
}

// Reduction::None keeps the input's shape; mean and sum give a 0-dim result.
std::vector<Shape> compute_shape_huber_loss(const at::Tensor& self,
                                            const at::Tensor& /*target*/,
                                            int64_t reduction,
                                            double /*delta*/) {
  if (reduction == at::Reduction::None) {
    return {ShapeOf(self)};
  }
  return {Shape(self.scalar_type(), {})};
}

std::vector<Shape> compute_shape_huber_loss_backward(const at::Tensor& /*grad_output*/,
                                                     const at::Tensor& self,
                                                     const at::Tensor& /*target*/,
                                                     int64_t /*reduction*/,
                                                     double /*delta*/) {
  return {ShapeOf(self)};
}

// The backward of a view scatters the gradient into zeros of the input's shape.
std::vector<Shape> compute_shape_select_backward(const at::Tensor& grad_output,
                                                 at::IntArrayRef input_sizes,
                                                 int64_t /*dim*/,
                                                 int64_t /*index*/) {
  return {Shape(grad_output.scalar_type(), input_sizes.vec())};
}

std::vector<Shape> compute_shape_slice_backward(const at::Tensor& grad_output,
                                                at::IntArrayRef input_sizes,
                                                int64_t /*dim*/,
                                                int64_t /*start*/,
                                                int64_t /*end*/,
                                                int64_t /*step*/) {
  return {Shape(grad_output.scalar_type(), input_sizes.vec())};
}

std::vector<Shape> compute_shape_hardtanh(const at::Tensor& self,
                                          const at::Scalar& /*min_val*/,
                                          const at::Scalar& /*max_val*/) {
  return {ShapeOf(self)};
}

std::vector<Shape> compute_shape_nan_to_num(const at::Tensor& self,
                                            std::optional<double> /*nan*/,
                                            std::optional<double> /*posinf*/,
                                            std::optional<double> /*neginf*/) {
  return {ShapeOf(self)};
}

std::vector<Shape> compute_shape_hardtanh_backward(const at::Tensor& grad_output,
                                                   const at::Tensor& /*self*/,
                                                   const at::Scalar& /*min_val*/,
                                                   const at::Scalar& /*max_val*/) {
  return {ShapeOf(grad_output)};
}

// The composite kernels of these ops run on meta tensors, so the shape and
// dtype rules (and their errors) are eager's own.
std::vector<Shape> compute_shape_logsumexp(const at::Tensor& self,
                                           at::IntArrayRef dim,
                                           bool keepdim) {
  if (auto shape = FloatingReduction(self, dim, keepdim)) {
    return {*shape};
  }
  return {ShapeOf(at::logsumexp(OnMeta(self), dim, keepdim))};
}

std::vector<Shape> compute_shape_prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (auto shape = FloatingReduction(self, std::nullopt, /*keepdim=*/false); shape && !dtype) {
    return {*shape};
  }
  return {ShapeOf(at::prod(OnMeta(self), dtype))};
}

std::vector<Shape> compute_shape_roll(const at::Tensor& self,
                                      at::IntArrayRef shifts,
                                      at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  TORCH_CHECK(dims.empty() || shifts.size() == dims.size(),
              "shifts and dimensions must align. shifts: ",
              shifts.size(),
              ", dims:",
              dims.size());
  return {ShapeOf(self)};
}

std::vector<Shape> compute_shape_var(const at::Tensor& self,
                                     at::OptionalIntArrayRef dim,
                                     const std::optional<at::Scalar>& correction,
                                     bool keepdim) {
  if (auto shape = FloatingReduction(self, dim, keepdim)) {
    return {*shape};
  }
  return {ShapeOf(at::var(OnMeta(self), dim, correction, keepdim))};
}

std::vector<Shape> compute_shape_as_strided_scatter(const at::Tensor& self,
                                                    const at::Tensor& /*src*/,
                                                    at::IntArrayRef /*size*/,
                                                    at::IntArrayRef /*stride*/,
                                                    std::optional<int64_t> /*storage_offset*/) {
  return {ShapeOf(self)};
}

std::vector<Shape> compute_shape_native_group_norm(const at::Tensor& input,
                                                   const std::optional<at::Tensor>& /*weight*/,
                                                   const std::optional<at::Tensor>& /*bias*/,
                                                   int64_t N,
                                                   int64_t C,
                                                   int64_t /*HxW*/,
                                                   int64_t group,
                                                   double /*eps*/) {
  TORCH_CHECK(group > 0 && C % group == 0,
              "Expected number of channels in input to be divisible by num_groups, but got input "
              "of shape ",
              input.sizes(),
              " and num_groups=",
              group);
  // output, mean and rstd, the statistics one per (sample, group)
  return {ShapeOf(input),
          Shape(input.scalar_type(), {N, group}),
          Shape(input.scalar_type(), {N, group})};
}

std::vector<Shape> compute_shape_native_group_norm_backward(
    const at::Tensor& /*grad_out*/,
    const at::Tensor& input,
    const at::Tensor& /*mean*/,
    const at::Tensor& /*rstd*/,
    const std::optional<at::Tensor>& /*weight*/,
    int64_t /*N*/,
    int64_t C,
    int64_t /*HxW*/,
    int64_t /*group*/,
    std::array<bool, 3> /*output_mask*/) {
  return {ShapeOf(input), Shape(input.scalar_type(), {C}), Shape(input.scalar_type(), {C})};
}

std::vector<Shape> compute_shape_diagonal_backward(const at::Tensor& grad_output,
                                                   at::IntArrayRef input_sizes,
                                                   int64_t /*offset*/,
                                                   int64_t /*dim1*/,
                                                   int64_t /*dim2*/) {
  return {Shape(grad_output.scalar_type(), input_sizes.vec())};
}

std::vector<Shape> compute_shape_unfold_backward(const at::Tensor& grad_in,
                                                 at::IntArrayRef input_sizes,
                                                 int64_t /*dim*/,
                                                 int64_t /*size*/,
                                                 int64_t /*step*/) {
  return {Shape(grad_in.scalar_type(), input_sizes.vec())};
}

std::vector<Shape> compute_shape_logit(const at::Tensor& self, std::optional<double> /*eps*/) {
  // Integer inputs compute in the default float type, as in eager.
  const at::ScalarType dtype = at::isIntegralType(self.scalar_type(), /*includeBool=*/true)
                                   ? at::typeMetaToScalarType(at::get_default_dtype())
                                   : self.scalar_type();
  return {Shape(dtype, self.sizes().vec())};
}

std::vector<Shape> compute_shape_dot(const at::Tensor& self, const at::Tensor& tensor) {
  TORCH_CHECK(self.dim() == 1 && tensor.dim() == 1,
              "1D tensors expected, but got ",
              self.dim(),
              "D and ",
              tensor.dim(),
              "D tensors");
  TORCH_CHECK(self.scalar_type() == tensor.scalar_type(),
              "dot : expected both vectors to have same dtype, but found ",
              self.scalar_type(),
              " and ",
              tensor.scalar_type());
  TORCH_CHECK(self.numel() == tensor.numel(),
              "inconsistent tensor size, expected tensor [",
              self.numel(),
              "] and src [",
              tensor.numel(),
              "] to have the same number of elements, but got ",
              self.numel(),
              " and ",
              tensor.numel(),
              " elements respectively");
  return {Shape(self.scalar_type(), {})};
}

// Ops whose shapes follow from their meta kernels: each runs on meta
// stand-ins of its inputs, so shapes and dtypes are eager's by construction.

std::vector<Shape> compute_shape__logcumsumexp(const at::Tensor& self, int64_t /*dim*/) {
  return {ShapeOf(self)};
}

std::vector<Shape> compute_shape_addbmm(const at::Tensor& self,
                                        const at::Tensor& batch1,
                                        const at::Tensor& batch2,
                                        const at::Scalar& beta,
                                        const at::Scalar& alpha) {
  return {ShapeOf(at::addbmm(OnMeta(self), OnMeta(batch1), OnMeta(batch2), beta, alpha))};
}

std::vector<Shape> compute_shape_angle(const at::Tensor& self) {
  return {ShapeOf(at::angle(OnMeta(self)))};
}

std::vector<Shape> compute_shape_bucketize(const at::Tensor& self,
                                           const at::Tensor& /*boundaries*/,
                                           bool out_int32,
                                           bool /*right*/) {
  return {Shape(out_int32 ? at::kInt : at::kLong, self.sizes().vec())};
}

std::vector<Shape> compute_shape_cholesky_inverse(const at::Tensor& self, bool /*upper*/) {
  return {ShapeOf(self)};
}

std::vector<Shape> compute_shape_count_nonzero(const at::Tensor& self, at::IntArrayRef dim) {
  return {ShapeOf(at::sum(OnMeta(self), dim, /*keepdim=*/false, at::kLong))};
}

std::vector<Shape> compute_shape_diag_embed(const at::Tensor& self,
                                            int64_t offset,
                                            int64_t dim1,
                                            int64_t dim2) {
  return {ShapeOf(at::diag_embed(OnMeta(self), offset, dim1, dim2))};
}

std::vector<Shape> compute_shape_floor_divide(const at::Tensor& self, const at::Tensor& other) {
  return {Shape(at::result_type(self, other), at::infer_size(self.sizes(), other.sizes()))};
}

std::vector<Shape> compute_shape_linalg_matrix_exp(const at::Tensor& self) {
  return {ShapeOf(self)};
}

std::vector<Shape> compute_shape_linalg_solve_triangular(
    const at::Tensor& self, const at::Tensor& B, bool upper, bool left, bool unitriangular) {
  return {
      ShapeOf(at::linalg_solve_triangular(OnMeta(self), OnMeta(B), upper, left, unitriangular))};
}

std::vector<Shape> compute_shape_median(const at::Tensor& self) {
  return {Shape(self.scalar_type(), {})};
}

std::vector<Shape> compute_shape_mode(const at::Tensor& self, int64_t dim, bool keepdim) {
  const at::Tensor values = at::amax(OnMeta(self), {dim}, keepdim);
  return {ShapeOf(values), Shape(at::kLong, values.sizes().vec())};
}

std::vector<Shape> compute_shape_median(const at::Tensor& self, int64_t dim, bool keepdim) {
  const at::Tensor values = std::get<0>(at::median(OnMeta(self), dim, keepdim));
  return {ShapeOf(values), Shape(at::kLong, values.sizes().vec())};
}

std::vector<Shape> compute_shape_kthvalue(const at::Tensor& self,
                                          int64_t k,
                                          int64_t dim,
                                          bool keepdim) {
  const at::Tensor values = std::get<0>(at::kthvalue(OnMeta(self), k, dim, keepdim));
  return {ShapeOf(values), Shape(at::kLong, values.sizes().vec())};
}

std::vector<Shape> compute_shape__cdist_forward(const at::Tensor& x1,
                                                const at::Tensor& x2,
                                                double p,
                                                std::optional<int64_t> compute_mode) {
  return {ShapeOf(at::_cdist_forward(OnMeta(x1), OnMeta(x2), p, compute_mode))};
}

// The gradient has the batch dimensions of both inputs, broadcast.
std::vector<Shape> compute_shape__cdist_backward(const at::Tensor& grad,
                                                 const at::Tensor& x1,
                                                 const at::Tensor& x2,
                                                 double p,
                                                 const at::Tensor& cdist) {
  return {ShapeOf(at::_cdist_backward(OnMeta(grad), OnMeta(x1), OnMeta(x2), p, OnMeta(cdist)))};
}

std::vector<Shape> compute_shape__pdist_forward(const at::Tensor& self, double p) {
  return {ShapeOf(at::_pdist_forward(OnMeta(self), p))};
}

std::vector<Shape> compute_shape__pdist_backward(const at::Tensor& grad,
                                                 const at::Tensor& self,
                                                 double p,
                                                 const at::Tensor& pdist) {
  return {ShapeOf(at::_pdist_backward(OnMeta(grad), OnMeta(self), p, OnMeta(pdist)))};
}

std::vector<Shape> compute_shape_nanmedian(const at::Tensor& self) {
  return {Shape(self.scalar_type(), {})};
}

std::vector<Shape> compute_shape_nansum(const at::Tensor& self,
                                        at::OptionalIntArrayRef dim,
                                        bool keepdim,
                                        std::optional<at::ScalarType> dtype) {
  if (auto shape = FloatingReduction(self, dim, keepdim); shape && !dtype) {
    return {*shape};
  }
  return {ShapeOf(at::sum(OnMeta(self), dim, keepdim, dtype))};
}

std::vector<Shape> compute_shape_rsub(const at::Tensor& self,
                                      const at::Tensor& other,
                                      const at::Scalar& /*alpha*/) {
  return {Shape(at::result_type(self, other), at::infer_size(self.sizes(), other.sizes()))};
}

std::vector<Shape> compute_shape_searchsorted(const at::Tensor& /*sorted_sequence*/,
                                              const at::Tensor& self,
                                              bool out_int32,
                                              bool /*right*/,
                                              std::optional<c10::string_view> /*side*/,
                                              const std::optional<at::Tensor>& /*sorter*/) {
  return {Shape(out_int32 ? at::kInt : at::kLong, self.sizes().vec())};
}

std::vector<Shape> compute_shape_std_mean(const at::Tensor& self,
                                          at::OptionalIntArrayRef dim,
                                          const std::optional<at::Scalar>& correction,
                                          bool keepdim) {
  if (auto shape = FloatingReduction(self, dim, keepdim)) {
    return {*shape, *shape};
  }
  // A complex input's deviation is real and its mean complex.
  const auto [deviation, mean] = at::var_mean(OnMeta(self), dim, correction, keepdim);
  return {ShapeOf(deviation), ShapeOf(mean)};
}

std::vector<Shape> compute_shape_var_mean(const at::Tensor& self,
                                          at::OptionalIntArrayRef dim,
                                          const std::optional<at::Scalar>& correction,
                                          bool keepdim) {
  return compute_shape_std_mean(self, dim, correction, keepdim);
}

// Eager's checks and messages come from the meta kernel.
std::vector<Shape> compute_shape_index_fill(const at::Tensor& self,
                                            int64_t dim,
                                            const at::Tensor& index,
                                            const at::Scalar& value) {
  return {ShapeOf(at::index_fill(OnMeta(self), dim, OnMeta(index), value))};
}

std::vector<Shape> compute_shape_index_fill(const at::Tensor& self,
                                            int64_t dim,
                                            const at::Tensor& index,
                                            const at::Tensor& value) {
  return {ShapeOf(at::index_fill(OnMeta(self), dim, OnMeta(index), OnMeta(value)))};
}

std::vector<Shape> compute_shape_vdot(const at::Tensor& self, const at::Tensor& other) {
  return {Shape(at::result_type(self, other), {})};
}

}  // namespace torch::lazy
