#pragma once

// Moving a dispatcher call's tensors into and out of functionalization, as
// functionalization's own fallback does for an op it knows nothing about.

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/ivalue.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>
#include <string>
#include <vector>

#include "ltc/prior_values.h"
#include "ops/repeating_views.h"

namespace lazyfuse {

// Note [Lazy tensors are functional]: every lazy tensor a user sees is wrapped
// in a FunctionalTensorWrapper, so in-place ops and views reach lazyfuse as
// functional ops. When functionalization itself calls us (its key is in the
// TLS exclude set) it wraps the result, and we must return a bare tensor.
inline at::Tensor WrapFunctional(const at::Tensor& tensor) {
  if (c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::Functionalize)) {
    return tensor;
  }
  return at::functionalization::impl::to_functional_tensor(tensor);
}

// An op that returns nothing acts only by side effect (a mutation its
// schema does not declare, as inductor::resize_storage_bytes_), which
// functionalized inputs would swallow.
inline bool IsFunctionalSchema(const c10::FunctionSchema& schema) {
  if (schema.returns().empty()) {
    return false;
  }
  for (const c10::Argument& argument : schema.arguments()) {
    if (argument.alias_info() != nullptr) {
      return false;
    }
  }
  for (const c10::Argument& result : schema.returns()) {
    if (result.alias_info() != nullptr) {
      return false;
    }
  }
  return true;
}

// `f_(Tensor(a!) self, ...) -> Tensor(a!)`, writing only self.
inline bool IsInplaceSchema(const c10::FunctionSchema& schema) {
  const auto& arguments = schema.arguments();
  if (arguments.empty() || arguments[0].alias_info() == nullptr ||
      !arguments[0].alias_info()->isWrite() || schema.returns().size() != 1 ||
      schema.returns()[0].alias_info() == nullptr) {
    return false;
  }
  for (size_t i = 1; i < arguments.size(); ++i) {
    if (arguments[i].alias_info() != nullptr) {
      return false;
    }
  }
  return true;
}

// Maps every tensor `value` holds: a tensor, a tensor list or an optional
// tensor list.
template <typename Fn>
void ForEachTensorIn(c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    value = c10::IValue(fn(value.toTensor()));
  } else if (value.isTensorList()) {
    std::vector<at::Tensor> list = value.toTensorList().vec();
    for (at::Tensor& tensor : list) {
      tensor = fn(tensor);
    }
    value = c10::IValue(c10::List<at::Tensor>(list));
  } else if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list = value.toOptionalTensorList();
    c10::List<std::optional<at::Tensor>> mapped;
    for (const std::optional<at::Tensor> tensor : list) {
      mapped.push_back(tensor.has_value() ? std::optional<at::Tensor>(fn(*tensor)) : tensor);
    }
    value = c10::IValue(mapped);
  }
}

// Whether `fn` holds for any tensor `value` holds, as ForEachTensorIn visits
// them.
template <typename Fn>
bool AnyTensorIn(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    return fn(value.toTensor());
  }
  if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList()) {
      if (fn(tensor)) {
        return true;
      }
    }
  } else if (value.isOptionalTensorList()) {
    for (const std::optional<at::Tensor> tensor : value.toOptionalTensorList()) {
      if (tensor.has_value() && fn(*tensor)) {
        return true;
      }
    }
  }
  return false;
}

// Whether `fn` holds for any tensor among an op's arguments, the last
// `num_arguments` entries of `stack`.
template <typename Fn>
bool AnyArgumentTensor(const torch::jit::Stack& stack, size_t num_arguments, Fn&& fn) {
  for (size_t i = stack.size() - num_arguments; i < stack.size(); ++i) {
    if (AnyTensorIn(stack[i], fn)) {
      return true;
    }
  }
  return false;
}

inline bool IsLazyTensor(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_lazy();
}

inline bool HasTangent(const at::Tensor& tensor) {
  return tensor.defined() && tensor._fw_grad(/*level=*/0).defined();
}

inline bool IsLazyFunctional(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_lazy() &&
         at::functionalization::impl::isFunctionalTensor(tensor);
}

// A lazy tensor functionalization regenerates from a base through view ops.
inline bool IsLazyView(const at::Tensor& tensor) {
  return IsLazyFunctional(tensor) && !at::functionalization::impl::isBaseTensor(tensor);
}

// Whether autograd would record the op (backward), or carry a tangent
// through it (forward mode). Either way torch's own kernels must run.
inline bool AutogradRecords(const torch::jit::Stack& stack, size_t num_arguments) {
  const bool grad_mode = at::GradMode::is_enabled();
  return AnyArgumentTensor(stack, num_arguments, [&](const at::Tensor& tensor) {
    return (grad_mode && tensor.defined() && tensor.requires_grad()) || HasTangent(tensor);
  });
}

// The arguments a schema writes (`Tensor(a!)`).
inline std::vector<size_t> WrittenArguments(const c10::FunctionSchema& schema) {
  std::vector<size_t> written;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      written.push_back(i);
    }
  }
  return written;
}

// Ops whose in-place form may legitimately change the tensor's shape.
inline bool ChangesShape(const std::string& name) {
  return name == "aten::resize_" || name == "aten::resize_as_" || name == "aten::set_";
}

inline at::Tensor ToFunctional(const at::Tensor& tensor) {
  if (!tensor.defined() || at::functionalization::impl::isFunctionalTensor(tensor)) {
    return tensor;
  }
  return at::functionalization::impl::to_functional_tensor(tensor);
}

inline at::Tensor FromFunctional(const at::Tensor& tensor) {
  if (!tensor.defined() || !at::functionalization::impl::isFunctionalTensor(tensor)) {
    return tensor;
  }
  at::functionalization::impl::sync(tensor);
  return at::functionalization::impl::from_functional_tensor(tensor);
}

// After a write through a view, functionalization's storage holds the
// written base, but the base tensor keeps its old value until the base itself
// is read (reading another view of it does not). That old value holds the
// pre-write buffer, which the next run may then neither write over nor free:
// a KV cache written a token at a time (`cache[:, :, t] = k`, read only
// through views) was copied whole by its first write and kept twice over.
// Regenerating the base now costs no op, as the storage has the write.
inline void SyncBaseOfWrittenView(const at::Tensor& written) {
  if (!written.defined() || !written.is_view()) {
    return;
  }
  const at::Tensor base(written._base());
  if (base.defined() && base.device().is_lazy() &&
      at::functionalization::impl::isFunctionalTensor(base)) {
    const at::Tensor before = HeldValue(base);
    at::functionalization::impl::sync(base);
    NoteWrittenValue(before, base);
  }
}

// What functionalization does once an op has written a functional tensor:
// it takes `value`, and its base and the views of that base see the write.
// `writer`, the op, is named if the tensor is a view that cannot be written.
inline void TakeWrittenValue(const std::string& writer,
                             const at::Tensor& functional,
                             const at::Tensor& value) {
  CheckWriteTarget(writer, functional);
  const at::Tensor before = HeldValue(functional);
  at::functionalization::impl::replace_(functional, value);
  at::functionalization::impl::commit_update(functional);
  at::functionalization::impl::sync(functional);
  NoteWrittenValue(before, functional);
  SyncBaseOfWrittenView(functional);
}

// From an AutogradLazy kernel: the Autograd alias kernel (VariableType),
// reached through the key every backend without an autograd key of its own
// uses.
inline void PassToAutograd(const c10::OperatorHandle& op,
                           c10::DispatchKeySet keys,
                           torch::jit::Stack* stack) {
  op.redispatchBoxed(
      keys.remove(c10::DispatchKey::AutogradFunctionality).add(c10::DispatchKey::AutogradOther),
      stack);
}

// What functionalization's fallback does with an op it has no kernel for:
// unwraps the arguments, calls the op below functionalization, wraps the
// results. A Functionalize kernel that handles lazy tensors leaves every
// other tensor to this, so torch.compile and torch.export see no change.
inline void CallAsFunctionalizationFallback(const c10::OperatorHandle& op,
                                            torch::jit::Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  for (size_t i = stack->size() - num_arguments; i < stack->size(); ++i) {
    ForEachTensorIn((*stack)[i], FromFunctional);
  }
  {
    c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKey::Functionalize);
    op.callBoxed(stack);
  }
  const size_t num_returns = op.schema().returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    ForEachTensorIn((*stack)[i], ToFunctional);
  }
}

}  // namespace lazyfuse
