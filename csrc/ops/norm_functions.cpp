// native_batch_norm and its backward with shapes from their meta kernels; a
// training step's running statistics as the node's results.
// torch's compute_shape_native_batch_norm gives the saved mean and inverse
// std the default dtype when there are no running stats, so a float64 batch
// norm saved float32 statistics and its backward failed on mixed dtypes; its
// compute_shape_native_batch_norm_backward gives the weight and bias
// gradients the default dtype, so a fused kernel read a float64 gradient as
// float32. Their meta kernels are Python decompositions, run for every node
// the trace cannot reuse (test_trace_cost.py); the usual calls take the same
// shapes from the rules below, and only the unusual ones, whose errors the
// meta kernels raise, run them.

#include <ATen/Functions.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor_util.h>

#include "generated/LazyIr.h"
#include "generated/LazyNativeFunctions.h"
#include "ltc/config.h"
#include "ops/device_checks.h"
#include "ops/meta_tensors.h"

namespace lazyfuse {
namespace {

std::optional<torch::lazy::Value> ValueOf(const std::optional<at::Tensor>& tensor,
                                          const torch::lazy::BackendDevice& device) {
  if (!tensor.has_value() || !tensor->defined()) {
    return std::nullopt;
  }
  return torch::lazy::GetLtcTensorOrCreateForWrappedNumber(*tensor, device)->GetIrValue();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ThreeResults(
    const torch::lazy::NodePtr& node, const torch::lazy::BackendDevice& device) {
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < 3; ++i) {
    results.push_back(torch::lazy::CreateAtenFromLtcTensor(
        torch::lazy::LazyTensor::Create(torch::lazy::Value(node, i), device)));
  }
  return {results[0], results[1], results[2]};
}

// Every defined tensor is one channel each: [C].
bool PerChannel(std::initializer_list<const std::optional<at::Tensor>*> tensors, int64_t channels) {
  for (const std::optional<at::Tensor>* tensor : tensors) {
    if (tensor->has_value() && (*tensor)->defined() &&
        ((*tensor)->dim() != 1 || (*tensor)->size(0) != channels)) {
      return false;
    }
  }
  return true;
}

bool Defined(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() && tensor->defined();
}

// The saved mean and inverse std as ATen's CPU kernel makes them, where the
// meta kernel (and CUDA's) keeps them per channel in the computation dtype:
// in the input's dtype, float where a half or bfloat16 input meets a float
// parameter, and empty in eval mode, which saves none.
torch::lazy::Shape CpuSavedStatistics(
    const at::Tensor& input,
    std::initializer_list<const std::optional<at::Tensor>*> parameters,
    int64_t channels,
    bool training) {
  at::ScalarType type = input.scalar_type();
  const bool reduced = type == at::kHalf || type == at::kBFloat16;
  for (const std::optional<at::Tensor>* parameter : parameters) {
    if (reduced && Defined(*parameter) && (*parameter)->scalar_type() == at::kFloat) {
      type = at::kFloat;
    }
  }
  return torch::lazy::Shape(type, {training ? channels : 0});
}

// The decompositions' statistics are kept in the input's computation dtype.
at::ScalarType ComputationType(at::ScalarType type) {
  switch (type) {
    case at::kHalf:
    case at::kBFloat16:
      return at::kFloat;
    case at::kComplexHalf:
      return at::kComplexFloat;
    default:
      return type;
  }
}

// The node IR reuse finds for `operands`, else a new one with the shapes
// `shapes()` gives (computed only then: they run a meta kernel).
template <typename NodeT, typename ShapesFn, typename... Operands>
torch::lazy::NodePtr ReuseOrMakeWithShapes(ShapesFn&& shapes, const Operands&... operands) {
  torch::lazy::NodePtr node = torch::lazy::ReuseNode<NodeT>(operands...);
  if (!node) {
    node = torch::lazy::MakeNode<NodeT>(operands..., shapes());
    torch::lazy::CacheNode(node);
  }
  return node;
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
  const auto shapes = [&] {
    const int64_t channels = input.dim() >= 2 ? input.size(1) : -1;
    std::vector<torch::lazy::Shape> result_shapes;
    if (channels >= 0 && PerChannel({&weight, &bias, &running_mean, &running_var}, channels) &&
        (training || (Defined(running_mean) && Defined(running_var)))) {
      const torch::lazy::Shape statistics(ComputationType(input.scalar_type()), {channels});
      result_shapes = {
          torch::lazy::Shape(input.scalar_type(), input.sizes().vec()), statistics, statistics};
    } else {
      const auto [out, save_mean, save_invstd] = at::native_batch_norm(OnMeta(input),
                                                                       OnMeta(weight),
                                                                       OnMeta(bias),
                                                                       OnMeta(running_mean),
                                                                       OnMeta(running_var),
                                                                       training,
                                                                       momentum,
                                                                       eps);
      for (const at::Tensor& result : {out, save_mean, save_invstd}) {
        result_shapes.emplace_back(result.scalar_type(), result.sizes().vec());
      }
    }
    if (BackingDevice().is_cpu() && channels >= 0) {
      result_shapes[1] = result_shapes[2] = CpuSavedStatistics(
          input, {&weight, &bias, &running_mean, &running_var}, channels, training);
    }
    return result_shapes;
  };
  if (training && mean_value && var_value) {
    // ATen's kernel writes the running statistics, though the schema says
    // it does not, so functionalization never learns of it: the node returns
    // them, and they take their new values here, as eager's update would.
    const auto shapes_and_statistics = [&] {
      std::vector<torch::lazy::Shape> result_shapes = shapes();
      for (const at::Tensor& statistic : {*running_mean, *running_var}) {
        result_shapes.emplace_back(statistic.scalar_type(), statistic.sizes().vec());
      }
      return result_shapes;
    };
    const torch::lazy::NodePtr node =
        ReuseOrMakeWithShapes<NativeBatchNormLegitFunctional>(shapes_and_statistics,
                                                              input_value,
                                                              weight_value,
                                                              bias_value,
                                                              *mean_value,
                                                              *var_value,
                                                              training,
                                                              momentum,
                                                              eps);
    torch::lazy::TryGetLtcTensor(*running_mean)->SetInPlaceIrValue(torch::lazy::Value(node, 3));
    torch::lazy::TryGetLtcTensor(*running_var)->SetInPlaceIrValue(torch::lazy::Value(node, 4));
    return ThreeResults(node, *device);
  }
  const torch::lazy::NodePtr node = ReuseOrMakeWithShapes<NativeBatchNorm>(shapes,
                                                                           input_value,
                                                                           weight_value,
                                                                           bias_value,
                                                                           mean_value,
                                                                           var_value,
                                                                           training,
                                                                           momentum,
                                                                           eps);
  return ThreeResults(node, *device);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> LazyNativeFunctions::native_batch_norm_backward(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean,
    const std::optional<at::Tensor>& save_invstd,
    bool train,
    double eps,
    std::array<bool, 3> output_mask) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  constexpr const char* kOp = "aten::native_batch_norm_backward";
  CheckOnLazyDevice(kOp, "grad_out", grad_out);
  CheckOnLazyDevice(kOp, "input", input);
  CheckOnLazyDevice(kOp, "weight", weight);
  CheckOnLazyDevice(kOp, "running_mean", running_mean);
  CheckOnLazyDevice(kOp, "running_var", running_var);
  CheckOnLazyDevice(kOp, "save_mean", save_mean);
  CheckOnLazyDevice(kOp, "save_invstd", save_invstd);
  const auto device = torch::lazy::GetBackendDevice(grad_out, input);
  TORCH_INTERNAL_ASSERT(device);
  const auto value = [&](const at::Tensor& tensor) {
    return torch::lazy::GetLtcTensorOrCreateForWrappedNumber(tensor, *device)->GetIrValue();
  };
  const std::vector<bool> mask(output_mask.begin(), output_mask.end());
  const torch::lazy::Value grad_value = value(grad_out);
  const torch::lazy::Value input_value = value(input);
  const auto weight_value = ValueOf(weight, *device);
  const auto mean_value = ValueOf(running_mean, *device);
  const auto var_value = ValueOf(running_var, *device);
  const auto save_mean_value = ValueOf(save_mean, *device);
  const auto save_invstd_value = ValueOf(save_invstd, *device);
  const at::ScalarType affine =
      weight.has_value() && weight->defined() ? weight->scalar_type() : input.scalar_type();
  const auto shapes = [&] {
    if (input.dim() >= 2 && (!train || (Defined(save_mean) && Defined(save_invstd)))) {
      const torch::lazy::Shape per_channel(affine, {input.size(1)});
      return std::vector<torch::lazy::Shape>{
          torch::lazy::Shape(input.scalar_type(), input.sizes().vec()), per_channel, per_channel};
    }
    const auto results = at::native_batch_norm_backward(OnMeta(grad_out),
                                                        OnMeta(input),
                                                        OnMeta(weight),
                                                        OnMeta(running_mean),
                                                        OnMeta(running_var),
                                                        OnMeta(save_mean),
                                                        OnMeta(save_invstd),
                                                        train,
                                                        eps,
                                                        output_mask);
    // A masked-out gradient is undefined in ATen; its node output still
    // needs a shape: the weight's, per channel.
    const std::vector<int64_t> channels{input.dim() > 1 ? input.size(1) : 1};
    std::vector<torch::lazy::Shape> result_shapes{
        torch::lazy::Shape(input.scalar_type(), input.sizes().vec())};
    for (const at::Tensor& result : {std::get<1>(results), std::get<2>(results)}) {
      result_shapes.push_back(result.defined()
                                  ? torch::lazy::Shape(result.scalar_type(), result.sizes().vec())
                                  : torch::lazy::Shape(affine, channels));
    }
    return result_shapes;
  };
  const torch::lazy::NodePtr node =
      ReuseOrMakeWithShapes<NativeBatchNormBackward>(shapes,
                                                     grad_value,
                                                     input_value,
                                                     weight_value,
                                                     mean_value,
                                                     var_value,
                                                     save_mean_value,
                                                     save_invstd_value,
                                                     train,
                                                     eps,
                                                     mask);
  return ThreeResults(node, *device);
}

}  // namespace lazyfuse
