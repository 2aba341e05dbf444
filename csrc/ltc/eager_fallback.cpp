#include "ltc/eager_fallback.h"

#include <ATen/Functions.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/config.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ltc/backing_ops_guard.h"
#include "ltc/config.h"

namespace lazyfuse {

void CountEagerRun(const c10::OperatorHandle& op, const char* why) {
  static std::mutex mutex;
  static std::unordered_map<std::string, torch::lazy::Counter*> counters;
  const std::string name = c10::toString(op.operator_name());
  torch::lazy::Counter* counter = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = counters.find(name);
    if (it == counters.end()) {
      // "aten::<name>" is the key users look up; the first use also warns.
      it = counters.emplace(name, new torch::lazy::Counter(name)).first;
      TORCH_WARN("lazyfuse: ",
                 name,
                 " ",
                 why,
                 " on ",
                 BackingDevice(),
                 " (copy in, run, copy out). This splits the graph; see lazyfuse.metrics.");
    }
    counter = it->second;
  }
  counter->AddValue(1);
}

namespace {

bool IsLazy(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().type() == c10::kLazy;
}

at::Tensor ToBacking(const at::Tensor& tensor) {
  return IsLazy(tensor) ? tensor.to(BackingDevice()) : tensor;
}

c10::Device LazyDeviceOf(const std::vector<c10::IValue>& arguments) {
  for (const auto& value : arguments) {
    if (value.isTensor() && IsLazy(value.toTensor())) {
      return value.toTensor().device();
    }
    if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList().vec()) {
        if (IsLazy(t)) {
          return t.device();
        }
      }
    }
  }
  return c10::Device(c10::kLazy, 0);
}

std::atomic<void (*)()> g_view_refused_hook{nullptr};

// A view cannot fall back: writes through the eager copy would be lost.
void RefuseViews(const c10::FunctionSchema& schema) {
  for (const c10::Argument& result : schema.returns()) {
    const auto* alias = result.alias_info();
    if (alias == nullptr || alias->isWrite()) {
      continue;
    }
    std::string hint;
    if (c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Functionalize)) {
      // A composite kernel took a view of a bare lazy tensor (Note
      // [Composite kernels below functionalization]); an op defined since
      // lazy data was last made is registered now.
      if (void (*hook)() = g_view_refused_hook.load()) {
        hook();
      }
      hint =
          ". It was called below functionalization, by a composite kernel on bare lazy tensors "
          "(a custom op's implementation, say). lazyfuse runs a functional custom op's kernel "
          "with functionalization once it has seen the op defined, which it checks when lazy "
          "data is made and at mark_step: an op defined later works from its next call";
    }
    TORCH_CHECK(false,
                "lazyfuse: ",
                schema.name(),
                " returns a view of its input and has no lazy lowering; a view cannot fall back to "
                "eager execution because writes through it would be lost",
                hint);
  }
}

const char* LayoutAdvice() {
  return " are not supported on the lazy device. Keep them on the CPU or a GPU, or make them "
         "dense (.to_dense(), .dequantize(), .to_padded_tensor()) before moving them to the "
         "lazy device";
}

// Results must be plain strided tensors: a lazy tensor is nothing else.
void RefuseNonStridedResult(const c10::FunctionSchema& schema, const at::Tensor& result) {
  if (!result.defined()) {
    return;
  }
  TORCH_CHECK(result.layout() == c10::kStrided,
              "lazyfuse: ",
              schema.name(),
              " returns a tensor of layout ",
              result.layout(),
              "; sparse and other non-strided layouts",
              LayoutAdvice());
  TORCH_CHECK(!result.is_quantized() && !result.is_nested(),
              "lazyfuse: ",
              schema.name(),
              " returns a ",
              result.is_quantized() ? "quantized" : "nested",
              " tensor; quantized and nested tensors",
              LayoutAdvice());
}

// The kernel of the Lazy backend's sparse, sparse compressed, quantized and
// nested-tensor dispatch keys: an op that would make or read such a lazy
// tensor says so, instead of the dispatcher's "could not run".
void RefuseLayout(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack*) {
  const char* what = keys.has(c10::DispatchKey::SparseLazy) ? "Sparse tensors (torch.sparse_coo)"
                     : keys.has(c10::DispatchKey::SparseCsrLazy) ? "Sparse compressed tensors "
                                                                   "(torch.sparse_csr and friends)"
                     : keys.has(c10::DispatchKey::QuantizedLazy) ? "Quantized tensors"
                                                                 : "Nested tensors";
  TORCH_CHECK(false, "lazyfuse: ", op.schema().name(), ": ", what, LayoutAdvice());
}

}  // namespace

void LazyFuseEagerFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  TORCH_CHECK(!IsDistributedOp(op.operator_name()),
              "lazyfuse: ",
              schema.name(),
              " is not supported on lazy tensors. The collectives that run in the graph are "
              "all_reduce, broadcast, all_gather, all_gather_into_tensor, reduce_scatter, "
              "reduce_scatter_tensor and barrier (and their functional forms); for any other, "
              "move the tensor off the lazy device first (t.cpu(), or t.to(\"cuda\")), then "
              "back");
  RefuseViews(schema);
  const size_t num_arguments = schema.arguments().size();
  const auto arguments = torch::jit::last(stack, num_arguments).vec();
  const size_t arguments_begin = stack->size() - num_arguments;
  const c10::Device lazy_device = LazyDeviceOf(arguments);

  // Copy in: each lazy argument becomes a tensor on the backing device.
  std::vector<at::Tensor> backing_inputs(num_arguments);
  std::vector<std::vector<at::Tensor>> backing_lists(num_arguments);
  for (size_t i = 0; i < num_arguments; ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isTensor()) {
      backing_inputs[i] = ToBacking(value.toTensor());
      (*stack)[arguments_begin + i] = c10::IValue(backing_inputs[i]);
    } else if (value.isTensorList()) {
      std::vector<at::Tensor>& list = backing_lists[i];
      list = value.toTensorList().vec();
      for (auto& t : list) {
        t = ToBacking(t);
      }
      (*stack)[arguments_begin + i] = c10::IValue(c10::List<at::Tensor>(list));
    } else if (value.isOptionalTensorList()) {
      auto list = value.toOptionalTensorList().vec();
      for (auto& t : list) {
        if (t.has_value()) {
          t = ToBacking(*t);
        }
      }
      (*stack)[arguments_begin + i] = c10::IValue(c10::List<std::optional<at::Tensor>>(list));
    } else if (value.isDevice() && value.toDevice().type() == c10::kLazy) {
      // Factory ops (randn(..., device="lazy")) are created on the backing device.
      (*stack)[arguments_begin + i] = c10::IValue(BackingDevice());
    }
  }

  {
    const BackingOpsGuard backing_ops;
    op.callBoxed(stack);
  }
  // Only a run counts: an op that raises eager's error for a bad argument
  // ran nothing.
  CountEagerRun(op,
                torch::lazy::getLTCForceFallback() == op.operator_name().name
                    ? "runs eagerly, as torch._lazy.config.set_force_fallback asks,"
                    : "has no lazy lowering and runs eagerly");

  // Write back: arguments the op mutated get their new value, tensor lists
  // (an optimizer's fused step, a foreach op) element by element.
  for (size_t i = 0; i < num_arguments; ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias == nullptr || !alias->isWrite()) {
      continue;
    }
    if (arguments[i].isTensor()) {
      const at::Tensor& original = arguments[i].toTensor();
      if (IsLazy(original)) {
        at::_copy_from_and_resize(backing_inputs[i], original);
      }
    } else if (arguments[i].isTensorList()) {
      const std::vector<at::Tensor> originals = arguments[i].toTensorList().vec();
      for (size_t j = 0; j < originals.size(); ++j) {
        if (IsLazy(originals[j])) {
          at::_copy_from_and_resize(backing_lists[i][j], originals[j]);
        }
      }
    }
  }

  // Copy out: results become lazy tensors; results that alias a mutated
  // argument are that argument itself.
  const auto& returns = schema.returns();
  const size_t returns_begin = stack->size() - returns.size();
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& result = (*stack)[returns_begin + r];
    const auto* alias = returns[r].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      for (size_t i = 0; i < num_arguments; ++i) {
        const auto* arg_alias = schema.arguments()[i].alias_info();
        if (arg_alias != nullptr && *arg_alias == *alias) {
          result = arguments[i];
        }
      }
      continue;
    }
    if (result.isTensor()) {
      const at::Tensor& t = result.toTensor();
      RefuseNonStridedResult(schema, t);
      result = c10::IValue(t.defined() ? t.to(lazy_device) : t);
    } else if (result.isTensorList()) {
      std::vector<at::Tensor> list = result.toTensorList().vec();
      for (auto& t : list) {
        RefuseNonStridedResult(schema, t);
        t = t.to(lazy_device);
      }
      result = c10::IValue(c10::List<at::Tensor>(list));
    }
  }
}

bool IsDistributedOp(const c10::OperatorName& op) {
  static const char* const kNamespaces[] = {"c10d",
                                            "_c10d_functional",
                                            "_c10d_functional_autograd",
                                            "c10d_functional",
                                            "_dtensor",
                                            "symm_mem"};
  const auto name_space = op.getNamespace();
  return name_space.has_value() &&
         std::any_of(std::begin(kNamespaces), std::end(kNamespaces), [&](const char* known) {
           return *name_space == known;
         });
}

bool ForcedEagerFallback(c10::Symbol op) {
  const std::string& forced = torch::lazy::getLTCForceFallback();
  return !forced.empty() && forced == op.toQualString();
}

void SetViewRefusedBelowFunctionalizationHook(void (*hook)()) {
  g_view_refused_hook.store(hook);
}

void RegisterEagerFallback() {
  static auto library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", c10::DispatchKey::Lazy, __FILE__, __LINE__);
  library->fallback(torch::CppFunction::makeFromBoxedFunction<&LazyFuseEagerFallback>());
  for (const c10::DispatchKey key : {c10::DispatchKey::SparseLazy,
                                     c10::DispatchKey::SparseCsrLazy,
                                     c10::DispatchKey::QuantizedLazy,
                                     c10::DispatchKey::NestedTensorLazy}) {
    // Leaked on purpose: registrations must outlive every dispatcher call.
    auto* layouts = new torch::Library(torch::Library::IMPL, "_", key, __FILE__, __LINE__);
    layouts->fallback(torch::CppFunction::makeFromBoxedFunction<&RefuseLayout>());
  }
}

}  // namespace lazyfuse
