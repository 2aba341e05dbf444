#include "ops/inplace_updates.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/ScalarType.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/functional_tensors.h"

namespace lazyfuse {
namespace {

// The errors eager's in-place kernels raise, named after the op.
void CheckInplaceResult(const c10::OperatorHandle& op,
                        const at::Tensor& self,
                        const at::Tensor& result) {
  // A real result casts to complex, but eager's abs_ refuses it by name.
  TORCH_CHECK(!self.is_complex() || op.schema().name() != "aten::abs_",
              "aten::abs_: In-place abs is not supported for complex tensors.");
  TORCH_CHECK(result.sym_sizes() == self.sym_sizes(),
              op.schema().name(),
              ": output with shape ",
              self.sym_sizes(),
              " doesn't match the broadcast shape ",
              result.sym_sizes());
  TORCH_CHECK(c10::canCast(result.scalar_type(), self.scalar_type()),
              op.schema().name(),
              ": result type ",
              result.scalar_type(),
              " can't be cast to the desired output type ",
              self.scalar_type());
}

// Registered at AutogradLazy, or, for an op torch has no functionalization
// of (polygamma_, whose functional overload orders its arguments otherwise),
// at Functionalize, where autograd and the version counter are done.
enum class Key { kAutogradLazy, kFunctionalize };

class InplaceUpdate final : public c10::OperatorKernel {
 public:
  InplaceUpdate(Key key, c10::OperatorHandle functional, std::vector<size_t> order, bool random)
      : key_(key),
        functional_(std::move(functional)),
        order_(std::move(order)),
        reordered_(!std::is_sorted(order_.begin(), order_.end())),
        random_(random) {}

  void operator()(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const size_t num_arguments = op.schema().arguments().size();
    const at::Tensor self = (*stack)[stack->size() - num_arguments].toTensor();
    if (key_ == Key::kFunctionalize) {
      TORCH_CHECK(at::functionalization::impl::isFunctionalTensor(self),
                  op.schema().name(),
                  ": mutating a non-functional tensor with a functional tensor is not allowed");
      Update(op, self, stack, /*bump_version=*/false);
      return;
    }
    if (!self.device().is_lazy() || !at::functionalization::impl::isFunctionalTensor(self)) {
      PassToAutograd(op, keys, stack);
      return;
    }
    if (AutogradRecords(*stack, num_arguments)) {
      // torch's meta check runs on this path, but some of its Python meta
      // kernels resize instead of raising (pow_.Tensor's). The functional op
      // on the same arguments says what functionalization will write; an op
      // that draws random numbers would draw twice, and keeps its shape.
      if (!random_) {
        torch::jit::Stack probe(stack->end() - num_arguments, stack->end());
        CheckInplaceResult(op, self, CallFunctional(&probe));
      }
      if (AnyArgumentTensor(*stack, num_arguments, HasTangent)) {
        CopyFunctionalResult(self, num_arguments, stack);
        return;
      }
      at::functionalization::impl::sync(self);
      const at::Tensor before = HeldValue(self);
      PassToAutograd(op, keys, stack);
      NoteWrittenValue(before, self);
      SyncBaseOfWrittenView(self);
      return;
    }
    Update(op, self, stack, /*bump_version=*/true);
  }

 private:
  // What functionalization does with an in-place op, checking its result in
  // C++ first; and what ADInplaceOrView does, when bump_version.
  void Update(const c10::OperatorHandle& op,
              const at::Tensor& self,
              torch::jit::Stack* stack,
              bool bump_version) {
    const at::Tensor result = CallFunctional(stack);
    CheckInplaceResult(op, self, result);
    if (bump_version) {
      // Raises for an inference tensor outside inference mode, before
      // anything is written.
      torch::autograd::impl::bump_version(self);
    }
    TakeWrittenValue(op.schema().name(), self, result);
    torch::jit::push(*stack, self);
  }

  // Under forward-mode AD, torch's functionalization kernel checks the op on
  // meta tensors first, and lerp_'s Python meta kernel then prints a tensor,
  // which asserts inside a dual level (and left the thread's dispatch keys
  // excluded). The functional op, recorded by autograd, and a copy into self
  // give the same value, gradient and tangent.
  void CopyFunctionalResult(const at::Tensor& self,
                            size_t num_arguments,
                            torch::jit::Stack* stack) const {
    torch::jit::Stack call(stack->end() - num_arguments, stack->end());
    if (reordered_) {
      const torch::jit::Stack arguments = call;
      for (size_t i = 0; i < num_arguments; ++i) {
        call[i] = arguments[order_[i]];
      }
    }
    functional_.callBoxed(&call);
    const at::Tensor result = torch::jit::pop(call).toTensor();
    torch::jit::drop(*stack, num_arguments);
    self.copy_(result);
    torch::jit::push(*stack, self);
  }

  // Runs the functional partner on the unwrapped lazy tensors of the
  // in-place op's arguments, the last entries of `stack`, which it consumes.
  at::Tensor CallFunctional(torch::jit::Stack* stack) const {
    const size_t num_arguments = order_.size();
    const size_t first = stack->size() - num_arguments;
    for (size_t i = first; i < stack->size(); ++i) {
      ForEachTensorIn((*stack)[i], FromFunctional);
    }
    if (reordered_) {
      std::vector<c10::IValue> arguments(stack->begin() + first, stack->end());
      for (size_t i = 0; i < num_arguments; ++i) {
        (*stack)[first + i] = std::move(arguments[order_[i]]);
      }
    }
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKey::Functionalize);
      functional_.callBoxed(stack);
    }
    return torch::jit::pop(*stack).toTensor();
  }

  Key key_;
  c10::OperatorHandle functional_;
  std::vector<size_t> order_;
  bool reordered_;
  bool random_;
};

// Where each of the functional op's arguments sits among the in-place op's,
// matched by name and type: polygamma_(self, n) is polygamma(n, self).
std::optional<std::vector<size_t>> ArgumentOrder(const c10::FunctionSchema& inplace,
                                                 const c10::FunctionSchema& functional) {
  const auto& from = inplace.arguments();
  const auto& to = functional.arguments();
  if (from.size() != to.size()) {
    return std::nullopt;
  }
  std::vector<size_t> order;
  for (const c10::Argument& wanted : to) {
    size_t i = 0;
    while (i < from.size() &&
           (from[i].name() != wanted.name() || *from[i].type() != *wanted.type())) {
      ++i;
    }
    if (i == from.size()) {
      return std::nullopt;
    }
    order.push_back(i);
  }
  return order;
}

// An aten op `f_(Tensor(a!) self, ...) -> Tensor(a!)` that writes only self,
// and keeps its shape.
bool UpdatesSelfOnly(const c10::OperatorHandle& op) {
  const std::string& name = op.operator_name().name;
  return name.rfind("aten::", 0) == 0 && name.back() == '_' && !ChangesShape(name) &&
         name != "aten::copy_" && op.hasSchema() && IsInplaceSchema(op.schema()) &&
         *op.schema().arguments()[0].type() == *c10::TensorType::get() &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
}

bool DrawsRandom(const c10::FunctionSchema& schema) {
  for (const c10::Argument& argument : schema.arguments()) {
    if (argument.type()->str().find("Generator") != std::string::npos) {
      return true;
    }
  }
  return false;
}

using OverloadsByName = std::unordered_map<std::string, std::vector<c10::OperatorHandle>>;

struct FunctionalPartner {
  c10::OperatorHandle op;
  std::vector<size_t> order;
};

// The functional partner of `f_`: the overload of `f` with the same
// arguments (pow_.Tensor's is pow.Tensor_Tensor), which aliases nothing.
std::optional<FunctionalPartner> FindFunctionalPartner(const c10::OperatorHandle& op,
                                                       const OverloadsByName& overloads) {
  const std::string& name = op.operator_name().name;
  auto found = overloads.find(name.substr(0, name.size() - 1));
  if (found == overloads.end()) {
    return std::nullopt;
  }
  for (const c10::OperatorHandle& functional : found->second) {
    if (!functional.hasSchema() || !IsFunctionalSchema(functional.schema()) ||
        functional.schema().returns().size() != 1) {
      continue;
    }
    std::optional<std::vector<size_t>> order = ArgumentOrder(op.schema(), functional.schema());
    if (order) {
      return FunctionalPartner{functional, std::move(*order)};
    }
  }
  return std::nullopt;
}

}  // namespace

void RegisterInplaceUpdates() {
  const char* env = std::getenv("LAZYFUSE_INPLACE_UPDATES");
  if (env != nullptr && std::string(env) == "0") {
    return;
  }
  // Leaked on purpose, as the dispatcher's own registrations are: lazy
  // tensors may be updated in place from exit-time teardown.
  static auto* handles = new std::vector<c10::RegistrationHandleRAII>();
  OverloadsByName overloads;
  std::vector<c10::OperatorHandle> inplace;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (op) {
      overloads[name.name].push_back(*op);
      if (UpdatesSelfOnly(*op)) {
        inplace.push_back(*op);
      }
    }
  }
  for (const c10::OperatorHandle& op : inplace) {
    std::optional<FunctionalPartner> functional = FindFunctionalPartner(op, overloads);
    if (!functional) {
      continue;
    }
    const auto add = [&](Key key, c10::DispatchKey dispatch_key) {
      handles->push_back(c10::Dispatcher::singleton().registerImpl(
          op.operator_name(),
          dispatch_key,
          c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<InplaceUpdate>(
              key, functional->op, functional->order, DrawsRandom(op.schema()))),
          std::nullopt,
          nullptr,
          "lazyfuse: in-place update checked in C++"));
    };
    if (op.hasKernelForDispatchKey(c10::DispatchKey::Autograd) &&
        !op.hasKernelForDispatchKey(c10::DispatchKey::AutogradLazy)) {
      add(Key::kAutogradLazy, c10::DispatchKey::AutogradLazy);
    }
    if (!op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) {
      add(Key::kFunctionalize, c10::DispatchKey::Functionalize);
    }
  }
}

}  // namespace lazyfuse
