#include "ops/dispatch_mode_factories.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/lazy/core/tensor.h>

#include <memory>
#include <utility>
#include <vector>

#include "ops/kernel_override.h"

namespace lazyfuse {
namespace {

bool NamesADevice(const c10::FunctionSchema& schema) {
  bool device = false;
  for (const c10::Argument& argument : schema.arguments()) {
    if (argument.alias_info() != nullptr) {
      return false;  // an out= or in-place variant writes a tensor it was given
    }
    device = device || argument.name() == "device";
  }
  return device && !schema.returns().empty();
}

at::Tensor Functional(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.device().type() != c10::kLazy || tensor.requires_grad() ||
      at::functionalization::impl::isFunctionalTensor(tensor) ||
      torch::lazy::TryGetLtcTensor(tensor) == nullptr) {
    return tensor;
  }
  return at::functionalization::impl::to_functional_tensor(tensor);
}

class FunctionalUnderModes final : public c10::OperatorKernel {
 public:
  explicit FunctionalUnderModes(c10::SafeKernelFunction snapshot)
      : snapshot_(std::move(snapshot)) {}

  void operator()(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    snapshot_.callBoxed(op, keys, stack);
    if (c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Functionalize)) {
      return;  // functionalization called the op, and wraps the result itself
    }
    const size_t returns = op.schema().returns().size();
    for (size_t k = stack->size() - returns; k < stack->size(); ++k) {
      c10::IValue& value = (*stack)[k];
      if (value.isTensor()) {
        value = Functional(value.toTensor());
      } else if (value.isTensorList()) {
        std::vector<at::Tensor> tensors = value.toTensorVector();
        for (at::Tensor& tensor : tensors) {
          tensor = Functional(tensor);
        }
        value = std::move(tensors);
      }
    }
  }

 private:
  c10::SafeKernelFunction snapshot_;
};

}  // namespace

void RegisterDispatchModeFactories() {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasSchema() || name.name.rfind("aten::", 0) != 0 ||
        !NamesADevice(op->schema()) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PythonTLSSnapshot)) {
      continue;
    }
    OverrideKernel(name,
                   c10::DispatchKey::PythonTLSSnapshot,
                   std::make_unique<FunctionalUnderModes>(
                       op->getComputedKernelForDispatchKey(c10::DispatchKey::PythonTLSSnapshot)),
                   "lazyfuse: lazy tensors made under a TorchDispatchMode are functional");
  }
}

}  // namespace lazyfuse
