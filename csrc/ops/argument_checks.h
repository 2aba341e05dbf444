#pragma once

// Argument checks eager runs in its kernels, where a lazy op's shape function
// or meta kernel lets the arguments through: without them the error would
// come from the graph's run, at a later read, or not at all (a layer_norm
// weight of the wrong shape broadcasts). Each names the op, in eager's words.
//
// The generated kernel of an op calls check_arguments_<kernel> before its
// shape function when this header declares one (codegen/gen_lazyfuse.py reads
// the declarations), with the shape function's arguments, so every overload
// of a listed kernel needs one. Reused nodes skip it, their operands and
// attributes checked when they were built, unless the op has a Scalar
// operand, whose value a reused node does not compare.

#include <ATen/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/OptionalArrayRef.h>
#include <c10/util/string_view.h>

#include <optional>

namespace lazyfuse {

// Eager converts some scalar arguments to the dtype it computes in, and
// refuses one that overflows it (an int32 clamped at 2**40); a graph would
// wrap it silently. `dtype` is that computing dtype.
void CheckScalarFits(const char* op,
                     const char* arg,
                     const at::Scalar& value,
                     at::ScalarType dtype);

// clang-format off
void check_arguments_convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups);
void check_arguments_native_layer_norm(const at::Tensor& input, at::IntArrayRef normalized_shape, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps);
void check_arguments_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta, const at::Scalar& alpha);
void check_arguments_embedding(const at::Tensor& weight, const at::Tensor& indices, int64_t padding_idx, bool scale_grad_by_freq, bool sparse);
void check_arguments_grid_sampler_2d(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode, int64_t padding_mode, bool align_corners);
void check_arguments_gelu(const at::Tensor& self, c10::string_view approximate);
void check_arguments_fill(const at::Tensor& self, const at::Scalar& value);
void check_arguments_fill(const at::Tensor& self, const at::Tensor& value);
void check_arguments_mean(const at::Tensor& self, std::optional<at::ScalarType> dtype);
void check_arguments_mean(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype);
void check_arguments_repeat(const at::Tensor& self, at::IntArrayRef repeats);
void check_arguments_flip(const at::Tensor& self, at::IntArrayRef dims);
void check_arguments_bitwise_not(const at::Tensor& self);
void check_arguments_bitwise_and(const at::Tensor& self, const at::Tensor& other);
void check_arguments_bitwise_or(const at::Tensor& self, const at::Tensor& other);
void check_arguments_bitwise_xor(const at::Tensor& self, const at::Tensor& other);
void check_arguments_add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
void check_arguments_sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
void check_arguments_rsub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
void check_arguments_clamp(const at::Tensor& self, const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max);
void check_arguments_clamp(const at::Tensor& self, const std::optional<at::Tensor>& min, const std::optional<at::Tensor>& max);
void check_arguments_clamp_min(const at::Tensor& self, const at::Scalar& min);
void check_arguments_clamp_min(const at::Tensor& self, const at::Tensor& min);
void check_arguments_clamp_max(const at::Tensor& self, const at::Scalar& max);
void check_arguments_clamp_max(const at::Tensor& self, const at::Tensor& max);
void check_arguments_threshold(const at::Tensor& self, const at::Scalar& threshold, const at::Scalar& value);
void check_arguments_addcmul(const at::Tensor& self, const at::Tensor& tensor1, const at::Tensor& tensor2, const at::Scalar& value);
void check_arguments_addcdiv(const at::Tensor& self, const at::Tensor& tensor1, const at::Tensor& tensor2, const at::Scalar& value);
void check_arguments_index_fill(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value);
void check_arguments_index_fill(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value);
void check_arguments_scatter(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value);
void check_arguments_scatter(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value, c10::string_view reduce);
void check_arguments_scatter(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src);
void check_arguments_scatter(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src, c10::string_view reduce);
void check_arguments_hardtanh(const at::Tensor& self, const at::Scalar& min_val, const at::Scalar& max_val);
void check_arguments_abs(const at::Tensor& self);
void check_arguments_relu(const at::Tensor& self);
void check_arguments_pow(const at::Tensor& self, const at::Scalar& exponent);
void check_arguments_pow(const at::Tensor& self, const at::Tensor& exponent);
void check_arguments_pow(const at::Scalar& self, const at::Tensor& exponent);
void check_arguments_var(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction, bool keepdim);
void check_arguments_var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction, bool keepdim);
void check_arguments_std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction, bool keepdim);
void check_arguments_leaky_relu(const at::Tensor& self, const at::Scalar& negative_slope);
void check_arguments_leaky_relu_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& negative_slope, bool self_is_result);
void check_arguments_softplus(const at::Tensor& self, const at::Scalar& beta, const at::Scalar& threshold);
void check_arguments_softplus_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Scalar& beta, const at::Scalar& threshold);
void check_arguments_elu(const at::Tensor& self, const at::Scalar& alpha, const at::Scalar& scale, const at::Scalar& input_scale);
void check_arguments_elu_backward(const at::Tensor& grad_output, const at::Scalar& alpha, const at::Scalar& scale, const at::Scalar& input_scale, bool is_result, const at::Tensor& self_or_result);
void check_arguments_hardshrink(const at::Tensor& self, const at::Scalar& lambd);
void check_arguments_hardshrink_backward(const at::Tensor& grad_out, const at::Tensor& self, const at::Scalar& lambd);
void check_arguments_logit(const at::Tensor& self, std::optional<double> eps);
void check_arguments_logit_backward(const at::Tensor& grad_output, const at::Tensor& self, std::optional<double> eps);
void check_arguments_baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2, const at::Scalar& beta, const at::Scalar& alpha);
void check_arguments_lerp(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight);
void check_arguments_lerp(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight);
void check_arguments_mode(const at::Tensor& self, int64_t dim, bool keepdim);
void check_arguments_kthvalue(const at::Tensor& self, int64_t k, int64_t dim, bool keepdim);
// clang-format on

}  // namespace lazyfuse
