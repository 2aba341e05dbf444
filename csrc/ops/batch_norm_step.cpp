#include "ops/batch_norm_step.h"

#include <ATen/Functions.h>
#include <torch/csrc/lazy/core/metrics.h>

namespace lazyfuse {
namespace {

bool Present(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() && tensor->defined();
}

// The memory the update of step input `input` (holding `statistic`) goes into.
at::Tensor StatisticToUpdate(KernelArgs& args, size_t input, const at::Tensor& statistic) {
  at::Tensor own = args.InputToWriteInto(input);
  if (!own.defined()) {
    return statistic.clone();
  }
  args.overwrote(input);
  TORCH_LAZY_COUNTER("LazyFuseInPlaceStatistics", 1);
  return own;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> BatchNormTrainingStep(
    KernelArgs& args,
    const at::Tensor& input,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias,
    const at::Tensor& running_mean,
    const at::Tensor& running_var,
    bool training,
    double momentum,
    double eps) {
  // The step's inputs, in operand order: input, weight and bias where
  // present, then the running statistics.
  const size_t mean_input = 1 + Present(weight) + Present(bias);
  at::Tensor mean = StatisticToUpdate(args, mean_input, running_mean);
  at::Tensor var = StatisticToUpdate(args, mean_input + 1, running_var);
  auto [out, save_mean, save_invstd] =
      at::_native_batch_norm_legit(input, weight, bias, mean, var, training, momentum, eps);
  return {std::move(out), std::move(save_mean), std::move(save_invstd), mean, var};
}

}  // namespace lazyfuse
