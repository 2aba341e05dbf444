#include "ltc/result_aliases.h"

#include <ATen/Functions.h>

namespace lazyfuse {
namespace {

// Whether `view` holds each element of `base`, the contiguous tensor whose
// memory it shares, exactly once.
bool PermutesAllOf(const at::Tensor& view, const at::Tensor& base) {
  return base.defined() && base.has_storage() && base.is_contiguous() &&
         base.storage().is_alias_of(view.storage()) &&
         base.storage_offset() == view.storage_offset() &&
         base.scalar_type() == view.scalar_type() && base.numel() == view.numel() &&
         view.is_non_overlapping_and_dense();
}

}  // namespace

std::vector<std::function<at::Tensor()>> DeriveBasesFromViews(std::vector<at::Tensor>& outputs) {
  std::vector<std::function<at::Tensor()>> derived(outputs.size());
  for (size_t v = 0; v < outputs.size(); ++v) {
    const at::Tensor view = outputs[v];
    if (!view.defined() || !view.has_storage() || view.is_contiguous() || view.numel() == 0) {
      continue;
    }
    for (size_t b = 0; b < outputs.size(); ++b) {
      if (b == v || !PermutesAllOf(view, outputs[b])) {
        continue;
      }
      at::Tensor copy = view.contiguous();
      derived[b] = [copy,
                    base_sizes = outputs[b].sizes().vec(),
                    view_sizes = view.sizes().vec(),
                    view_strides = view.strides().vec()] {
        at::Tensor base = at::empty(base_sizes, copy.options());
        base.as_strided(view_sizes, view_strides).copy_(copy);
        return base;
      };
      outputs[v] = std::move(copy);
      outputs[b].reset();
      break;
    }
  }
  return derived;
}

void ShareIdenticalAliases(std::vector<at::Tensor>& outputs) {
  for (size_t v = 0; v < outputs.size(); ++v) {
    const at::Tensor& view = outputs[v];
    if (!view.defined() || !view.has_storage()) {
      continue;
    }
    for (size_t b = 0; b < v; ++b) {
      const at::Tensor& base = outputs[b];
      if (base.defined() && base.has_storage() &&
          base.unsafeGetTensorImpl() != view.unsafeGetTensorImpl() &&
          base.storage().is_alias_of(view.storage()) &&
          base.storage_offset() == view.storage_offset() && base.sizes() == view.sizes() &&
          base.strides() == view.strides() && base.scalar_type() == view.scalar_type()) {
        outputs[v] = outputs[b];
        break;
      }
    }
  }
}

}  // namespace lazyfuse
