#include "ops/view_layout.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_unsafe_view.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/view_ops.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "generated/LazyIr.h"
#include "ops/functional_tensors.h"
#include "ops/meta_tensors.h"
#include "ops/view_meta_names.h"

namespace lazyfuse {
namespace {

// `view`, an output of `node`, from `input`: eager's view op on a meta
// tensor. nullopt for a node that is no view lazyfuse knows.
std::optional<at::Tensor> ApplyView(const torch::lazy::Node* node, const at::Tensor& input) {
  if (auto* n = dynamic_cast<const TransposeCopyInt*>(node)) {
    return input.transpose(n->dim0, n->dim1);
  }
  if (auto* n = dynamic_cast<const PermuteCopy*>(node)) {
    return input.permute(n->dims);
  }
  if (dynamic_cast<const TCopy*>(node) != nullptr) {
    return input.t();
  }
  if (auto* n = dynamic_cast<const ViewCopy*>(node)) {
    return input.view(n->size);
  }
  if (auto* n = dynamic_cast<const ExpandCopy*>(node)) {
    return input.expand(n->size, n->implicit);
  }
  if (auto* n = dynamic_cast<const SliceCopyTensor*>(node)) {
    return input.slice(n->dim, n->start, n->end, n->step);
  }
  if (auto* n = dynamic_cast<const NarrowCopy*>(node)) {
    return input.narrow(n->dim, n->start, n->length);
  }
  if (auto* n = dynamic_cast<const SelectCopyInt*>(node)) {
    return input.select(n->dim, n->index);
  }
  if (auto* n = dynamic_cast<const UnsqueezeCopy*>(node)) {
    return input.unsqueeze(n->dim);
  }
  if (dynamic_cast<const SqueezeCopy*>(node) != nullptr) {
    return input.squeeze();
  }
  if (auto* n = dynamic_cast<const SqueezeCopyDim*>(node)) {
    return input.squeeze(n->dim);
  }
  if (auto* n = dynamic_cast<const SqueezeCopyDims*>(node)) {
    return input.squeeze(n->dim);
  }
  if (auto* n = dynamic_cast<const DiagonalCopy*>(node)) {
    return input.diagonal(n->offset, n->dim1, n->dim2);
  }
  if (auto* n = dynamic_cast<const UnfoldCopy*>(node)) {
    return input.unfold(n->dimension, n->size, n->step);
  }
  if (auto* n = dynamic_cast<const AsStridedCopy*>(node)) {
    return input.as_strided(n->size, n->stride, n->storage_offset);
  }
  if (dynamic_cast<const AliasCopy*>(node) != nullptr ||
      dynamic_cast<const DetachCopy*>(node) != nullptr) {
    return input.alias();
  }
  return std::nullopt;
}

// The view nodes from `base` (exclusive) up to `value`, outermost last;
// nullopt when the chain meets another node first.
std::optional<std::vector<const torch::lazy::Node*>> ViewChain(const torch::lazy::Value& value,
                                                               const torch::lazy::Node* base) {
  std::vector<const torch::lazy::Node*> chain;
  const torch::lazy::Node* node = value.node.get();
  size_t index = value.index;
  while (node != base) {
    if (node == nullptr || node->operands().empty() || index != 0) {
      return std::nullopt;
    }
    chain.push_back(node);
    index = node->operand(0).index;
    node = node->operand(0).node;
  }
  return std::vector<const torch::lazy::Node*>(chain.rbegin(), chain.rend());
}

torch::lazy::Value IrValueOf(const at::Tensor& bare) {
  return torch::lazy::TryGetLtcTensor(bare)->GetIrValue();
}

// The view's ViewMetas applied to an IR-only stand-in for its base, which
// records the view_copy nodes a materialized view no longer holds.
std::optional<std::vector<const torch::lazy::Node*>> ReplayedChain(
    const at::FunctionalTensorWrapper& wrapper,
    const at::Tensor& base,
    std::vector<at::Tensor>* keep_alive) {
  const torch::lazy::LazyTensorPtr lazy_base = torch::lazy::TryGetLtcTensor(base);
  const torch::lazy::Shape shape(base.scalar_type(), base.sizes().vec());
  at::Tensor stand_in = torch::lazy::CreateAtenFromLtcTensor(torch::lazy::LazyTensor::Create(
      torch::lazy::getBackend()->CreateDataPlaceholder(lazy_base->GetDevice(), shape)));
  keep_alive->push_back(stand_in);
  const torch::lazy::Node* root = IrValueOf(stand_in).node.get();
  at::Tensor view = stand_in;
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  c10::impl::ExcludeDispatchKeyGuard below(c10::DispatchKey::Functionalize);
  for (const auto& meta : wrapper.view_metas()) {
    view = meta->forward(view);
    keep_alive->push_back(view);
  }
  return ViewChain(IrValueOf(view), root);
}

}  // namespace

std::optional<at::Tensor> EagerLayout(const at::Tensor& functional) {
  TORCH_LAZY_COUNTER("LazyFuseEagerLayout", 1);
  if (!IsLazyFunctional(functional)) {
    return std::nullopt;
  }
  const HiddenFromDispatchModes hidden;
  at::functionalization::impl::sync(functional);
  auto* wrapper = at::functionalization::impl::unsafeGetFunctionalWrapper(functional);
  auto* storage = static_cast<at::functionalization::FunctionalStorageImpl*>(
      wrapper->unsafe_storage().unsafeGetStorageImpl());
  const at::Tensor& base = storage->base();
  if (base.unsafeGetTensorImpl()->has_symbolic_sizes_strides() ||
      torch::lazy::TryGetLtcTensor(base) == nullptr) {
    return std::nullopt;
  }
  c10::InferenceMode meta_views;
  at::Tensor layout = at::empty(base.sizes(), base.options().device(at::kMeta));
  if (wrapper->isBaseTensor()) {
    return layout;
  }
  std::vector<at::Tensor> keep_alive;
  std::optional<std::vector<const torch::lazy::Node*>> chain;
  try {
    chain = ViewChain(IrValueOf(wrapper->value()), IrValueOf(base).node.get());
    if (!chain) {
      chain = ReplayedChain(*wrapper, base, &keep_alive);
    }
    if (!chain) {
      return std::nullopt;
    }
    for (const torch::lazy::Node* node : *chain) {
      std::optional<at::Tensor> next = ApplyView(node, layout);
      if (!next) {
        return std::nullopt;
      }
      layout = *next;
    }
  } catch (const c10::Error&) {
    return std::nullopt;  // a view eager could not have made (one under inference mode)
  }
  if (layout.sizes() != functional.sizes()) {
    return std::nullopt;
  }
  return layout;
}

namespace {

constexpr const char* kContiguityKeeping[] = {
    "view_ViewMeta", "squeeze", "alias_ViewMeta", "detach", "lift_fresh"};

// Whether a view op keeps a contiguous input contiguous. "view_ViewMeta"
// also names _unsafe_view's, never view_as_real's or view(dtype)'s.
bool KeepsContiguous(const at::functionalization::ViewMeta& meta) {
  return std::any_of(std::begin(kContiguityKeeping),
                     std::end(kContiguityKeeping),
                     [&](const char* op) { return ViewMetaNames(meta, op); });
}

// A lazy view made only by such views, as most views of views are
// (`x.view(b, s, h, d).view(b, s, -1)`), is viewable to any shape of its
// size, without replaying its chain.
bool StaysContiguous(const at::Tensor& view) {
  const auto& metas = at::functionalization::impl::unsafeGetFunctionalWrapper(view)->view_metas();
  return std::all_of(
      metas.begin(), metas.end(), [](const auto& meta) { return KeepsContiguous(*meta); });
}

// view(Tensor(a) self, SymInt[] size) -> Tensor(a). reshape and flatten
// view lazy tensors (ATen's reshape takes `view` for lazy ones, whose strides
// it cannot see), so where eager's strides allow no view this returns the
// copy eager's reshape makes; a user's own view gets it too, where eager
// refuses.
at::Tensor View(c10::DispatchKeySet keys, const at::Tensor& self, c10::SymIntArrayRef size_ref) {
  // view_as passes its argument's sizes, which syncing that tensor below may
  // reallocate: the requested shape is copied first.
  const c10::SmallVector<c10::SymInt, 6> owned(size_ref.begin(), size_ref.end());
  const c10::SymIntArrayRef size(owned);
  if (IsLazyView(self) && !self.unsafeGetTensorImpl()->has_symbolic_sizes_strides() &&
      !StaysContiguous(self)) {
    const at::DimVector shape = at::infer_size_dv(C10_AS_INTARRAYREF_SLOW(size), self.numel());
    const std::optional<at::Tensor> layout = EagerLayout(self);
    if (layout && !at::detail::computeStride(layout->sizes(), layout->strides(), shape)) {
      return at::_unsafe_view(self.clone(at::MemoryFormat::Contiguous), shape);
    }
  }
  return at::_ops::view::redispatch(
      keys.remove(c10::DispatchKey::AutogradFunctionality).add(c10::DispatchKey::AutogradOther),
      self,
      size);
}

}  // namespace

at::Tensor EagerContiguous(const at::Tensor& self, at::MemoryFormat memory_format) {
  // Eager's messages: its copy in that layout needs the rank.
  TORCH_CHECK(memory_format != at::MemoryFormat::ChannelsLast || self.dim() == 4,
              "required rank 4 tensor to use channels_last format");
  TORCH_CHECK(memory_format != at::MemoryFormat::ChannelsLast3d || self.dim() == 5,
              "required rank 5 tensor to use channels_last_3d format");
  // A base, or a view only of views that keep it contiguous, is contiguous
  // in eager too: the common call, answered without replaying a view chain.
  const bool plainly_contiguous =
      memory_format == at::MemoryFormat::Contiguous && (!IsLazyView(self) || StaysContiguous(self));
  if (!plainly_contiguous && memory_format != at::MemoryFormat::Preserve &&
      IsLazyFunctional(self) && !self.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    const std::optional<at::Tensor> layout = EagerLayout(self);
    if (layout && !layout->is_contiguous(memory_format)) {
      return self.clone(memory_format);
    }
  }
  return self.contiguous(memory_format);
}

void RegisterEagerLayoutViews() {
  static auto* library = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutogradLazy, __FILE__, __LINE__);
  library->impl("view", TORCH_FN(View));
}

}  // namespace lazyfuse
