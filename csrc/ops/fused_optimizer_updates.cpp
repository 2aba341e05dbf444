#include "ops/fused_optimizer_updates.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/functional_tensors.h"

namespace lazyfuse {
namespace {

class FusedListUpdate final : public c10::OperatorKernel {
 public:
  FusedListUpdate(c10::OperatorHandle functional, std::vector<size_t> written)
      : functional_(std::move(functional)), written_(std::move(written)) {}

  void operator()(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const size_t num_arguments = op.schema().arguments().size();
    const size_t first = stack->size() - num_arguments;
    if (!AnyArgumentTensor(*stack, num_arguments, IsLazyFunctional)) {
      PassToAutograd(op, keys, stack);
      return;
    }
    std::vector<std::vector<at::Tensor>> targets;
    for (size_t k : written_) {
      targets.push_back((*stack)[first + k].toTensorList().vec());
      for (const at::Tensor& target : targets.back()) {
        TORCH_CHECK(IsLazyFunctional(target),
                    op.schema().name(),
                    ": the tensors of argument '",
                    op.schema().arguments()[k].name(),
                    "' must all be lazy tensors, as the other arguments' are; got one on ",
                    target.defined() ? target.device().str() : std::string("no device"));
      }
      CheckWriteTargets(op.schema().name(), targets.back());
    }
    for (size_t i = first; i < stack->size(); ++i) {
      ForEachTensorIn((*stack)[i], FromFunctional);
    }
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKey::Functionalize);
      functional_.callBoxed(stack);
    }
    std::vector<c10::IValue> results(stack->end() - written_.size(), stack->end());
    stack->resize(stack->size() - written_.size());
    for (size_t k = 0; k < targets.size(); ++k) {
      const std::vector<at::Tensor> values = results[k].toTensorList().vec();
      TORCH_CHECK(values.size() == targets[k].size(),
                  op.schema().name(),
                  ": its functional form returned ",
                  values.size(),
                  " tensors for the ",
                  targets[k].size(),
                  " of argument '",
                  op.schema().arguments()[written_[k]].name(),
                  "'");
      for (size_t j = 0; j < values.size(); ++j) {
        torch::autograd::impl::bump_version(targets[k][j]);
        TakeWrittenValue(op.schema().name(), targets[k][j], values[j]);
      }
    }
  }

 private:
  c10::OperatorHandle functional_;
  std::vector<size_t> written_;  // the arguments it writes, in order
};

// `aten::_fused_<name>_(..., Tensor(a!)[] self, ...) -> ()`: the arguments it
// writes, all tensor lists; nullopt for any other op.
std::optional<std::vector<size_t>> WrittenLists(const c10::OperatorHandle& op) {
  const std::string& name = op.operator_name().name;
  if (name.rfind("aten::_fused_", 0) != 0 || name.back() != '_' || !op.hasSchema() ||
      !op.schema().returns().empty()) {
    return std::nullopt;
  }
  std::vector<size_t> written;
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias == nullptr) {
      continue;
    }
    if (!alias->isWrite() || *arguments[i].type() != *c10::ListType::ofTensors()) {
      return std::nullopt;
    }
    written.push_back(i);
  }
  return written.empty() ? std::nullopt : std::make_optional(written);
}

// `_fused_adam.<overload>` for `_fused_adam_.<overload>`: the same arguments,
// in order, and one tensor list returned for each written argument.
std::optional<c10::OperatorHandle> FunctionalPartner(const c10::OperatorHandle& op,
                                                     size_t num_written) {
  const c10::OperatorName& name = op.operator_name();
  std::optional<c10::OperatorHandle> functional = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(name.name.substr(0, name.name.size() - 1), name.overload_name));
  if (!functional || !functional->hasSchema() || !IsFunctionalSchema(functional->schema())) {
    return std::nullopt;
  }
  const auto& from = op.schema().arguments();
  const auto& to = functional->schema().arguments();
  const auto& returns = functional->schema().returns();
  if (from.size() != to.size() || returns.size() != num_written) {
    return std::nullopt;
  }
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i].name() != to[i].name() || *from[i].type() != *to[i].type()) {
      return std::nullopt;
    }
  }
  for (const c10::Argument& result : returns) {
    if (*result.type() != *c10::ListType::ofTensors()) {
      return std::nullopt;
    }
  }
  return functional;
}

}  // namespace

void RegisterFusedOptimizerUpdates() {
  // Leaked on purpose, as the dispatcher's own registrations are.
  static auto* handles = new std::vector<c10::RegistrationHandleRAII>();
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::AutogradLazy)) {
      continue;
    }
    std::optional<std::vector<size_t>> written = WrittenLists(*op);
    if (!written) {
      continue;
    }
    std::optional<c10::OperatorHandle> functional = FunctionalPartner(*op, written->size());
    if (!functional) {
      continue;
    }
    handles->push_back(c10::Dispatcher::singleton().registerImpl(
        op->operator_name(),
        c10::DispatchKey::AutogradLazy,
        c10::KernelFunction::makeFromBoxedFunctor(
            std::make_unique<FusedListUpdate>(*functional, std::move(*written))),
        std::nullopt,
        nullptr,
        "lazyfuse: fused optimizer step functionalized in C++"));
  }
}

}  // namespace lazyfuse
