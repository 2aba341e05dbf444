#include "ops/argument_checks.h"

#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/GridSamplerUtils.h>
#include <ATen/ops/result_type.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <exception>
#include <sstream>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

// Runs a check of ATen's own, whose message does not say which op refused.
template <typename Check>
void NamingOp(const char* op, Check&& check) {
  try {
    check();
  } catch (const c10::Error& error) {
    TORCH_CHECK(false, op, ": ", error.what_without_backtrace());
  } catch (const std::exception& error) {  // a Scalar's overflow, say
    TORCH_CHECK(false, op, ": ", error.what());
  }
}

// A convolution parameter for spatial dimension `i`: one value serves all.
int64_t Param(at::IntArrayRef values, size_t i) {
  return values.size() == 1 ? values[0] : values[i];
}

void CheckConvolutionParam(const char* name,
                           at::IntArrayRef values,
                           int64_t spatial,
                           bool positive) {
  TORCH_CHECK(values.size() == 1 || static_cast<int64_t>(values.size()) == spatial,
              "aten::convolution: expected ",
              name,
              " to be a single integer value or a list of ",
              spatial,
              " values to match the convolution dimensions, but got ",
              name,
              "=",
              values);
  for (int64_t value : values) {
    TORCH_CHECK(positive ? value > 0 : value >= 0,
                "aten::convolution: ",
                positive ? "non-positive " : "negative ",
                name,
                " is not supported, but got ",
                name,
                "=",
                values);
  }
}

std::string Joined(const std::vector<int64_t>& sizes) {
  std::ostringstream out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out << (i == 0 ? "" : " x ") << sizes[i];
  }
  return out.str();
}

bool IsFloatOrComplex(at::ScalarType dtype) {
  return at::isFloatingType(dtype) || at::isComplexType(dtype);
}

// NotImplementedError, as eager's kernel raises for a dtype it lacks.
void CheckIntegerOrBool(const char* op, at::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(!IsFloatOrComplex(dtype),
                              op,
                              ": not implemented for '",
                              c10::toString(dtype),
                              "': bitwise ops take integer or bool tensors");
}

}  // namespace

void check_arguments_convolution(const at::Tensor& input,
                                 const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias,
                                 at::IntArrayRef stride,
                                 at::IntArrayRef padding,
                                 at::IntArrayRef dilation,
                                 bool transposed,
                                 at::IntArrayRef output_padding,
                                 int64_t groups) {
  const int64_t dims = weight.dim();
  TORCH_CHECK(groups > 0, "aten::convolution: non-positive groups is not supported");
  TORCH_CHECK(dims >= 3,
              "aten::convolution: weight should have at least three dimensions, but got weight "
              "of size ",
              weight.sizes());
  TORCH_CHECK(input.dim() == dims,
              "aten::convolution: expected ",
              dims,
              "-dimensional input for ",
              dims,
              "-dimensional weight ",
              weight.sizes(),
              ", but got ",
              input.dim(),
              "-dimensional input of size ",
              input.sizes(),
              " instead");
  const int64_t spatial = dims - 2;
  CheckConvolutionParam("stride", stride, spatial, /*positive=*/true);
  CheckConvolutionParam("padding", padding, spatial, /*positive=*/false);
  CheckConvolutionParam("dilation", dilation, spatial, /*positive=*/true);
  if (transposed) {
    CheckConvolutionParam("output_padding", output_padding, spatial, /*positive=*/false);
  }
  const int64_t channels = transposed ? weight.size(0) : weight.size(1) * groups;
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  TORCH_CHECK(weight.size(0) >= groups && weight.size(0) % groups == 0,
              "aten::convolution: given groups=",
              groups,
              ", expected weight to be divisible by ",
              groups,
              " at dimension 0, but got weight of size ",
              weight.sizes(),
              " instead");
  TORCH_CHECK(input.size(1) == channels,
              "aten::convolution: given ",
              transposed ? "transposed=1" : "groups=" + std::to_string(groups),
              ", weight of size ",
              weight.sizes(),
              ", expected input",
              input.sizes(),
              " to have ",
              channels,
              " channels, but got ",
              input.size(1),
              " channels instead");
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == out_channels,
                "aten::convolution: given weight of size ",
                weight.sizes(),
                ", expected bias to be 1-dimensional with ",
                out_channels,
                " elements, but got bias of size ",
                bias->sizes(),
                " instead");
  }
  if (transposed) {
    for (int64_t i = 0; i < spatial; ++i) {
      TORCH_CHECK(Param(output_padding, i) < std::max(Param(stride, i), Param(dilation, i)),
                  "aten::convolution: output padding must be smaller than either stride or "
                  "dilation, but got output_padding=",
                  output_padding,
                  ", stride=",
                  stride,
                  " and dilation=",
                  dilation);
    }
    return;
  }
  std::vector<int64_t> padded;
  std::vector<int64_t> kernel;
  bool fits = true;
  for (int64_t i = 0; i < spatial; ++i) {
    padded.push_back(input.size(i + 2) + 2 * Param(padding, i));
    kernel.push_back(Param(dilation, i) * (weight.size(i + 2) - 1) + 1);
    fits = fits && padded.back() >= kernel.back();
  }
  TORCH_CHECK(fits,
              "aten::convolution: calculated padded input size per channel: (",
              Joined(padded),
              "). Kernel size: (",
              Joined(kernel),
              "). Kernel size can't be greater than actual input size");
}

void check_arguments_native_layer_norm(const at::Tensor& input,
                                       at::IntArrayRef normalized_shape,
                                       const std::optional<at::Tensor>& weight,
                                       const std::optional<at::Tensor>& bias,
                                       double /*eps*/) {
  TORCH_CHECK(!normalized_shape.empty(),
              "aten::native_layer_norm: expected normalized_shape to be at least "
              "1-dimensional, i.e., containing at least one element, but got normalized_shape = ",
              normalized_shape);
  const auto check_affine = [&](const char* name, const std::optional<at::Tensor>& tensor) {
    TORCH_CHECK(
        !tensor.has_value() || !tensor->defined() || tensor->sizes().equals(normalized_shape),
        "aten::native_layer_norm: expected ",
        name,
        " to be of same shape as normalized_shape, but got ",
        name,
        " of shape ",
        tensor->sizes(),
        " and normalized_shape = ",
        normalized_shape);
  };
  check_affine("weight", weight);
  check_affine("bias", bias);
  const int64_t leading = input.dim() - static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(leading >= 0 && input.sizes().slice(leading).equals(normalized_shape),
              "aten::native_layer_norm: given normalized_shape=",
              normalized_shape,
              ", expected input with shape [*, ",
              c10::Join(", ", normalized_shape),
              "], but got input of size",
              input.sizes());
}

void check_arguments_addmm(const at::Tensor& self,
                           const at::Tensor& mat1,
                           const at::Tensor& mat2,
                           const at::Scalar& beta,
                           const at::Scalar& alpha) {
  // Eager's kernel has no bool instance, and takes beta and alpha in the
  // dtype it computes in (float for half and bfloat16).
  const at::ScalarType dtype = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(dtype != at::kBool,
                              "aten::addmm: \"addmm_impl_cpu_\" not implemented for 'Bool'");
  const at::ScalarType compute = at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
  CheckScalarFits("aten::addmm", "beta", beta, compute);
  CheckScalarFits("aten::addmm", "alpha", alpha, compute);
  if (mat1.dim() != 2 || mat2.dim() != 2) {
    return;  // the meta kernel names what is wrong with them
  }
  const std::vector<int64_t> target{mat1.size(0), mat2.size(1)};
  TORCH_CHECK(self.dim() <= 2,
              "aten::addmm: the number of sizes provided (2) must be greater or equal to the "
              "number of dimensions in the tensor (",
              self.dim(),
              ")");
  const int64_t offset = 2 - self.dim();
  for (int64_t i = 0; i < self.dim(); ++i) {
    const int64_t size = self.size(i);
    TORCH_CHECK(size == 1 || size == target[i + offset],
                "aten::addmm: the expanded size of the tensor (",
                target[i + offset],
                ") must match the existing size (",
                size,
                ") at non-singleton dimension ",
                i + offset,
                ".  Target sizes: ",
                at::IntArrayRef(target),
                ".  Tensor sizes: ",
                self.sizes());
  }
}

void check_arguments_embedding(const at::Tensor& weight,
                               const at::Tensor& indices,
                               int64_t /*padding_idx*/,
                               bool /*scale_grad_by_freq*/,
                               bool /*sparse*/) {
  TORCH_CHECK(weight.dim() == 2, "aten::embedding: 'weight' must be 2-D, but got ", weight.dim());
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "aten::embedding: expected tensor for argument #1 'indices' to have one of the "
              "following scalar types: Long, Int; but got ",
              c10::toString(indices.scalar_type()),
              " instead");
}

void check_arguments_grid_sampler_2d(const at::Tensor& input,
                                     const at::Tensor& grid,
                                     int64_t /*interpolation_mode*/,
                                     int64_t /*padding_mode*/,
                                     bool /*align_corners*/) {
  NamingOp("aten::grid_sampler_2d", [&] {
    at::native::check_grid_sampler_common(input, grid);
    at::native::check_grid_sampler_2d(input, grid);
  });
}

void check_arguments_gelu(const at::Tensor& /*self*/, c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh",
              "aten::gelu: approximate argument must be either none or tanh, but got '",
              std::string(approximate),
              "'");
}

void check_arguments_fill(const at::Tensor& /*self*/, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "aten::fill_: only supports 0-dimension value tensor but got tensor with ",
              value.dim(),
              " dimensions.");
}

void check_arguments_mean(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  TORCH_CHECK(IsFloatOrComplex(dtype.value_or(self.scalar_type())),
              "aten::mean: could not infer output dtype. ",
              dtype.has_value() ? "Optional" : "Input",
              " dtype must be either a floating point or complex dtype. Got: ",
              c10::toString(dtype.value_or(self.scalar_type())));
}

// mean.dim is structured: its meta kernel refuses such a dtype itself.
void check_arguments_mean(const at::Tensor& /*self*/,
                          at::OptionalIntArrayRef /*dim*/,
                          bool /*keepdim*/,
                          std::optional<at::ScalarType> /*dtype*/) {}

void check_arguments_repeat(const at::Tensor& self, at::IntArrayRef repeats) {
  TORCH_CHECK(static_cast<int64_t>(repeats.size()) >= self.dim(),
              "aten::repeat: number of dimensions of repeat dims (",
              repeats.size(),
              ") can not be smaller than number of dimensions of tensor (",
              self.dim(),
              ")");
  for (int64_t count : repeats) {
    TORCH_CHECK(count >= 0, "aten::repeat: repeats must be non-negative, but got ", repeats);
  }
}

void check_arguments_flip(const at::Tensor& self, at::IntArrayRef dims) {
  NamingOp("aten::flip", [&] { (void)at::dim_list_to_bitset(dims, self.dim()); });
}

void check_arguments_bitwise_not(const at::Tensor& self) {
  CheckIntegerOrBool("aten::bitwise_not", self.scalar_type());
}

void check_arguments_bitwise_and(const at::Tensor& self, const at::Tensor& other) {
  CheckIntegerOrBool("aten::bitwise_and", at::result_type(self, other));
}

void check_arguments_bitwise_or(const at::Tensor& self, const at::Tensor& other) {
  CheckIntegerOrBool("aten::bitwise_or", at::result_type(self, other));
}

void check_arguments_bitwise_xor(const at::Tensor& self, const at::Tensor& other) {
  CheckIntegerOrBool("aten::bitwise_xor", at::result_type(self, other));
}

namespace {

// Eager's selection kernels refuse an empty reduced dim with IndexError
// before any other check; the shape functions raised RuntimeError.
void CheckReducedDimNotEmpty(const char* op, const at::Tensor& self, int64_t dim) {
  const int64_t wrapped = at::maybe_wrap_dim(dim, self.dim());
  if (self.dim() > 0) {
    TORCH_CHECK_INDEX(self.size(wrapped) != 0,
                      op,
                      ": Expected reduction dim ",
                      wrapped,
                      " to have non-zero size.");
  }
}

// Eager refuses integer and bool tensors before it looks at the dims.
void CheckFloatOrComplex(const char* op, const at::Tensor& self) {
  TORCH_CHECK(IsFloatOrComplex(self.scalar_type()),
              op,
              ": std and var only support floating point and complex dtypes");
}

}  // namespace

void check_arguments_var(const at::Tensor& self,
                         at::OptionalIntArrayRef /*dim*/,
                         const std::optional<at::Scalar>& /*correction*/,
                         bool /*keepdim*/) {
  CheckFloatOrComplex("aten::var", self);
}

void check_arguments_var_mean(const at::Tensor& self,
                              at::OptionalIntArrayRef /*dim*/,
                              const std::optional<at::Scalar>& /*correction*/,
                              bool /*keepdim*/) {
  CheckFloatOrComplex("aten::var_mean", self);
}

void check_arguments_std_mean(const at::Tensor& self,
                              at::OptionalIntArrayRef /*dim*/,
                              const std::optional<at::Scalar>& /*correction*/,
                              bool /*keepdim*/) {
  CheckFloatOrComplex("aten::std_mean", self);
}

void check_arguments_mode(const at::Tensor& self, int64_t dim, bool /*keepdim*/) {
  CheckReducedDimNotEmpty("aten::mode", self, dim);
}

void check_arguments_kthvalue(const at::Tensor& self,
                              int64_t /*k*/,
                              int64_t dim,
                              bool /*keepdim*/) {
  CheckReducedDimNotEmpty("aten::kthvalue", self, dim);
}

}  // namespace lazyfuse
