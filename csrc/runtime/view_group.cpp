#include "runtime/view_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>

namespace lazyfuse {

at::Tensor AliasView(const at::Tensor& input,
                     const ViewRule& rule,
                     const std::vector<int64_t>& out_sizes) {
  switch (rule.kind) {
    case ViewKind::kReshape:
      // A reshape of strides no view can express (a transposed input
      // flattened) copies, as eager's reshape does.
      return input.reshape(out_sizes);
    case ViewKind::kBroadcast:
      return input.expand(out_sizes);
    case ViewKind::kPermute:
      return input.permute(rule.permutation);
    case ViewKind::kSlice: {
      const int64_t length = out_sizes.at(rule.dim);
      const int64_t end = length == 0 ? rule.start : rule.start + (length - 1) * rule.step + 1;
      return input.slice(rule.dim, rule.start, end, rule.step);
    }
    case ViewKind::kSelect:
      return input.select(rule.dim, rule.index);
  }
  TORCH_CHECK(false, "lazyfuse: unknown view kind");
}

Step ViewGroupStep(const Program& program, const FusionGroup& group) {
  TORCH_CHECK(group.kind == GroupKind::kView, "lazyfuse: not a view group");
  // Local slots: the group's inputs, then each view's output in step order.
  struct Alias {
    size_t input;
    ViewRule rule;
    std::vector<int64_t> sizes;
  };
  std::vector<BufferId> local(group.inputs);
  auto local_slot = [&](BufferId id) {
    const auto it = std::find(local.begin(), local.end(), id);
    TORCH_CHECK(it != local.end(), "lazyfuse: view group reads %", id, " before it is made");
    return static_cast<size_t>(it - local.begin());
  };
  auto aliases = std::make_shared<std::vector<Alias>>();
  std::string name = "lazyfuse::view(";
  for (size_t k = 0; k < group.steps.size(); ++k) {
    const Step& step = program.steps[group.steps[k]];
    const auto rule = ViewRuleFor(step, program);
    TORCH_CHECK(rule, "lazyfuse: ", step.qualified_op(), " in a view group has no view rule");
    const BufferId output = step.outputs[0];
    aliases->push_back({local_slot(step.inputs[0]), *rule, program.buffers[output].sizes});
    local.push_back(output);
    name += (k ? ", " : "") + step.qualified_op();
  }
  std::vector<size_t> result_slots;
  for (BufferId id : group.outputs) {
    result_slots.push_back(local_slot(id));
  }
  Step out;
  out.op = name + ")";
  out.kind = StepKind::kView;
  out.inputs = group.inputs;
  out.outputs = group.outputs;
  out.fn = [aliases, inputs = group.inputs.size(), result_slots](KernelArgs& args) {
    std::vector<at::Tensor> slots;
    slots.reserve(inputs + aliases->size());
    for (size_t k = 0; k < inputs; ++k) {
      slots.push_back(args.tensor());
    }
    for (const Alias& alias : *aliases) {
      slots.push_back(AliasView(slots[alias.input], alias.rule, alias.sizes));
    }
    std::vector<at::Tensor> results;
    results.reserve(result_slots.size());
    for (size_t slot : result_slots) {
      results.push_back(slots[slot]);
    }
    return results;
  };
  return out;
}

std::unordered_map<BufferId, PredictedLayout> PredictedViewLayouts(
    const Program& program,
    const std::vector<FusionGroup>& groups,
    const std::vector<at::Tensor>& parameters) {
  // A meta tensor per buffer, with whether the memory it views starts
  // aligned: an alias is aligned when that start is and its offset keeps it.
  struct Meta {
    at::Tensor tensor;
    bool base_aligned = true;
  };
  std::unordered_map<BufferId, Meta> meta;
  auto meta_for = [&](BufferId id) -> const Meta& {
    auto it = meta.find(id);
    if (it != meta.end()) {
      return it->second;
    }
    const BufferInfo& info = program.buffers[id];
    const auto options = at::TensorOptions(info.dtype).device(at::kMeta);
    Meta made{at::empty(info.sizes, options), true};
    for (size_t p = 0; p < program.parameters.size() && p < parameters.size(); ++p) {
      const at::Tensor& bound = parameters[p];
      if (program.parameters[p] == id && bound.defined() && bound.dim() > 0) {
        made.tensor = at::empty_strided(bound.sizes(), bound.strides(), options);
        made.base_aligned = reinterpret_cast<uintptr_t>(bound.const_data_ptr()) % 16 == 0;
      }
    }
    return meta.emplace(id, std::move(made)).first->second;
  };
  std::unordered_map<BufferId, PredictedLayout> layouts;
  for (const FusionGroup& group : groups) {
    if (group.kind != GroupKind::kView) {
      continue;
    }
    for (size_t s : group.steps) {
      const Step& step = program.steps[s];
      const BufferId output = step.outputs[0];
      const Meta input = meta_for(step.inputs[0]);
      at::Tensor alias =
          AliasView(input.tensor, *ViewRuleFor(step, program), program.buffers[output].sizes);
      // A reshape no view can express copies into new, aligned memory.
      const bool copied =
          alias.storage().unsafeGetStorageImpl() != input.tensor.storage().unsafeGetStorageImpl();
      const bool base_aligned = copied || input.base_aligned;
      const bool aligned = base_aligned && alias.storage_offset() * alias.element_size() % 16 == 0;
      layouts[output] = PredictedLayout{alias.strides().vec(), aligned};
      meta[output] = Meta{std::move(alias), base_aligned};
    }
  }
  return layouts;
}

}  // namespace lazyfuse
