#include "ops/eager_copy.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "ops/functional_tensors.h"
#include "ops/kernel_override.h"
#include "ops/repeating_views.h"

namespace lazyfuse {
namespace {

// Functionalization's own copy_ kernel, which every other case goes to.
std::optional<c10::SafeKernelFunction>& FunctionalizationCopy() {
  static auto* kernel = new std::optional<c10::SafeKernelFunction>();
  return *kernel;
}

void Copy(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  // copy_(Tensor(a!) self, Tensor src, bool non_blocking=False)
  const size_t begin = stack->size() - 3;
  const at::Tensor self = (*stack)[begin].toTensor();
  const at::Tensor src = (*stack)[begin + 1].toTensor();
  CheckWriteTarget("aten::copy_", self);
  if (!at::functionalization::impl::isFunctionalTensor(self) &&
      at::functionalization::impl::isFunctionalTensor(src) && src.device().is_lazy()) {
    // As functionalization does for XLA: unwrap the source, copy below.
    (*stack)[begin + 1] = c10::IValue(FromFunctional(src));
    c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKey::Functionalize);
    op.callBoxed(stack);
    return;
  }
  FunctionalizationCopy()->callBoxed(op, keys, stack);
  SyncBaseOfWrittenView(self);
}

}  // namespace

void RegisterEagerCopy() {
  const c10::OperatorHandle copy =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  FunctionalizationCopy() = copy.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize);
  DropOverrideWarning quiet(c10::WarningUtils::get_warning_handler());
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  static auto* library = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  library->impl("copy_", torch::CppFunction::makeFromBoxedFunction<&Copy>());
}

}  // namespace lazyfuse
