#include "ops/scalar_operands.h"

#include <ATen/ScalarOps.h>
#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/ir_builder.h>

#include "ltc/backend_data.h"
#include "ltc/step_replay.h"

namespace lazyfuse {
namespace {

bool IsZeroOrOne(const at::Scalar& value) {
  return value.equal(0) || value.equal(1);
}

// The value of a Python number (double, int64, bool or complex), read
// without a dispatcher call.
at::Scalar WrappedNumberValue(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case at::kDouble:
      return *tensor.const_data_ptr<double>();
    case at::kLong:
      return *tensor.const_data_ptr<int64_t>();
    case at::kBool:
      return *tensor.const_data_ptr<bool>();
    default:
      return tensor.item();
  }
}

// `source`: the 0-dim CPU tensor the value was read from, if any. A step
// replay reads a tensor argument's value again each call, as an upload's.
torch::lazy::Value HostScalarValue(at::Tensor host,
                                   const torch::lazy::BackendDevice& device,
                                   const at::Tensor* source = nullptr) {
  torch::lazy::Shape shape(host.scalar_type(), {});
  auto data = std::make_shared<LazyFuseBackendData>(device, std::move(shape), std::move(host));
  if (Capturing()) {
    if (source != nullptr) {
      NoteTransfer(data, *source);
    } else {
      NoteScalar(data);  // names where a frozen number came from
    }
  }
  return torch::lazy::Value(torch::lazy::getIrBuilder()->MakeDeviceData(data), 0);
}

}  // namespace

torch::lazy::Value ScalarIrValue(const at::Scalar& value,
                                 const torch::lazy::BackendDevice& device) {
  if (IsZeroOrOne(value)) {
    return torch::lazy::Value(torch::lazy::getIrBuilder()->MakeScalar(value, value.type()), 0);
  }
  // Without the dispatcher: this runs once per scalar argument of every op.
  // ATen wraps a Scalar argument as a wrapped number for type promotion.
  at::Tensor host = at::detail::scalar_tensor_static(value, value.type(), at::kCPU);
  host.unsafeGetTensorImpl()->set_wrapped_number(true);
  return HostScalarValue(std::move(host), device);
}

torch::lazy::LazyTensorPtr GetLtcTensorOrWrapNumber(const at::Tensor& tensor,
                                                    const torch::lazy::BackendDevice& device) {
  const bool wrapped = tensor.defined() && tensor.unsafeGetTensorImpl()->is_wrapped_number();
  if (!tensor.defined() || !tensor.is_cpu() || !(wrapped || tensor.dim() == 0)) {
    return torch::lazy::GetLtcTensorOrCreateForWrappedNumber(tensor, device);
  }
  if (wrapped) {
    const at::Scalar value = WrappedNumberValue(tensor);
    if (IsZeroOrOne(value)) {
      return torch::lazy::LazyTensor::Create(
          torch::lazy::Value(torch::lazy::getIrBuilder()->MakeScalar(value, tensor.scalar_type()),
                             0),
          device);
    }
  }
  return torch::lazy::LazyTensor::Create(
      HostScalarValue(CopyHostScalar(tensor), device, wrapped ? nullptr : &tensor), device);
}

torch::lazy::LazyTensorPtr OptionalLtcTensorOrWrapNumber(const std::optional<at::Tensor>& tensor,
                                                         const torch::lazy::BackendDevice& device) {
  if (!tensor.has_value() || !tensor->defined()) {
    return nullptr;
  }
  return GetLtcTensorOrWrapNumber(*tensor, device);
}

}  // namespace lazyfuse
