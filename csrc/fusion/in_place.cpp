#include "fusion/in_place.h"

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "fusion/rules.h"

namespace lazyfuse {
namespace {

// A view that leaves every element at its linear index, which is where a
// kernel reads and writes it: detach, any reshape, a broadcast to the same
// sizes, an identity permutation, a full slice.
bool IsIdentityView(const Step& step, const Program& program) {
  const auto rule = ViewRuleFor(step, program);
  if (!rule || step.inputs.empty() || step.outputs.size() != 1) {
    return false;
  }
  if (rule->kind == ViewKind::kReshape) {
    return true;
  }
  if (program.buffers[step.inputs[0]].sizes != program.buffers[step.outputs[0]].sizes) {
    return false;
  }
  switch (rule->kind) {
    case ViewKind::kReshape:
    case ViewKind::kBroadcast:
      return true;
    case ViewKind::kPermute:
      for (size_t d = 0; d < rule->permutation.size(); ++d) {
        if (rule->permutation[d] != static_cast<int64_t>(d)) {
          return false;
        }
      }
      return true;
    case ViewKind::kSlice:
      return rule->start == 0 && rule->step == 1;
    case ViewKind::kSelect:
      return false;
  }
  return false;
}

// The buffers computed from `input` inside the group, or nothing when some
// step reads it (or a value computed from it) other than element-wise over
// `domain`: a view that moves elements, a broadcast, a reduction, or any step
// before `first_step` (a reduction's prologue).
std::optional<std::unordered_set<BufferId>> ElementwiseReach(const Program& program,
                                                             const FusionGroup& group,
                                                             BufferId input,
                                                             const std::vector<int64_t>& domain,
                                                             size_t first_step) {
  std::unordered_set<BufferId> reached{input};
  for (size_t index : group.steps) {
    const Step& step = program.steps[index];
    const bool reads_reached = std::any_of(step.inputs.begin(),
                                           step.inputs.end(),
                                           [&](BufferId id) { return reached.count(id) != 0; });
    if (!reads_reached) {
      continue;
    }
    if (index < first_step ||
        (!PointwiseRuleFor(step, program) && !IsIdentityView(step, program))) {
      return std::nullopt;
    }
    for (BufferId out : step.outputs) {
      if (ShapeNumel(program.buffers[out].sizes) != ShapeNumel(domain)) {
        return std::nullopt;
      }
      reached.insert(out);
    }
  }
  return reached;
}

}  // namespace

std::vector<std::vector<size_t>> InPlaceInputs(const Program& program, const FusionGroup& group) {
  std::vector<std::vector<size_t>> candidates(group.outputs.size());
  std::vector<int64_t> domain = group.domain;
  size_t first_step = 0;
  // A kernel computes every output of a store batch before storing any, so
  // any output an input reaches may take its memory: in a pointwise kernel
  // the element's outputs, in a reduction's epilogue the row's results, or
  // softmax's and layer norm's element outputs. A row of one column is the
  // exception: the same input could reach both batches at one index.
  bool any_reached = true;
  if (group.kind == GroupKind::kReduction && group.reduction) {
    // Epilogue steps run at the row (or, writing the full shape, the element)
    // the reduction has just finished.
    const Step& reduction = program.steps[*group.reduction];
    const auto rule = ReductionRuleFor(reduction, program);
    if (!rule) {
      return candidates;
    }
    if (!WritesFullShape(rule->kind)) {
      domain = program.buffers[reduction.outputs[0]].sizes;
    }
    int64_t cols = 1;
    for (int64_t d : rule->dims) {
      cols *= group.domain[d];
    }
    any_reached = cols != 1;
    first_step = *group.reduction + 1;
  } else if (group.kind != GroupKind::kPointwise) {
    return candidates;
  }
  std::unordered_set<BufferId> results(program.results.begin(), program.results.end());
  std::unordered_set<BufferId> constants;
  for (const auto& constant : program.constants) {
    constants.insert(constant.first);
  }
  for (size_t k = 0; k < group.inputs.size(); ++k) {
    const BufferId input = group.inputs[k];
    const BufferInfo& info = program.buffers[input];
    // A result is still read after the graph; a constant belongs to the program.
    // Buffers with the domain's element count are all read and written at
    // the domain's linear index ([32] and a keepdim sum's [1, 32] alike).
    if (ShapeNumel(info.sizes) != ShapeNumel(domain) || results.count(input) != 0 ||
        constants.count(input) != 0) {
      continue;
    }
    const auto reached = ElementwiseReach(program, group, input, domain, first_step);
    if (!reached) {
      continue;
    }
    for (size_t j = group.outputs.size(); j-- > 0;) {
      if (reached->count(group.outputs[j]) == 0) {
        continue;
      }
      const BufferInfo& out = program.buffers[group.outputs[j]];
      if (out.dtype == info.dtype && out.sizes == info.sizes) {
        candidates[j].push_back(k);
      }
      if (!any_reached) {
        break;
      }
    }
  }
  return candidates;
}

}  // namespace lazyfuse
