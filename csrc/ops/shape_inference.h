#pragma once

// compute_shape_* functions for ops that have neither a meta kernel nor a
// shape function in torch. torchgen calls them as torch::lazy::compute_shape_<op>,
// so they are declared in that namespace; each line below is the exact
// declaration torchgen expects.

#include <torch/csrc/lazy/core/shape_inference.h>

namespace torch::lazy {
// clang-format off
TORCH_API std::vector<torch::lazy::Shape> compute_shape_where(const at::Tensor & condition, const at::Tensor & self, const at::Tensor & other);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_fill(const at::Tensor & self, const at::Scalar & value);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_mse_loss_backward(const at::Tensor & grad_output, const at::Tensor & self, const at::Tensor & target, int64_t reduction);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_select_backward(const at::Tensor & grad_output, at::IntArrayRef input_sizes, int64_t dim, int64_t index);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_slice_backward(const at::Tensor & grad_output, at::IntArrayRef input_sizes, int64_t dim, int64_t start, int64_t end, int64_t step);
TORCH_API std::vector<torch::lazy::Shape> compute_shape_hardtanh(const at::Tensor & self, const at::Scalar & min_val, const at::Scalar & max_val);
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
// clang-format on
}  // namespace torch::lazy
