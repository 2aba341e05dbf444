#include <ATen/Dispatch.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DefaultDtype.h>
#include <c10/util/Exception.h>

#include <exception>

#include "ops/argument_checks.h"

// The checks of scalar arguments eager converts to the dtype it computes in
// (ops/argument_checks.h).

namespace lazyfuse {

void CheckScalarFits(const char* op,
                     const char* arg,
                     const at::Scalar& value,
                     at::ScalarType dtype) {
  switch (dtype) {
    case at::kBool:
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kHalf:
    case at::kBFloat16:
    case at::kFloat:
    case at::kDouble:
      break;
    default:
      return;  // complex, float8, wide unsigned: no range checked here
  }
  try {
    AT_DISPATCH_ALL_TYPES_AND3(
        at::kBool, at::kHalf, at::kBFloat16, dtype, "fits", [&] { (void)value.to<scalar_t>(); });
  } catch (const std::exception& error) {  // c10's overflow report is a runtime_error
    TORCH_CHECK(false, op, ": ", arg, "=", value, ": ", error.what());
  }
}

namespace {

void CheckFits(const char* op, const char* arg, const at::Scalar& value, at::ScalarType dtype) {
  CheckScalarFits(op, arg, value, dtype);
}

void CheckFits(const char* op,
               const char* arg,
               const std::optional<at::Scalar>& value,
               at::ScalarType dtype) {
  if (value.has_value()) {
    CheckScalarFits(op, arg, *value, dtype);
  }
}

// Eager's kernel has no bool instance (it raises NotImplementedError); a
// fused kernel would compute one.
void RefuseBool(const char* op, at::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(dtype != at::kBool, op, ": not implemented for 'Bool'");
}

// Eager's CPU kernel has only floating (and for some, complex) instances;
// a graph would fail at its run, or a fused kernel compute one.
void RefuseIntegral(const char* op, const char* kernel, at::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(!at::isIntegralType(dtype, /*includeBool=*/true),
                              op,
                              ": \"",
                              kernel,
                              "\" not implemented for '",
                              c10::toString(dtype),
                              "'");
}

// Half and bfloat16 kernels take some such scalars (addcmul's value) in float.
at::ScalarType OpMath(at::ScalarType dtype) {
  return at::isReducedFloatingType(dtype) ? at::kFloat : dtype;
}

at::ScalarType Promoted(const at::Tensor& self,
                        const std::optional<at::Scalar>& a,
                        const std::optional<at::Scalar>& b) {
  at::ScalarType dtype = self.scalar_type();
  for (const auto* scalar : {&a, &b}) {
    if (scalar->has_value()) {
      dtype = at::promoteTypes(dtype, at::result_type(self, **scalar));
    }
  }
  return dtype;
}

// The dtype a pointwise op of three tensors computes in.
at::ScalarType PointwiseDtype(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  return at::promoteTypes(at::result_type(a, b), c.scalar_type());
}

}  // namespace

void check_arguments_fill(const at::Tensor& self, const at::Scalar& value) {
  CheckFits("aten::fill_", "value", value, self.scalar_type());
}

void check_arguments_add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  CheckFits("aten::add", "alpha", alpha, at::result_type(self, other));
}

// Eager subtracts by adding -alpha, and converts that: an int32 takes
// alpha=2**31 and refuses alpha=-2**31.
void check_arguments_sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (!alpha.isBoolean()) {
    CheckFits("aten::sub", "-alpha", -alpha, at::result_type(self, other));
  }
}

void check_arguments_rsub(const at::Tensor& self,
                          const at::Tensor& other,
                          const at::Scalar& alpha) {
  if (!alpha.isBoolean()) {
    CheckFits("aten::rsub", "-alpha", -alpha, at::result_type(self, other));
  }
}

void check_arguments_clamp(const at::Tensor& self,
                           const std::optional<at::Scalar>& min,
                           const std::optional<at::Scalar>& max) {
  const at::ScalarType dtype = Promoted(self, min, max);
  RefuseBool("aten::clamp", dtype);
  CheckFits("aten::clamp", "min", min, dtype);
  CheckFits("aten::clamp", "max", max, dtype);
}

// Tensor bounds are operands, cast as any operand is. One bound alone is
// maximum or minimum, which take bool.
void check_arguments_clamp(const at::Tensor& self,
                           const std::optional<at::Tensor>& min,
                           const std::optional<at::Tensor>& max) {
  if (min.has_value() && min->defined() && max.has_value() && max->defined()) {
    RefuseBool("aten::clamp", at::promoteTypes(at::result_type(self, *min), max->scalar_type()));
  }
}

void check_arguments_clamp_min(const at::Tensor& self, const at::Scalar& min) {
  const at::ScalarType dtype = Promoted(self, min, std::nullopt);
  RefuseBool("aten::clamp_min", dtype);
  CheckFits("aten::clamp_min", "min", min, dtype);
}

void check_arguments_clamp_min(const at::Tensor& /*self*/, const at::Tensor& /*min*/) {}

void check_arguments_clamp_max(const at::Tensor& self, const at::Scalar& max) {
  const at::ScalarType dtype = Promoted(self, max, std::nullopt);
  RefuseBool("aten::clamp_max", dtype);
  CheckFits("aten::clamp_max", "max", max, dtype);
}

void check_arguments_clamp_max(const at::Tensor& /*self*/, const at::Tensor& /*max*/) {}

void check_arguments_threshold(const at::Tensor& self,
                               const at::Scalar& threshold,
                               const at::Scalar& value) {
  RefuseBool("aten::threshold", self.scalar_type());
  CheckFits("aten::threshold", "threshold", threshold, OpMath(self.scalar_type()));
  CheckFits("aten::threshold", "value", value, self.scalar_type());
}

// Float kernels take these in float (double for float64).
void check_arguments_leaky_relu(const at::Tensor& self, const at::Scalar& negative_slope) {
  RefuseIntegral("aten::leaky_relu", "leaky_relu_cpu", self.scalar_type());
  CheckFits("aten::leaky_relu", "negative_slope", negative_slope, OpMath(self.scalar_type()));
}

void check_arguments_leaky_relu_backward(const at::Tensor& /*grad_output*/,
                                         const at::Tensor& self,
                                         const at::Scalar& negative_slope,
                                         bool /*self_is_result*/) {
  RefuseIntegral("aten::leaky_relu_backward", "leaky_relu_backward_cpu", self.scalar_type());
  CheckFits(
      "aten::leaky_relu_backward", "negative_slope", negative_slope, OpMath(self.scalar_type()));
}

void check_arguments_softplus(const at::Tensor& self,
                              const at::Scalar& beta,
                              const at::Scalar& threshold) {
  RefuseIntegral("aten::softplus", "softplus_cpu", self.scalar_type());
  CheckFits("aten::softplus", "beta", beta, OpMath(self.scalar_type()));
  CheckFits("aten::softplus", "threshold", threshold, OpMath(self.scalar_type()));
}

void check_arguments_softplus_backward(const at::Tensor& /*grad_output*/,
                                       const at::Tensor& self,
                                       const at::Scalar& beta,
                                       const at::Scalar& threshold) {
  RefuseIntegral("aten::softplus_backward", "softplus_backward_cpu", self.scalar_type());
  CheckFits("aten::softplus_backward", "beta", beta, OpMath(self.scalar_type()));
  CheckFits("aten::softplus_backward", "threshold", threshold, OpMath(self.scalar_type()));
}

void check_arguments_elu(const at::Tensor& self,
                         const at::Scalar& alpha,
                         const at::Scalar& scale,
                         const at::Scalar& input_scale) {
  RefuseIntegral("aten::elu", "elu_cpu", self.scalar_type());
  CheckFits("aten::elu", "alpha", alpha, OpMath(self.scalar_type()));
  CheckFits("aten::elu", "scale", scale, OpMath(self.scalar_type()));
  CheckFits("aten::elu", "input_scale", input_scale, OpMath(self.scalar_type()));
}

void check_arguments_elu_backward(const at::Tensor& /*grad_output*/,
                                  const at::Scalar& alpha,
                                  const at::Scalar& scale,
                                  const at::Scalar& input_scale,
                                  bool /*is_result*/,
                                  const at::Tensor& self_or_result) {
  const at::ScalarType dtype = self_or_result.scalar_type();
  RefuseIntegral("aten::elu_backward", "elu_backward_cpu", dtype);
  CheckFits("aten::elu_backward", "alpha", alpha, OpMath(dtype));
  CheckFits("aten::elu_backward", "scale", scale, OpMath(dtype));
  CheckFits("aten::elu_backward", "input_scale", input_scale, OpMath(dtype));
}

// Shrinking takes lambd in the tensor's own dtype (a half refuses 1e5).
void check_arguments_hardshrink(const at::Tensor& self, const at::Scalar& lambd) {
  RefuseIntegral("aten::hardshrink", "hardshrink_cpu", self.scalar_type());
  CheckFits("aten::hardshrink", "lambd", lambd, self.scalar_type());
}

void check_arguments_hardshrink_backward(const at::Tensor& /*grad_out*/,
                                         const at::Tensor& self,
                                         const at::Scalar& lambd) {
  RefuseIntegral("aten::hardshrink_backward", "shrink_backward_cpu", self.scalar_type());
  CheckFits("aten::hardshrink_backward", "lambd", lambd, self.scalar_type());
}

// logit computes integers in the default float dtype, and takes eps in the
// dtype it computes in.
void check_arguments_logit(const at::Tensor& self, std::optional<double> eps) {
  const at::ScalarType dtype = at::isFloatingType(self.scalar_type())
                                   ? self.scalar_type()
                                   : c10::typeMetaToScalarType(c10::get_default_dtype());
  if (eps.has_value()) {
    CheckFits("aten::logit", "eps", at::Scalar(*eps), dtype);
  }
}

void check_arguments_logit_backward(const at::Tensor& /*grad_output*/,
                                    const at::Tensor& self,
                                    std::optional<double> eps) {
  if (eps.has_value()) {
    CheckFits("aten::logit_backward", "eps", at::Scalar(*eps), self.scalar_type());
  }
}

void check_arguments_baddbmm(const at::Tensor& self,
                             const at::Tensor& batch1,
                             const at::Tensor& batch2,
                             const at::Scalar& beta,
                             const at::Scalar& alpha) {
  const at::ScalarType dtype = PointwiseDtype(self, batch1, batch2);
  TORCH_CHECK_NOT_IMPLEMENTED(dtype != at::kBool,
                              "aten::baddbmm: \"baddbmm\" not implemented for 'Bool'");
  CheckFits("aten::baddbmm", "beta", beta, OpMath(dtype));
  CheckFits("aten::baddbmm", "alpha", alpha, OpMath(dtype));
}

void check_arguments_lerp(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  RefuseIntegral("aten::lerp", "lerp_kernel_scalar", at::result_type(self, end));
  CheckFits("aten::lerp", "weight", weight, OpMath(at::result_type(self, end)));
}

void check_arguments_addcmul(const at::Tensor& self,
                             const at::Tensor& tensor1,
                             const at::Tensor& tensor2,
                             const at::Scalar& value) {
  RefuseBool("aten::addcmul", PointwiseDtype(self, tensor1, tensor2));
  CheckFits("aten::addcmul", "value", value, OpMath(PointwiseDtype(self, tensor1, tensor2)));
}

void check_arguments_addcdiv(const at::Tensor& self,
                             const at::Tensor& tensor1,
                             const at::Tensor& tensor2,
                             const at::Scalar& value) {
  CheckFits("aten::addcdiv", "value", value, OpMath(PointwiseDtype(self, tensor1, tensor2)));
}

void check_arguments_index_fill(const at::Tensor& self,
                                int64_t /*dim*/,
                                const at::Tensor& /*index*/,
                                const at::Scalar& value) {
  CheckFits("aten::index_fill", "value", value, self.scalar_type());
}

void check_arguments_scatter(const at::Tensor& self,
                             int64_t /*dim*/,
                             const at::Tensor& /*index*/,
                             const at::Scalar& value) {
  CheckFits("aten::scatter", "value", value, self.scalar_type());
}

void check_arguments_scatter(const at::Tensor& self,
                             int64_t dim,
                             const at::Tensor& index,
                             const at::Scalar& value,
                             c10::string_view /*reduce*/) {
  check_arguments_scatter(self, dim, index, value);
}

// Eager's rules: an integer tensor takes its limits truncated to integers
// (so -0.5 is 0 even for uint8), and uint8 refuses a negative one.
void check_arguments_hardtanh(const at::Tensor& self,
                              const at::Scalar& min_val,
                              const at::Scalar& max_val) {
  const at::ScalarType dtype = self.scalar_type();
  TORCH_CHECK(dtype != at::kBool, "aten::hardtanh: Bool inputs not supported for hardtanh");
  if (!at::isIntegralType(dtype, /*includeBool=*/false)) {
    CheckFits("aten::hardtanh", "min_val", min_val, dtype);
    CheckFits("aten::hardtanh", "max_val", max_val, dtype);
    return;
  }
  CheckFits("aten::hardtanh", "min_val", min_val, at::kLong);
  CheckFits("aten::hardtanh", "max_val", max_val, at::kLong);
  const int64_t min_limit = min_val.toLong();
  const int64_t max_limit = max_val.toLong();
  TORCH_CHECK(dtype != at::kByte || (min_limit >= 0 && max_limit >= 0),
              "aten::hardtanh: cannot do hardtanh on an unsigned type with negative limits");
  CheckFits("aten::hardtanh", "min_val", at::Scalar(min_limit), dtype);
  CheckFits("aten::hardtanh", "max_val", at::Scalar(max_limit), dtype);
}

void check_arguments_abs(const at::Tensor& self) {
  RefuseBool("aten::abs", self.scalar_type());
}

void check_arguments_relu(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "aten::relu: Boolean inputs not supported for relu");
}

// Float and double kernels take the exponent in double; the others in their
// own dtype (a half refuses 1e5).
void check_arguments_pow(const at::Tensor& self, const at::Scalar& exponent) {
  const at::ScalarType dtype = at::result_type(self, exponent);
  if (dtype != at::kFloat && dtype != at::kDouble) {
    CheckFits("aten::pow", "exponent", exponent, dtype);
  }
}

// Tensor values, sources and exponents are operands, cast as any operand is.
void check_arguments_index_fill(const at::Tensor& /*self*/,
                                int64_t /*dim*/,
                                const at::Tensor& /*index*/,
                                const at::Tensor& /*value*/) {}

void check_arguments_scatter(const at::Tensor& /*self*/,
                             int64_t /*dim*/,
                             const at::Tensor& /*index*/,
                             const at::Tensor& /*src*/) {}

void check_arguments_scatter(const at::Tensor& /*self*/,
                             int64_t /*dim*/,
                             const at::Tensor& /*index*/,
                             const at::Tensor& /*src*/,
                             c10::string_view /*reduce*/) {}

void check_arguments_pow(const at::Tensor& /*self*/, const at::Tensor& /*exponent*/) {}

void check_arguments_lerp(const at::Tensor& self,
                          const at::Tensor& end,
                          const at::Tensor& /*weight*/) {
  RefuseIntegral("aten::lerp", "lerp_kernel_tensor", at::result_type(self, end));
}

void check_arguments_pow(const at::Scalar& /*self*/, const at::Tensor& /*exponent*/) {}

}  // namespace lazyfuse
