#include "ops/write_records.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ltc/prior_values.h"
#include "ops/functional_tensors.h"
#include "ops/out_arguments.h"

namespace lazyfuse {
namespace {

class RecordWrites final : public c10::OperatorKernel {
 public:
  RecordWrites(std::vector<size_t> written, std::optional<OutCall> out_call)
      : written_(std::move(written)), out_call_(std::move(out_call)) {}

  void operator()(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    if (out_call_ && out_call_->RunsItself(op, stack)) {
      return;  // it recorded its writes
    }
    const size_t first = stack->size() - op.schema().arguments().size();
    // Each written lazy tensor, with the value it holds before the op.
    std::vector<std::pair<at::Tensor, at::Tensor>> writes;
    for (size_t i : written_) {
      AnyTensorIn((*stack)[first + i], [&](const at::Tensor& tensor) {
        if (IsLazyFunctional(tensor)) {
          at::functionalization::impl::sync(tensor);
          writes.emplace_back(tensor, HeldValue(tensor));
        }
        return false;
      });
    }
    const std::vector<at::Tensor> outs =
        out_call_ ? out_call_->Outs(op, *stack) : std::vector<at::Tensor>();
    PassToAutograd(op, keys, stack);
    if (out_call_) {
      out_call_->KeepResultsInOuts(op, outs, stack);
    }
    for (const auto& [tensor, before] : writes) {
      NoteWrittenValue(before, tensor);
      SyncBaseOfWrittenView(tensor);
    }
  }

 private:
  std::vector<size_t> written_;
  std::optional<OutCall> out_call_;
};

}  // namespace

void RegisterWriteRecords() {
  // Leaked on purpose, as the dispatcher's own registrations are.
  static auto* handles = new std::vector<c10::RegistrationHandleRAII>();
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasSchema() || name.name.rfind("aten::", 0) != 0 || ChangesShape(name.name) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::AutogradLazy)) {
      continue;
    }
    std::optional<OutCall> out_call = OutCall::For(*op);
    // An out= composite runs with torch's autograd alias kernel, as others do.
    const bool out_composite =
        out_call && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::Autograd) && !out_composite) {
      continue;
    }
    std::vector<size_t> written = WrittenArguments(op->schema());
    if (written.empty()) {
      continue;
    }
    handles->push_back(c10::Dispatcher::singleton().registerImpl(
        name,
        c10::DispatchKey::AutogradLazy,
        c10::KernelFunction::makeFromBoxedFunctor(
            std::make_unique<RecordWrites>(std::move(written), std::move(out_call))),
        std::nullopt,
        nullptr,
        "lazyfuse: records what a write replaces"));
  }
}

}  // namespace lazyfuse
