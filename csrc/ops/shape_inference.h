#pragma once

// compute_shape_* functions for ops that have neither a meta kernel nor a
// shape function in torch. torchgen calls them as torch::lazy::compute_shape_<op>,
// so they are declared in that namespace; each line below is the exact
// declaration torchgen expects.

#include <torch/csrc/lazy/core/shape_inference.h>

#include <array>
#include <vector>

namespace torch::lazy {
// clang-format off
TORCH_API std::vector<torch::lazy::Shape> compute_shape_where(const at::Tensor & condition, const at::Tensor & self, const at::Tensor & other);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_fill(const at::Tensor & self, const at::Scalar & value);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_fill(const at::Tensor & self, const at::Tensor & value);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_mse_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target, int64_t reduction);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_huber_loss(const at::Tensor & self, const at::Tensor & target, int64_t reduction, double delta);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_huber_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target, int64_t reduction, double delta);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_select_backward(const at::Tensor & grad_output, at::IntArrayRef input_sizes, int64_t dim, int64_t index);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_slice_backward(const at::Tensor & grad_output, at::IntArrayRef input_sizes, int64_t dim, int64_t start, int64_t end, int64_t step);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_hardtanh(const at::Tensor & self, const at::Scalar & min_val, const at::Scalar & max_val);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_nan_to_num(const at::Tensor & self, ::std::optional<double> nan, ::std::optional<double> posinf, ::std::optional<double> neginf);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_hardtanh_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Scalar & min_val, const at::Scalar & max_val);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_logsumexp(const at::Tensor & self, at::IntArrayRef dim, bool keepdim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_prod(const at::Tensor & self, ::std::optional<at::ScalarType> dtype);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_roll(const at::Tensor & self, at::IntArrayRef shifts, at::IntArrayRef dims);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_var(const at::Tensor & self, at::OptionalIntArrayRef dim, const ::std::optional<at::Scalar> & correction, bool keepdim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_as_strided_scatter(const at::Tensor & self, const at::Tensor & src, at::IntArrayRef size, at::IntArrayRef stride, ::std::optional<int64_t> storage_offset);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_native_group_norm(const at::Tensor & input, const ::std::optional<at::Tensor> & weight, const ::std::optional<at::Tensor> & bias, int64_t N, int64_t C, int64_t HxW, int64_t group, double eps);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_native_group_norm_backward(const at::Tensor & grad_out, const at::Tensor & input, const at::Tensor & mean, const at::Tensor & rstd, const ::std::optional<at::Tensor> & weight, int64_t N, int64_t C, int64_t HxW, int64_t group, ::std::array<bool,3> output_mask);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_diagonal_backward(const at::Tensor & grad_output, at::IntArrayRef input_sizes, int64_t offset, int64_t dim1, int64_t dim2);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_logit(const at::Tensor & self, ::std::optional<double> eps);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_unfold_backward(const at::Tensor & grad_in, at::IntArrayRef input_sizes, int64_t dim, int64_t size, int64_t step);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_dot(const at::Tensor & self, const at::Tensor & tensor);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_index_fill(const at::Tensor & self, int64_t dim, const at::Tensor & index, const at::Scalar & value);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_index_fill(const at::Tensor & self, int64_t dim, const at::Tensor & index, const at::Tensor & value);
TORCH_API std::vector<torch::lazy::Shape> compute_shape__logcumsumexp(const at::Tensor & self, int64_t dim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_addbmm(const at::Tensor & self, const at::Tensor & batch1, const at::Tensor & batch2, const at::Scalar & beta, const at::Scalar & alpha);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_angle(const at::Tensor & self);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_bucketize(const at::Tensor & self, const at::Tensor & boundaries, bool out_int32, bool right);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_cholesky_inverse(const at::Tensor & self, bool upper);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_count_nonzero(const at::Tensor & self, at::IntArrayRef dim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_diag_embed(const at::Tensor & self, int64_t offset, int64_t dim1, int64_t dim2);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_floor_divide(const at::Tensor & self, const at::Tensor & other);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_linalg_matrix_exp(const at::Tensor & self);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_linalg_solve_triangular(const at::Tensor & self, const at::Tensor & B, bool upper, bool left, bool unitriangular);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_median(const at::Tensor & self);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_mode(const at::Tensor & self, int64_t dim, bool keepdim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_nanmedian(const at::Tensor & self);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_nansum(const at::Tensor & self, at::OptionalIntArrayRef dim, bool keepdim, ::std::optional<at::ScalarType> dtype);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_rsub(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_searchsorted(const at::Tensor & sorted_sequence, const at::Tensor & self, bool out_int32, bool right, ::std::optional<c10::string_view> side, const ::std::optional<at::Tensor> & sorter);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_std_mean(const at::Tensor & self, at::OptionalIntArrayRef dim, const ::std::optional<at::Scalar> & correction, bool keepdim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_var_mean(const at::Tensor & self, at::OptionalIntArrayRef dim, const ::std::optional<at::Scalar> & correction, bool keepdim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_vdot(const at::Tensor & self, const at::Tensor & other);
// ops/nn_shapes.cpp
TORCH_API std::vector<torch::lazy::Shape> compute_shape_max_pool3d_with_indices(const at::Tensor & self, at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_max_pool3d_with_indices_backward(const at::Tensor & grad_output, const at::Tensor & self, at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode, const at::Tensor & indices);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_reflection_pad2d(const at::Tensor & self, at::IntArrayRef padding);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_reflection_pad2d_backward(const at::Tensor & grad_output, const at::Tensor & self, at::IntArrayRef padding);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_replication_pad2d_backward(const at::Tensor & grad_output, const at::Tensor & self, at::IntArrayRef padding);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_replication_pad3d_backward(const at::Tensor & grad_output, const at::Tensor & self, at::IntArrayRef padding);
TORCH_API std::vector<torch::lazy::Shape> compute_shape__prelu_kernel(const at::Tensor & self, const at::Tensor & weight);
TORCH_API std::vector<torch::lazy::Shape> compute_shape__prelu_kernel_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & weight);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_multi_margin_loss(const at::Tensor & self, const at::Tensor & target, const at::Scalar & p, const at::Scalar & margin, const ::std::optional<at::Tensor> & weight, int64_t reduction);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_multi_margin_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target, const at::Scalar & p, const at::Scalar & margin, const ::std::optional<at::Tensor> & weight, int64_t reduction);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_multilabel_margin_loss_forward(const at::Tensor & self, const at::Tensor & target, int64_t reduction);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_multilabel_margin_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target, int64_t reduction, const at::Tensor & is_target);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_glu_jvp(const at::Tensor & glu, const at::Tensor & x, const at::Tensor & dx, int64_t dim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_glu_backward_jvp(const at::Tensor & grad_x, const at::Tensor & grad_glu, const at::Tensor & x, const at::Tensor & dgrad_glu, const at::Tensor & dx, int64_t dim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_soft_margin_loss(const at::Tensor & self, const at::Tensor & target, int64_t reduction);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_soft_margin_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target, int64_t reduction);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_grid_sampler_3d(const at::Tensor & input, const at::Tensor & grid, int64_t interpolation_mode, int64_t padding_mode, bool align_corners);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_grid_sampler_3d_backward(const at::Tensor & grad_output, const at::Tensor & input, const at::Tensor & grid, int64_t interpolation_mode, int64_t padding_mode, bool align_corners, ::std::array<bool,2> output_mask);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_max_unpool2d(const at::Tensor & self, const at::Tensor & indices, at::IntArrayRef output_size);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_max_unpool3d(const at::Tensor & self, const at::Tensor & indices, at::IntArrayRef output_size, at::IntArrayRef stride, at::IntArrayRef padding);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_pixel_shuffle(const at::Tensor & self, int64_t upscale_factor);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_pixel_unshuffle(const at::Tensor & self, int64_t downscale_factor);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_channel_shuffle(const at::Tensor & self, int64_t groups);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_im2col(const at::Tensor & self, at::IntArrayRef kernel_size, at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_col2im(const at::Tensor & self, at::IntArrayRef output_size, at::IntArrayRef kernel_size, at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride);
// ops/shape_inference.cpp
TORCH_API std::vector<torch::lazy::Shape> compute_shape_kthvalue(const at::Tensor & self, int64_t k, int64_t dim, bool keepdim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_median(const at::Tensor & self, int64_t dim, bool keepdim);
TORCH_API std::vector<torch::lazy::Shape> compute_shape__cdist_forward(const at::Tensor & x1, const at::Tensor & x2, double p, ::std::optional<int64_t> compute_mode);
TORCH_API std::vector<torch::lazy::Shape> compute_shape__cdist_backward(const at::Tensor & grad, const at::Tensor & x1, const at::Tensor & x2, double p, const at::Tensor & cdist);
TORCH_API std::vector<torch::lazy::Shape> compute_shape__pdist_forward(const at::Tensor & self, double p);
TORCH_API std::vector<torch::lazy::Shape> compute_shape__pdist_backward(const at::Tensor & grad, const at::Tensor & self, double p, const at::Tensor & pdist);
// clang-format on
}  // namespace torch::lazy

// Shapes that replace torch's own compute_shape_<op> where it is wrong for
// arguments eager accepts: codegen/gen_lazyfuse.py has the generated kernel
// call lazyfuse::compute_shape_<op> instead.
namespace lazyfuse {
// torch's gives two shapes when bias_sizes is absent (functorch's batching
// rule and jacrev through a convolution pass none), for a node of three.
std::vector<torch::lazy::Shape> compute_shape_convolution_backward(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef bias_sizes,
    at::IntArrayRef stride,
    at::IntArrayRef padding,
    at::IntArrayRef dilation,
    bool transposed,
    at::IntArrayRef output_padding,
    int64_t groups,
    std::array<bool, 3> output_mask);

// torch's keeps an integer gradient's dtype; eager's result is floating.
std::vector<torch::lazy::Shape> compute_shape_native_dropout_backward(const at::Tensor& grad_output,
                                                                      const at::Tensor& mask,
                                                                      double scale);
}  // namespace lazyfuse
