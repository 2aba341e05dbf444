#include "ops/partial_writes.h"

#include <ATen/Functions.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <tuple>

namespace lazyfuse {
namespace {

// Whether every entry of `index` lies in [-size, size) (wrapping) or
// [0, size): one pass over the index, on the host.
bool InBounds(const at::Tensor& index, int64_t size, bool negative_wraps) {
  if (index.numel() == 0) {
    return true;
  }
  if (!at::isIntegralType(index.scalar_type(), /*includeBool=*/false)) {
    return false;
  }
  const auto [low, high] = at::aminmax(index);
  const int64_t lowest = low.item<int64_t>();
  const int64_t highest = high.item<int64_t>();
  return lowest >= (negative_wraps ? -size : 0) && highest < size;
}

bool IndicesCheckedFirst(const at::Tensor& base) {
  return base.device().is_cpu();
}

at::Tensor WritingInto(KernelArgs& args, const at::Tensor& base) {
  args.overwrote(0);
  TORCH_LAZY_COUNTER("LazyFuseInPlaceScatters", 1);
  return base;
}

}  // namespace

at::Tensor BaseToWriteAlong(KernelArgs& args,
                            int64_t dim,
                            const at::Tensor& index,
                            bool negative_wraps) {
  at::Tensor base = args.InputToWriteInto(0);
  if (!base.defined() || base.dim() == 0 || index.device() != base.device()) {
    return at::Tensor();
  }
  if (IndicesCheckedFirst(base)) {
    const int64_t size = base.size(c10::maybe_wrap_dim(dim, base.dim()));
    if (!InBounds(index, size, negative_wraps)) {
      return at::Tensor();
    }
  }
  return WritingInto(args, base);
}

at::Tensor BaseToIndexPut(KernelArgs& args,
                          const c10::List<std::optional<at::Tensor>>& indices,
                          const at::Tensor& values) {
  at::Tensor base = args.InputToWriteInto(0);
  if (!base.defined() || values.scalar_type() != base.scalar_type() ||
      values.device() != base.device() || static_cast<int64_t>(indices.size()) > base.dim()) {
    return at::Tensor();
  }
  for (size_t d = 0; d < indices.size(); ++d) {
    const std::optional<at::Tensor> index = indices.get(d);
    if (!index.has_value() || !index->defined()) {
      continue;
    }
    if (index->device() != base.device() ||
        (IndicesCheckedFirst(base) &&
         !InBounds(*index, base.size(static_cast<int64_t>(d)), /*negative_wraps=*/true))) {
      return at::Tensor();
    }
  }
  return WritingInto(args, base);
}

}  // namespace lazyfuse
