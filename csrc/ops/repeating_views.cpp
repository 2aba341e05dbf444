#include "ops/repeating_views.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/functional_tensors.h"
#include "ops/kernel_override.h"
#include "ops/view_meta_names.h"

namespace lazyfuse {
namespace {

using at::functionalization::ViewMeta;

bool IsUnfold(const ViewMeta& meta) {
  return ViewMetaNames(meta, "unfold");
}

// Every other view op shows each element of its input at one place at most.
bool MayRepeat(const ViewMeta& meta) {
  return meta.is_as_strided || IsUnfold(meta) || ViewMetaNames(meta, "expand") ||
         ViewMetaNames(meta, "as_strided");
}

// Whether some element of the base appears twice among `indices`.
bool Repeats(const at::Tensor& indices, int64_t base_numel) {
  const at::Tensor contiguous = indices.contiguous();
  const int64_t* index = contiguous.const_data_ptr<int64_t>();
  std::vector<bool> seen(static_cast<size_t>(base_numel), false);
  for (int64_t i = 0; i < contiguous.numel(); ++i) {
    if (index[i] < 0 || index[i] >= base_numel) {
      continue;
    }
    if (seen[index[i]]) {
      return true;
    }
    seen[index[i]] = true;
  }
  return false;
}

// Whether stepping along some dimension of a strided view of `indices`
// stays on the same element.
bool HasZeroStride(const at::Tensor& indices) {
  for (int64_t d = 0; d < indices.dim(); ++d) {
    if (indices.size(d) > 1 && at::equal(indices.narrow(d, 0, 1), indices.narrow(d, 1, 1))) {
      return true;
    }
  }
  return false;
}

// The chain replayed on the base's element indices, on the CPU.
WriteThroughView ReplayOnIndices(const std::vector<std::shared_ptr<ViewMeta>>& metas,
                                 c10::IntArrayRef sizes,
                                 int64_t numel) {
  c10::InferenceMode plain_cpu_tensors;
  at::Tensor indices = at::arange(numel, at::TensorOptions().dtype(at::kLong)).view(sizes);
  try {
    for (const auto& meta : metas) {
      at::Tensor next = meta->forward(indices);
      if (next.scalar_type() != at::kLong) {
        // A view that reinterprets the dtype (view_as_real, view(dtype)) has
        // no meaning on indices; such a chain goes unchecked.
        return WriteThroughView::kWritable;
      }
      // unfold's inverse sums its windows into a zeroed input: right only
      // when the windows cover the input once. as_strided's refuses overlap
      // when the graph runs; refused here, with the op's name, instead.
      if (IsUnfold(*meta) &&
          (next.numel() != indices.numel() || Repeats(indices, numel) || Repeats(next, numel))) {
        return WriteThroughView::kThroughUnfold;
      }
      if (meta->is_as_strided && Repeats(next, numel)) {
        // as_strided's inverse copies the view into its base, in eager's
        // order: a write of every element (copy_, fill_) lands as eager's
        // does, if the view is the chain's last, nothing before it repeats,
        // and no stride is zero (there eager refuses the copy).
        const bool last = meta == metas.back();
        const bool nothing_before = std::none_of(metas.begin(), metas.end() - 1, [](const auto& m) {
          return ViewMetaNames(*m, "expand") || IsUnfold(*m);
        });
        return last && nothing_before && !HasZeroStride(next) ? WriteThroughView::kOverwritable
                                                              : WriteThroughView::kRepeats;
      }
      indices = std::move(next);
    }
  } catch (const c10::Error&) {
    return WriteThroughView::kWritable;  // as above, for views that refuse indices
  }
  return Repeats(indices, numel) ? WriteThroughView::kRepeats : WriteThroughView::kWritable;
}

// torch's Functionalize kernel of a writing op, behind the check.
class CheckedWrite final : public c10::OperatorKernel {
 public:
  CheckedWrite(c10::SafeKernelFunction functionalization, std::vector<size_t> written)
      : functionalization_(std::move(functionalization)), written_(std::move(written)) {}

  void operator()(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const size_t first = stack->size() - op.schema().arguments().size();
    for (size_t i : written_) {
      AnyTensorIn((*stack)[first + i], [&](const at::Tensor& tensor) {
        CheckWriteTarget(op.schema().name(), tensor);
        return false;
      });
    }
    functionalization_.callBoxed(op, keys, stack);
  }

 private:
  c10::SafeKernelFunction functionalization_;
  std::vector<size_t> written_;
};

}  // namespace

WriteThroughView CheckViewChain(const at::Tensor& functional_view) {
  auto* wrapper = at::functionalization::impl::unsafeGetFunctionalWrapper(functional_view);
  const std::vector<std::shared_ptr<ViewMeta>>& metas = wrapper->view_metas();
  if (std::none_of(metas.begin(), metas.end(), [](const auto& meta) { return MayRepeat(*meta); })) {
    return WriteThroughView::kWritable;
  }
  auto* storage = static_cast<at::functionalization::FunctionalStorageImpl*>(
      wrapper->unsafe_storage().unsafeGetStorageImpl());
  const at::Tensor& base = storage->base();
  if (base.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return WriteThroughView::kWritable;
  }
  // DDP writes each gradient into an as_strided view of its bucket every
  // step: a chain's verdict is kept while its last ViewMeta lives.
  struct Kept {
    std::weak_ptr<ViewMeta> last;
    int64_t base_numel;
    WriteThroughView verdict;
  };
  thread_local std::unordered_map<const ViewMeta*, Kept> kept;
  const int64_t numel = base.numel();
  auto found = kept.find(metas.back().get());
  if (found != kept.end() && !found->second.last.expired() && found->second.base_numel == numel) {
    return found->second.verdict;  // alive, so the same ViewMeta
  }
  if (kept.size() >= 4096) {
    for (auto it = kept.begin(); it != kept.end();) {
      it = it->second.last.expired() ? kept.erase(it) : std::next(it);
    }
  }
  const WriteThroughView verdict = ReplayOnIndices(metas, base.sizes(), numel);
  kept[metas.back().get()] = Kept{metas.back(), numel, verdict};
  return verdict;
}

void CheckWriteTarget(const std::string& op_name, const at::Tensor& written) {
  if (!IsLazyFunctional(written)) {
    return;
  }
  const auto& metas =
      at::functionalization::impl::unsafeGetFunctionalWrapper(written)->view_metas();
  if (metas.empty()) {
    return;  // a base
  }
  // torch's functionalization refuses these with a message about torch.compile.
  TORCH_CHECK(
      std::none_of(metas.begin() + 1, metas.end(), [](const auto& m) { return m->is_as_strided; }),
      op_name,
      ": unsupported operation: the written-to tensor is an as_strided() view of another "
      "view, which PyTorch's functionalization cannot write back through. Take "
      "as_strided() of the base tensor, or clone() the view before performing the "
      "operation.");
  WriteThroughView verdict = CheckViewChain(written);
  if (verdict == WriteThroughView::kOverwritable) {
    const bool overwrites =
        op_name == "aten::copy_" || op_name == "aten::fill_" || op_name == "aten::zero_";
    verdict = overwrites ? WriteThroughView::kWritable : WriteThroughView::kRepeats;
  }
  TORCH_CHECK(verdict != WriteThroughView::kRepeats,
              op_name,
              ": unsupported operation: more than one element of the written-to tensor refers to "
              "a single memory location. Please clone() the tensor before performing the "
              "operation. (lazyfuse refuses every write through a view that repeats an element, "
              "such as an expanded one, also where eager allows it.)");
  TORCH_CHECK(verdict != WriteThroughView::kThroughUnfold,
              op_name,
              ": unsupported operation: the written-to tensor is a view of an unfold() whose "
              "windows overlap or leave elements out, which lazy tensors cannot write back "
              "through. Please clone() the tensor before performing the operation.");
}

void CheckWriteTargets(const std::string& op_name, const std::vector<at::Tensor>& written) {
  for (const at::Tensor& tensor : written) {
    CheckWriteTarget(op_name, tensor);
  }
}

void RegisterRepeatingViewChecks() {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasSchema() || name.name.rfind("aten::", 0) != 0 ||
        name.name == "aten::copy_" || ChangesShape(name.name) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) {
      continue;
    }
    std::vector<size_t> written = WrittenArguments(op->schema());
    if (written.empty()) {
      continue;
    }
    OverrideKernel(name,
                   c10::DispatchKey::Functionalize,
                   std::make_unique<CheckedWrite>(
                       op->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize),
                       std::move(written)),
                   "lazyfuse: no write through a view that repeats an element");
  }
}

}  // namespace lazyfuse
