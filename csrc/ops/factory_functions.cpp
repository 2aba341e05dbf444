// Factories whose values depend only on their scalars (arange, linspace,
// logspace): computed on the host by eager's own kernel, then entered into
// the graph as data, like a tensor moved to the lazy device. Graphs that use
// them stay whole, where an eager fallback would split them.
//
// Constant factories (full, zeros, ones, scalar_tensor): their value is a
// scalar expanded in the graph. ATen's composites make an empty tensor, whose
// host memory became graph data copied in each step, then fill it in place,
// which ran functionalization's meta check, a Python kernel
// (test_trace_cost.py).

#include <ATen/Dispatch.h>
#include <ATen/Functions.h>
#include <c10/core/DefaultDtype.h>
#include <torch/csrc/lazy/core/ir_builder.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/csrc/lazy/core/tensor_impl.h>

#include "generated/LazyNativeFunctions.h"
#include "ops/functional_tensors.h"
#include "ops/functionalized_composite.h"
#include "ops/scalar_operands.h"

namespace lazyfuse {
namespace {

at::Tensor& EnterHostValues(const at::Tensor& host, at::Tensor& out, const char* op) {
  auto lazy_out = torch::lazy::TryGetLtcTensor(out);
  TORCH_CHECK(lazy_out, "lazyfuse: ", op, ": out must be a lazy tensor");
  lazy_out->UpdateFromTensorOut(host);
  if (auto* impl = dynamic_cast<torch::lazy::LTCTensorImpl*>(out.unsafeGetTensorImpl())) {
    impl->force_refresh_sizes();
  }
  return out;
}

at::TensorOptions OnHost(const at::Tensor& out) {
  return out.options().device(c10::kCPU);
}

at::ScalarType DefaultDtype() {
  return c10::typeMetaToScalarType(c10::get_default_dtype());
}

// full()'s dtype where none is given: the fill value's kind, as eager infers it.
at::ScalarType FillDtype(const at::Scalar& value) {
  if (value.isBoolean()) {
    return at::kBool;
  }
  if (value.isIntegral(/*includeBool=*/false)) {
    return at::kLong;
  }
  if (value.isComplex()) {
    return c10::toComplexType(DefaultDtype());
  }
  return DefaultDtype();
}

// Eager's fill refuses a value its dtype cannot hold (300 as uint8, NaN as
// int32, 1 + 2j as float); the graph's cast would wrap it silently.
void CheckFits(const at::Scalar& value, at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kFloat:
    case at::kDouble:
    case at::kComplexFloat:
    case at::kComplexDouble:
    case at::kBool:
    case at::kHalf:
    case at::kBFloat16:
      AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND3(
          at::kBool, at::kHalf, at::kBFloat16, dtype, "fill", [&] { (void)value.to<scalar_t>(); });
      break;
    default:
      break;
  }
}

// What a value out of the dtype's range does. Eager's scalar_tensor rounds a
// real number past half's or bfloat16's range to an infinity, where its fill
// refuses it (an integer too); Python's indexing and torch.where wrap a scalar with it
// (scores[mask] = -1e9 in float16).
enum class Overflow { kRefused, kInfinityInReducedFloats };

at::Tensor ExpandedScalar(const char* op,
                          at::IntArrayRef size,
                          const at::Scalar& value,
                          at::ScalarType dtype,
                          std::optional<at::Layout> layout,
                          std::optional<at::Device> device,
                          Overflow overflow = Overflow::kRefused) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  for (const int64_t extent : size) {
    TORCH_CHECK(
        extent >= 0, "Trying to create tensor with negative dimension ", extent, ": ", size);
  }
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided,
              "lazyfuse: ",
              op,
              ": only strided tensors live on the lazy device, not ",
              *layout);
  const bool rounds_to_infinity = overflow == Overflow::kInfinityInReducedFloats &&
                                  !value.isComplex() &&
                                  (dtype == at::kHalf || dtype == at::kBFloat16);
  if (!rounds_to_infinity) {
    CheckFits(value, dtype);
  }
  RegisterNewFunctionalizedComposites();  // as every new lazy tensor does
  const torch::lazy::BackendDevice backend_device =
      torch::lazy::atenDeviceToBackendDevice(device.value_or(c10::Device(c10::kLazy, 0)));
  torch::lazy::Value scalar = ScalarIrValue(value, backend_device);
  if (scalar.shape().scalar_type() != dtype) {
    scalar =
        torch::lazy::Value(torch::lazy::getIrBuilder()->MakeCast(scalar, dtype, std::nullopt), 0);
  }
  torch::lazy::Value expanded(
      torch::lazy::MakeExpand(scalar, size.vec(), /*is_scalar_expand=*/true), 0);
  at::Tensor lazy = torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(std::move(expanded), backend_device));
  return WrapFunctional(lazy);
}

}  // namespace

at::Tensor LazyNativeFunctions::full(at::IntArrayRef size,
                                     const at::Scalar& fill_value,
                                     std::optional<at::ScalarType> dtype,
                                     std::optional<at::Layout> layout,
                                     std::optional<at::Device> device,
                                     std::optional<bool> /*pin_memory*/) {
  return ExpandedScalar(
      "aten::full", size, fill_value, dtype.value_or(FillDtype(fill_value)), layout, device);
}

at::Tensor LazyNativeFunctions::zeros(at::IntArrayRef size,
                                      std::optional<at::ScalarType> dtype,
                                      std::optional<at::Layout> layout,
                                      std::optional<at::Device> device,
                                      std::optional<bool> /*pin_memory*/) {
  return ExpandedScalar("aten::zeros", size, 0, dtype.value_or(DefaultDtype()), layout, device);
}

at::Tensor LazyNativeFunctions::ones(at::IntArrayRef size,
                                     std::optional<at::ScalarType> dtype,
                                     std::optional<at::Layout> layout,
                                     std::optional<at::Device> device,
                                     std::optional<bool> /*pin_memory*/) {
  return ExpandedScalar("aten::ones", size, 1, dtype.value_or(DefaultDtype()), layout, device);
}

at::Tensor LazyNativeFunctions::scalar_tensor(const at::Scalar& s,
                                              std::optional<at::ScalarType> dtype,
                                              std::optional<at::Layout> layout,
                                              std::optional<at::Device> device,
                                              std::optional<bool> /*pin_memory*/) {
  return ExpandedScalar("aten::scalar_tensor",
                        {},
                        s,
                        dtype.value_or(DefaultDtype()),
                        layout,
                        device,
                        Overflow::kInfinityInReducedFloats);
}

at::Tensor& LazyNativeFunctions::arange_out(const at::Scalar& start,
                                            const at::Scalar& end,
                                            const at::Scalar& step,
                                            at::Tensor& out) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return EnterHostValues(at::arange(start, end, step, OnHost(out)), out, "aten::arange.start_out");
}

at::Tensor& LazyNativeFunctions::linspace_out(const at::Scalar& start,
                                              const at::Scalar& end,
                                              int64_t steps,
                                              at::Tensor& out) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return EnterHostValues(at::linspace(start, end, steps, OnHost(out)), out, "aten::linspace.out");
}

at::Tensor& LazyNativeFunctions::logspace_out(
    const at::Scalar& start, const at::Scalar& end, int64_t steps, double base, at::Tensor& out) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return EnterHostValues(
      at::logspace(start, end, steps, base, OnHost(out)), out, "aten::logspace.out");
}

}  // namespace lazyfuse
