#include "ops/functionalized_composite.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "ltc/eager_fallback.h"
#include "ops/functional_tensors.h"

namespace lazyfuse {
namespace {

// Views refused below functionalization on this thread (eager_fallback's
// hook counts them): how an aten composite shows it takes views.
thread_local size_t t_views_refused = 0;

// Only lazy tensors are wrapped: a composite reads a CPU argument's data
// (_pack_padded_sequence's lengths), which a wrapper hides.
at::Tensor LazyToFunctional(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_lazy() ? ToFunctional(tensor) : tensor;
}

// The Lazy kernel of an op in Note [Composite kernels below functionalization].
void RunFunctionalized(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // The op was redefined without a composite kernel since it was registered.
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) {
    LazyFuseEagerFallback(op, stack);
    return;
  }
  TORCH_LAZY_COUNTER("LazyFuseFunctionalizedComposite", 1);
  const size_t num_arguments = op.schema().arguments().size();
  for (size_t i = stack->size() - num_arguments; i < stack->size(); ++i) {
    ForEachTensorIn((*stack)[i], LazyToFunctional);
  }
  {
    // As at::functionalization::impl::functionalize_op_helper does, which
    // would call the Meta kernel (a custom op's fake one) instead.
    const c10::impl::LocalDispatchKeySet current = c10::impl::tls_local_dispatch_key_set();
    c10::impl::PODLocalDispatchKeySet reenabled;
    reenabled.set_included(current.included_);
    reenabled.set_excluded(current.excluded_.remove(c10::DispatchKey::Functionalize));
    c10::impl::ForceDispatchKeyGuard guard(reenabled);
    c10::Dispatcher::singleton().callBoxedForDispatchKey(
        op, c10::DispatchKey::CompositeExplicitAutograd, stack);
  }
  const size_t num_returns = op.schema().returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    ForEachTensorIn((*stack)[i], FromFunctional);
  }
}

// The Functionalize kernel of a functional CompositeImplicitAutograd op,
// reached only where autograd keys are excluded (inference mode). On lazy
// tensors it decomposes the op above functionalization, as autograd's
// dispatch would have (calling lazyfuse's own override there, if any);
// Note [Inference mode and functionalization]. On other tensors it does what
// functionalization's fallback does for such an op, so torch.compile and
// torch.export see no change.
void DecomposeFunctionalized(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  // Tensor lists too: vstack's, einsum's and meshgrid's.
  const bool lazy = AnyArgumentTensor(*stack, num_arguments, IsLazyTensor);
  if (lazy && op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
      !op.hasKernelForDispatchKey(c10::DispatchKey::Lazy)) {
    const bool override = op.hasKernelForDispatchKey(c10::DispatchKey::AutogradLazy);
    c10::Dispatcher::singleton().callBoxedForDispatchKey(
        op,
        override ? c10::DispatchKey::AutogradLazy : c10::DispatchKey::CompositeImplicitAutograd,
        stack);
    return;
  }
  CallAsFunctionalizationFallback(op, stack);
}

// An in-place CompositeImplicitAutograd op (square_, selu_) reaching
// functionalization: inference mode skipped the autograd key where it would
// have decomposed into ops functionalization knows. Decomposes it here, on
// any tensor: functionalization's fallback refuses a schema with aliases.
void DecomposeInplaceFunctionalized(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  c10::Dispatcher::singleton().callBoxedForDispatchKey(
      op, c10::DispatchKey::CompositeImplicitAutograd, stack);
}

bool NeedsInplaceDecomposition(const c10::OperatorHandle& op) {
  return op.hasSchema() && IsInplaceSchema(op.schema()) &&
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize);
}

// An op with a Lazy kernel of its own (silu_backward) keeps reaching it
// through functionalization's fallback.
bool NeedsFunctionalizeDecomposition(const c10::OperatorHandle& op) {
  return op.hasSchema() && IsFunctionalSchema(op.schema()) &&
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::Lazy);
}

// aten's composite kernels that take views are composed from lowered ops in
// composite_functions.cpp; every other namespace is a library's.
bool NeedsFunctionalizedComposite(const c10::OperatorHandle& op) {
  const auto name_space = op.operator_name().getNamespace();
  // A collective's composite kernel would call the process group with lazy
  // tensors; one lazyfuse does not record is refused by the eager fallback.
  return !(name_space.has_value() && *name_space == "aten") &&
         !IsDistributedOp(op.operator_name()) && op.hasSchema() &&
         IsFunctionalSchema(op.schema()) &&
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::Lazy);
}

// A bare lazy tensor has no storage, and LTC leaves it a null one, which a
// composite reading its size dereferences (_has_same_storage_numel's did).
// Marked, a read raises, and the op runs as one that cannot run here does.
void ThrowOnStorageAccess(const at::Tensor& tensor) {
  if (tensor.defined() && tensor.device().is_lazy() && !tensor.has_storage() &&
      !at::functionalization::impl::isFunctionalTensor(tensor)) {
    tensor.unsafeGetTensorImpl()->release_storage_and_set_meta_custom_data_ptr_error_msg_(
        std::nullopt);
  }
}

// The Lazy kernel of an aten op in Note [aten composites on bare lazy
// tensors]: its composite runs as it would without this kernel until the
// op shows it cannot, then the way that works from then on.
class AtenComposite final : public c10::OperatorKernel {
 public:
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const Way way = way_.load(std::memory_order_relaxed);
    if (way != Way::kComposite) {
      Run(way, op, stack);
      return;
    }
    const size_t begin = stack->size() - op.schema().arguments().size();
    const std::vector<c10::IValue> arguments(stack->begin() + begin, stack->end());
    // Only until the composite has run once: a kernel that reads storage
    // does on every call, and marking costs an allocation per tensor, on the
    // hot path of ops such as the optimizers' _foreach_* ones.
    if (!ran_.load(std::memory_order_relaxed)) {
      for (auto it = stack->begin() + begin; it != stack->end(); ++it) {
        AnyTensorIn(*it, [](const at::Tensor& tensor) {
          ThrowOnStorageAccess(tensor);
          return false;
        });
      }
    }
    const size_t refused = t_views_refused;
    try {
      c10::Dispatcher::singleton().callBoxedForDispatchKey(
          op, c10::DispatchKey::CompositeExplicitAutograd, stack);
      ran_.store(true, std::memory_order_relaxed);
      return;
    } catch (const c10::Error&) {
    }
    // A functional op's partial run changed nothing a caller can see: its
    // inputs are unchanged and the IR it built is unreachable.
    stack->resize(begin);
    stack->insert(stack->end(), arguments.begin(), arguments.end());
    // Any other failure than a view (a CPU-only kernel, data read on the
    // host, a bad argument) runs the op as one without a lowering runs; a bad
    // argument then raises eager's own error and changes nothing.
    const Way instead = t_views_refused != refused ? Way::kFunctionalized : Way::kEager;
    Run(instead, op, stack);
    way_.store(instead, std::memory_order_relaxed);
  }

 private:
  enum class Way { kComposite, kFunctionalized, kEager };

  static void Run(Way way, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    if (way == Way::kEager) {
      LazyFuseEagerFallback(op, stack);
    } else {
      RunFunctionalized(op, stack);
    }
  }

  std::atomic<Way> way_{Way::kComposite};
  std::atomic<bool> ran_{false};
};

bool WrapsAScalar(const c10::FunctionSchema& schema) {
  for (const c10::Argument& argument : schema.arguments()) {
    if (argument.type()->kind() == c10::TypeKind::NumberType) {
      return true;
    }
  }
  return false;
}

// Note [aten composites on bare lazy tensors]: an aten op without a lazy
// lowering whose only kernel is a CompositeExplicitAutograd one runs that
// kernel at the Lazy key, below functionalization. Most such kernels
// compose lowered ops and work there. Some take a view of a bare lazy
// tensor, which cannot be recorded (conv_tbc, affine_grid_generator and
// _pack_padded_sequence transpose or narrow their input); such an op runs
// with functionalization re-applied once it has shown that. Others are
// backend kernels in all but name: they call a CPU or CUDA kernel directly
// (kaiser_window), resize a view (fft_fftfreq), read a tensor's address
// (_grouped_mm's alignment check) or its storage; such an op falls back to
// eager, as an op without a lowering does. A pointwise composite with a
// Scalar argument only wraps the scalar (add.Scalar, on a hot path), and
// random ones are ops/random.cpp's, so neither is wrapped. Other pointwise
// ones are: isinf of a complex tensor reads its real and imag views.
bool NeedsAtenComposite(const c10::OperatorHandle& op) {
  const auto name_space = op.operator_name().getNamespace();
  return name_space.has_value() && *name_space == "aten" && op.hasSchema() &&
         IsFunctionalSchema(op.schema()) &&
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::Lazy) &&
         !(op.hasTag(at::Tag::pointwise) && WrapsAScalar(op.schema())) &&
         !op.hasTag(at::Tag::nondeterministic_seeded);
}

// A library's op that writes its arguments (torch.library.custom_op with
// mutates_args): functionalization's fallback refuses any schema with alias
// annotations. Its AutogradLazy kernel functionalizes it on lazy tensors;
// a Functionalize kernel would stop
// torch.compile's auto_functionalize from handling the op on other
// tensors. An op with a composite kernel (device_types=None) runs it on the
// functional tensors, so its writes are recorded as a user's would be; an op
// with device kernels only runs below functionalization (the eager fallback
// copies each written argument back), and each written tensor takes its new
// value. torch registers no derivative for such an op (register_autograd
// refuses one), and its autograd kernel records nothing, as here.
void FunctionalizeWritingOp(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t num_arguments = schema.arguments().size();
  const size_t first = stack->size() - num_arguments;
  std::vector<at::Tensor> wrappers;
  std::vector<size_t> written;
  for (size_t i = 0; i < num_arguments; ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      written.push_back(i);
      AnyTensorIn((*stack)[first + i], [&](const at::Tensor& tensor) {
        wrappers.push_back(tensor);
        return false;
      });
    }
  }
  CheckWriteTargets(schema.name(), wrappers);
  for (const at::Tensor& wrapper : wrappers) {
    if (wrapper.defined()) {
      torch::autograd::impl::bump_version(wrapper);  // as ADInplaceOrView would
    }
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) {
    TORCH_LAZY_COUNTER("LazyFuseFunctionalizedComposite", 1);
    c10::Dispatcher::singleton().callBoxedForDispatchKey(
        op, c10::DispatchKey::CompositeExplicitAutograd, stack);
    return;
  }
  for (size_t i = first; i < stack->size(); ++i) {
    ForEachTensorIn((*stack)[i], FromFunctional);
  }
  std::vector<at::Tensor> inner;
  for (size_t i : written) {
    AnyTensorIn((*stack)[first + i], [&](const at::Tensor& tensor) {
      inner.push_back(tensor);
      return false;
    });
  }
  {
    c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKey::Functionalize);
    op.callBoxed(stack);
  }
  for (size_t k = 0; k < wrappers.size(); ++k) {
    if (wrappers[k].defined() && at::functionalization::impl::isFunctionalTensor(wrappers[k])) {
      TakeWrittenValue(schema.name(), wrappers[k], inner[k]);
    }
  }
  const size_t num_returns = schema.returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    ForEachTensorIn((*stack)[i], LazyToFunctional);
  }
}

bool WritesArguments(const c10::FunctionSchema& schema) {
  for (const c10::Argument& argument : schema.arguments()) {
    if (argument.alias_info() != nullptr && argument.alias_info()->isWrite()) {
      return true;
    }
  }
  return false;
}

bool NeedsWritingOpFunctionalization(const c10::OperatorHandle& op) {
  const auto name_space = op.operator_name().getNamespace();
  if ((name_space.has_value() && *name_space == "aten") || IsDistributedOp(op.operator_name()) ||
      !op.hasSchema() || op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize) ||
      op.hasKernelForDispatchKey(c10::DispatchKey::AutogradLazy) || !WritesArguments(op.schema())) {
    return false;
  }
  for (const c10::Argument& result : op.schema().returns()) {
    if (result.alias_info() != nullptr) {
      return false;  // returns a view or its input: outside what this covers
    }
  }
  return true;
}

class Registry final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle& op) override {
    // The dispatcher's lock is held here, so registering must wait.
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending_.push_back(op.operator_name());
    has_pending_.store(true, std::memory_order_release);
  }
  void onOperatorDeregistered(const c10::OperatorHandle&) override {}

  size_t RegisterPending() {
    if (!has_pending_.load(std::memory_order_acquire)) {
      return 0;
    }
    std::lock_guard<std::mutex> registering(registration_mutex_);
    std::vector<c10::OperatorName> names;
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      names.swap(pending_);
      has_pending_.store(false, std::memory_order_release);
    }
    size_t registered = 0;
    const auto add = [&](const c10::OperatorName& name,
                         c10::DispatchKey key,
                         c10::KernelFunction kernel,
                         const char* what) {
      handles_.push_back(c10::Dispatcher::singleton().registerImpl(
          name, key, std::move(kernel), std::nullopt, nullptr, what));
      ++registered;
    };
    for (const c10::OperatorName& name : names) {
      std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
      // Registering gives the op the kernel it lacked, so a name seen twice
      // is skipped.
      if (op && NeedsFunctionalizedComposite(*op)) {
        add(name,
            c10::DispatchKey::Lazy,
            c10::KernelFunction::makeFromBoxedFunction<&RunFunctionalized>(),
            "lazyfuse: composite kernel run with functionalization");
      }
      if (op && NeedsAtenComposite(*op)) {
        add(name,
            c10::DispatchKey::Lazy,
            c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<AtenComposite>()),
            "lazyfuse: aten composite, functionalized or eager once it fails");
      }
      if (op && NeedsInplaceDecomposition(*op)) {
        add(name,
            c10::DispatchKey::Functionalize,
            c10::KernelFunction::makeFromBoxedFunction<&DecomposeInplaceFunctionalized>(),
            "lazyfuse: in-place CompositeImplicitAutograd decomposed above functionalization");
      }
      if (op && NeedsWritingOpFunctionalization(*op)) {
        add(name,
            c10::DispatchKey::AutogradLazy,
            c10::KernelFunction::makeFromBoxedFunction<&FunctionalizeWritingOp>(),
            "lazyfuse: library op that writes its arguments, functionalized on lazy tensors");
      }
      if (op && NeedsFunctionalizeDecomposition(*op)) {
        add(name,
            c10::DispatchKey::Functionalize,
            c10::KernelFunction::makeFromBoxedFunction<&DecomposeFunctionalized>(),
            "lazyfuse: CompositeImplicitAutograd decomposed above functionalization");
      }
    }
    return registered;
  }

 private:
  std::mutex pending_mutex_;
  std::atomic<bool> has_pending_{false};
  std::vector<c10::OperatorName> pending_;
  std::mutex registration_mutex_;
  std::vector<c10::RegistrationHandleRAII> handles_;
};

// Set once by the backend's init. Leaked on purpose: the dispatcher owns the
// listener, and registrations must outlive every dispatcher call.
std::atomic<Registry*> registry{nullptr};

}  // namespace

void RegisterFunctionalizedComposites() {
  auto owned = std::make_unique<Registry>();
  Registry* expected = nullptr;
  TORCH_CHECK(registry.compare_exchange_strong(expected, owned.get()),
              "lazyfuse: composite registration initialised twice");
  // Replays every op defined so far, then reports each new one.
  static auto* listener = new c10::RegistrationHandleRAII(
      c10::Dispatcher::singleton().addRegistrationListener(std::move(owned)));
  (void)listener;
  RegisterNewFunctionalizedComposites();
  SetViewRefusedBelowFunctionalizationHook([] {
    ++t_views_refused;
    RegisterNewFunctionalizedComposites();
  });
}

size_t RegisterNewFunctionalizedComposites() {
  Registry* current = registry.load(std::memory_order_acquire);
  return current == nullptr ? 0 : current->RegisterPending();
}

}  // namespace lazyfuse
