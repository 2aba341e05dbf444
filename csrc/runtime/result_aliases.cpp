#include "runtime/result_aliases.h"

#include <ATen/Functions.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "fusion/rules.h"
#include "runtime/view_group.h"

namespace lazyfuse {
namespace {

// Result `view`'s value as an alias of its root buffer's contiguous memory,
// when it reaches the root through transposes, permutes and reshapes that
// keep every element once. `root` is set to that buffer. Contiguous when the
// view holds the root as laid out (a detach).
std::optional<at::Tensor> AliasOfRoot(const Program& program,
                                      const std::vector<int>& made_by,
                                      BufferId view,
                                      BufferId* root) {
  std::vector<const Step*> chain;
  std::vector<ViewRule> rules;
  BufferId current = view;
  while (made_by[current] >= 0) {
    const Step& step = program.steps[made_by[current]];
    const std::optional<ViewRule> rule = ViewRuleFor(step, program);
    if (!rule) {
      break;
    }
    if (step.inputs.empty() ||
        (rule->kind != ViewKind::kReshape && rule->kind != ViewKind::kPermute)) {
      return std::nullopt;
    }
    chain.push_back(&step);
    rules.push_back(*rule);
    current = step.inputs[0];
  }
  if (chain.empty() || made_by[current] < 0) {
    return std::nullopt;  // not a view, or a view of a parameter
  }
  const BufferInfo& base = program.buffers[current];
  const at::Tensor meta =
      at::empty(base.sizes, at::TensorOptions().dtype(base.dtype).device(at::kMeta));
  at::Tensor alias = meta;
  for (size_t k = chain.size(); k-- > 0;) {
    alias = AliasView(alias, rules[k], program.buffers[chain[k]->outputs[0]].sizes);
    if (!alias.is_alias_of(meta)) {
      return std::nullopt;  // a reshape that copies
    }
  }
  if (alias.storage_offset() != 0 || alias.numel() != meta.numel() ||
      !alias.is_non_overlapping_and_dense()) {
    return std::nullopt;
  }
  *root = current;
  return alias;
}

// Where `root`'s elements land in a contiguous tensor laid out as `view`,
// an alias of root's memory that permutes its dims (sizes and strides of the
// view in root's memory): per root dim, the stride there. Unset when the
// view also reshapes.
std::optional<std::vector<int64_t>> RootStridesInView(const std::vector<int64_t>& root_sizes,
                                                      const at::Tensor& view) {
  const int64_t dims = view.dim();
  if (static_cast<int64_t>(root_sizes.size()) != dims) {
    return std::nullopt;
  }
  std::vector<int64_t> order(dims);
  for (int64_t d = 0; d < dims; ++d) {
    order[d] = d;
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return view.stride(a) > view.stride(b);
  });
  std::vector<int64_t> view_contiguous(dims, 1);
  for (int64_t d = dims - 1; d > 0; --d) {
    view_contiguous[d - 1] = view_contiguous[d] * view.size(d);
  }
  std::vector<int64_t> strides(dims);
  int64_t root_stride = 1;
  for (int64_t k = dims; k-- > 0;) {
    const int64_t d = order[k];
    if (view.size(d) != root_sizes[k] || (root_sizes[k] > 1 && view.stride(d) != root_stride)) {
      return std::nullopt;
    }
    strides[k] = view_contiguous[d];
    root_stride *= root_sizes[k];
  }
  return strides;
}

}  // namespace

void DeriveBaseResults(Program& program) {
  const std::vector<int> made_by = MakingSteps(program);
  // Each result as an alias of its root, found once: both passes read it.
  struct RootAlias {
    std::optional<at::Tensor> alias;
    BufferId root = -1;
  };
  std::vector<RootAlias> aliases(program.results.size());
  for (size_t v = 0; v < program.results.size(); ++v) {
    aliases[v].alias = AliasOfRoot(program, made_by, program.results[v], &aliases[v].root);
  }
  const auto permutation = [&](size_t v) -> const at::Tensor* {
    const std::optional<at::Tensor>& alias = aliases[v].alias;
    return alias && !alias->is_contiguous() ? &*alias : nullptr;
  };
  std::vector<bool> derived(program.buffers.size(), false);
  std::vector<bool> source(program.buffers.size(), false);
  for (size_t v = 0; v < program.results.size(); ++v) {
    const at::Tensor* alias = permutation(v);
    const BufferId root = aliases[v].root;
    if (derived[program.results[v]] || alias == nullptr || derived[root] || source[root]) {
      continue;
    }
    for (size_t k = 0; k < program.results.size(); ++k) {
      if (program.results[k] == root) {
        program.derived_results.push_back({k, v, alias->sizes().vec(), alias->strides().vec()});
        derived[root] = true;
        source[program.results[v]] = true;
      }
    }
  }
  // A view the graph returns beside its base's detached alias, where the
  // base itself is not returned: the view is made from the alias. A matmul
  // computed transposed (fusion/transposed_matmuls.h) leaves p.grad's base so.
  // By root, the first result holding it as laid out (a detach, or a
  // transpose of a transpose).
  std::unordered_map<BufferId, size_t> same_as_root;
  for (size_t k = 0; k < program.results.size(); ++k) {
    const std::optional<at::Tensor>& alias = aliases[k].alias;
    if (alias && alias->is_contiguous() &&
        alias->sizes() == c10::IntArrayRef(program.buffers[aliases[k].root].sizes)) {
      same_as_root.emplace(aliases[k].root, k);
    }
  }
  for (size_t v = 0; v < program.results.size(); ++v) {
    const BufferId view = program.results[v];
    const at::Tensor* alias = permutation(v);
    const BufferId root = aliases[v].root;
    if (derived[view] || source[view] || alias == nullptr || derived[root] || source[root]) {
      continue;
    }
    const auto same = same_as_root.find(root);
    if (same == same_as_root.end() || derived[program.results[same->second]]) {
      continue;
    }
    const std::optional<std::vector<int64_t>> strides =
        RootStridesInView(program.buffers[root].sizes, *alias);
    if (!strides) {
      continue;
    }
    for (size_t w = 0; w < program.results.size(); ++w) {
      if (program.results[w] == view) {
        program.derived_results.push_back({w, same->second, program.buffers[root].sizes, *strides});
      }
    }
    derived[view] = true;
    source[program.results[same->second]] = true;
  }
  if (!program.derived_results.empty()) {
    ComputeLifetimes(program);
  }
}

at::Tensor MakeDerivedResult(const DerivedResult& entry,
                             const std::vector<int64_t>& sizes,
                             const at::Tensor& from) {
  at::Tensor value = at::empty(sizes, from.options());
  value.as_strided(entry.from_sizes, entry.from_strides).copy_(from);
  return value;
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
