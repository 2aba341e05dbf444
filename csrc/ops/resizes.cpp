#include "ops/resizes.h"

#include <ATen/ATen.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "generated/LazyNativeFunctions.h"
#include "ltc/prior_values.h"
#include "ops/device_checks.h"
#include "ops/functional_tensors.h"
#include "ops/kernel_override.h"

namespace lazyfuse {
namespace {

// resize_(self, size, *, memory_format=None) and
// resize_as_(self, the_template, *, memory_format=None).
constexpr size_t kNumArguments = 3;

class LazyResize final : public c10::OperatorKernel {
 public:
  LazyResize(c10::SafeKernelFunction functionalization, bool to_template)
      : functionalization_(std::move(functionalization)), to_template_(to_template) {}

  void operator()(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const size_t first = stack->size() - kNumArguments;
    const at::Tensor self = (*stack)[first].toTensor();
    if (!IsLazyFunctional(self)) {
      functionalization_.callBoxed(op, keys, stack);
      return;
    }
    const std::vector<int64_t> size = to_template_ ? (*stack)[first + 1].toTensor().sizes().vec()
                                                   : (*stack)[first + 1].toIntVector();
    if (self.sizes() != at::IntArrayRef(size)) {
      if (!ShrinksAView(op.schema().name(), self, size)) {
        ReplaceValue(self, size);
      } else {
        ResizeView(op, keys, stack, self, size);
        return;
      }
    }
    torch::jit::drop(*stack, kNumArguments);
    torch::jit::push(*stack, self);
  }

 private:
  // Whether `self` is a view that the resize keeps within its elements;
  // raises for a resize lazyfuse cannot give eager's result.
  static bool ShrinksAView(const std::string& name,
                           const at::Tensor& self,
                           const std::vector<int64_t>& size) {
    auto* wrapper = at::functionalization::impl::unsafeGetFunctionalWrapper(self);
    const bool is_view = self.is_view() || !at::functionalization::impl::isBaseTensor(self);
    TORCH_CHECK(is_view || wrapper->storage().use_count() == 1,
                name,
                ": lazyfuse cannot resize a tensor while views of it are alive (from ",
                self.sizes(),
                " to ",
                at::IntArrayRef(size),
                "); resize a clone() instead");
    TORCH_CHECK(!is_view || c10::multiply_integers(size) <= self.numel(),
                name,
                ": lazyfuse cannot grow a view (from ",
                self.sizes(),
                " to ",
                at::IntArrayRef(size),
                "): its elements lie in its base's storage, which a lazy tensor does not lay "
                "out as eager does; resize a clone() instead");
    return is_view;
  }

  // An as_strided view of its old elements, as torch's kernel makes it,
  // which refuses some views of views whose elements a lazy base holds.
  void ResizeView(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack,
                  const at::Tensor& self,
                  const std::vector<int64_t>& size) const {
    try {
      if (to_template_) {
        at::_ops::resize_::redispatch(keys, self, c10::fromIntArrayRefSlow(size), std::nullopt);
        torch::jit::drop(*stack, kNumArguments);
        torch::jit::push(*stack, self);
      } else {
        functionalization_.callBoxed(op, keys, stack);
      }
    } catch (const c10::Error& error) {
      if (error.msg().find("Attempted to resize a view tensor") == std::string::npos) {
        throw;
      }
      TORCH_CHECK(false,
                  op.schema().name(),
                  ": lazyfuse cannot resize this view (from ",
                  self.sizes(),
                  " to ",
                  at::IntArrayRef(size),
                  "); resize a clone() instead");
    }
  }

  static void ReplaceValue(const at::Tensor& self, const std::vector<int64_t>& size) {
    at::functionalization::impl::sync(self);
    const at::Tensor before = HeldValue(self);
    at::Tensor resized;
    {
      c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKey::Functionalize);
      resized = at::resize(at::functionalization::impl::from_functional_tensor(self), size);
    }
    at::functionalization::impl::unsafeGetFunctionalWrapper(self)->maybe_replace_storage(resized);
    NoteWrittenValue(before, self);
  }

  c10::SafeKernelFunction functionalization_;
  bool to_template_;
};

}  // namespace

// Functionalization resizes a tensor's value with this (ReplaceValue above): the elements kept are
// the first ones in order, as the storage eager resizes keeps them; new ones, uninitialised in
// eager, are 0.
at::Tensor LazyNativeFunctions::resize(const at::Tensor& self,
                                       at::IntArrayRef size,
                                       std::optional<at::MemoryFormat> /*memory_format*/) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::resize", "self", self);
  for (const int64_t extent : size) {
    TORCH_CHECK(extent >= 0, "aten::resize: negative size ", size);
  }
  const int64_t numel = c10::multiply_integers(size);
  at::Tensor flat = at::view_copy(self, {self.numel()});
  if (numel < self.numel()) {
    flat = at::slice_copy(flat, 0, 0, numel);
  } else if (numel > self.numel()) {
    flat = at::cat({flat, at::fill(at::empty({numel - self.numel()}, self.options()), 0)});
  }
  return at::view_copy(flat, size);
}

void RegisterLazyResizes() {
  for (const char* name : {"aten::resize_", "aten::resize_as_"}) {
    const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp({name, ""});
    TORCH_INTERNAL_ASSERT(op.has_value());
    OverrideKernel(op->operator_name(),
                   c10::DispatchKey::Functionalize,
                   std::make_unique<LazyResize>(
                       op->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize),
                       std::string(name) == "aten::resize_as_"),
                   "lazyfuse: resize_ of a lazy tensor no view shares replaces its value");
  }
}

}  // namespace lazyfuse
