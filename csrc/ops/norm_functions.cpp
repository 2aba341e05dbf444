// native_batch_norm with shapes from its meta kernel. torch's
// compute_shape_native_batch_norm gives the saved mean and inverse std the
// default dtype when there are no running stats, so a float64 batch norm
// saved float32 statistics and its backward failed on mixed dtypes.

#include <ATen/Functions.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor_util.h>

#include "generated/LazyIr.h"
#include "generated/LazyNativeFunctions.h"
#include "ops/device_checks.h"

namespace lazyfuse {
namespace {

at::Tensor OnMeta(const at::Tensor& tensor) {
  return at::empty_strided(tensor.sizes(), tensor.strides(), tensor.options().device(at::kMeta));
}

std::optional<at::Tensor> OnMeta(const std::optional<at::Tensor>& tensor) {
  if (!tensor.has_value() || !tensor->defined()) {
    return std::nullopt;
  }
  return OnMeta(*tensor);
}

std::optional<torch::lazy::Value> ValueOf(const std::optional<at::Tensor>& tensor,
                                          const torch::lazy::BackendDevice& device) {
  if (!tensor.has_value() || !tensor->defined()) {
    return std::nullopt;
  }
  return torch::lazy::GetLtcTensorOrCreateForWrappedNumber(*tensor, device)->GetIrValue();
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> LazyNativeFunctions::native_batch_norm(
    const at::Tensor& input,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var,
    bool training,
    double momentum,
    double eps) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  constexpr const char* kOp = "aten::native_batch_norm";
  CheckOnLazyDevice(kOp, "input", input);
  CheckOnLazyDevice(kOp, "weight", weight);
  CheckOnLazyDevice(kOp, "bias", bias);
  CheckOnLazyDevice(kOp, "running_mean", running_mean);
  CheckOnLazyDevice(kOp, "running_var", running_var);
  const auto device = torch::lazy::GetBackendDevice(input);
  TORCH_INTERNAL_ASSERT(device);
  const torch::lazy::Value input_value =
      torch::lazy::GetLtcTensorOrCreateForWrappedNumber(input, *device)->GetIrValue();
  const auto weight_value = ValueOf(weight, *device);
  const auto bias_value = ValueOf(bias, *device);
  const auto mean_value = ValueOf(running_mean, *device);
  const auto var_value = ValueOf(running_var, *device);
  torch::lazy::NodePtr node = torch::lazy::ReuseNode<NativeBatchNorm>(
      input_value, weight_value, bias_value, mean_value, var_value, training, momentum, eps);
  if (!node) {
    const auto [out, save_mean, save_invstd] = at::native_batch_norm(OnMeta(input),
                                                                     OnMeta(weight),
                                                                     OnMeta(bias),
                                                                     OnMeta(running_mean),
                                                                     OnMeta(running_var),
                                                                     training,
                                                                     momentum,
                                                                     eps);
    std::vector<torch::lazy::Shape> shapes;
    for (const at::Tensor& result : {out, save_mean, save_invstd}) {
      shapes.emplace_back(result.scalar_type(), result.sizes().vec());
    }
    node = torch::lazy::MakeNode<NativeBatchNorm>(input_value,
                                                  weight_value,
                                                  bias_value,
                                                  mean_value,
                                                  var_value,
                                                  training,
                                                  momentum,
                                                  eps,
                                                  std::move(shapes));
    torch::lazy::CacheNode(node);
  }
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < 3; ++i) {
    results.push_back(torch::lazy::CreateAtenFromLtcTensor(
        torch::lazy::LazyTensor::Create(torch::lazy::Value(node, i), *device)));
  }
  return {results[0], results[1], results[2]};
}

}  // namespace lazyfuse
