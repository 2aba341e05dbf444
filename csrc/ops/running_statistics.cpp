#include "ops/running_statistics.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <utility>
#include <vector>

#include "ops/functional_tensors.h"
#include "ops/kernel_override.h"
#include "ops/repeating_views.h"

namespace lazyfuse {
namespace {

constexpr const char* kOp = "aten::native_batch_norm";

// native_batch_norm(input, weight, bias, running_mean, running_var,
// training, momentum, eps): which arguments it writes when training.
constexpr size_t kRunningMean = 3;
constexpr size_t kRunningVar = 4;
constexpr size_t kTraining = 5;

class ReportedStatisticWrites final : public c10::OperatorKernel {
 public:
  explicit ReportedStatisticWrites(c10::SafeKernelFunction functionalization)
      : functionalization_(std::move(functionalization)) {}

  void operator()(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const size_t first = stack->size() - op.schema().arguments().size();
    std::vector<at::Tensor> written;
    if ((*stack)[first + kTraining].toBool()) {
      for (size_t index : {kRunningMean, kRunningVar}) {
        const c10::IValue& value = (*stack)[first + index];
        if (value.isTensor() && IsLazyFunctional(value.toTensor())) {
          written.push_back(value.toTensor());
        }
      }
    }
    CheckWriteTargets(kOp, written);
    functionalization_.callBoxed(op, keys, stack);
    for (const at::Tensor& statistic : written) {
      // The kernel gave the wrapper's own value its new IR.
      TakeWrittenValue(
          kOp, statistic, at::functionalization::impl::from_functional_tensor(statistic));
    }
  }

 private:
  c10::SafeKernelFunction functionalization_;
};

}  // namespace

void RegisterRunningStatisticWrites() {
  const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findOp({"aten::native_batch_norm", ""});
  TORCH_INTERNAL_ASSERT(op.has_value());  // its Functionalize kernel is the fallback
  OverrideKernel(op->operator_name(),
                 c10::DispatchKey::Functionalize,
                 std::make_unique<ReportedStatisticWrites>(
                     op->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize)),
                 "lazyfuse: native_batch_norm's running statistics are written through "
                 "functionalization");
}

}  // namespace lazyfuse
