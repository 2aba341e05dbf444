#include "fusion/in_place.h"

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "fusion/rules.h"

namespace lazyfuse {
namespace {

// A view that leaves every element where it was: detach, a reshape or
// broadcast to the same sizes, an identity permutation, a full slice.
bool IsIdentityView(const Step& step, const Program& program) {
  const auto rule = ViewRuleFor(step, program);
  if (!rule || step.inputs.empty() || step.outputs.size() != 1 ||
      program.buffers[step.inputs[0]].sizes != program.buffers[step.outputs[0]].sizes) {
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
// the whole domain: a view that moves elements, a broadcast, a reduction.
std::optional<std::unordered_set<BufferId>> ElementwiseReach(const Program& program,
                                                             const FusionGroup& group,
                                                             BufferId input) {
  std::unordered_set<BufferId> reached{input};
  for (size_t index : group.steps) {
    const Step& step = program.steps[index];
    const bool reads_reached = std::any_of(step.inputs.begin(),
                                           step.inputs.end(),
                                           [&](BufferId id) { return reached.count(id) != 0; });
    if (!reads_reached) {
      continue;
    }
    if (!PointwiseRuleFor(step, program) && !IsIdentityView(step, program)) {
      return std::nullopt;
    }
    for (BufferId out : step.outputs) {
      if (program.buffers[out].sizes != group.domain) {
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
  if (group.kind != GroupKind::kPointwise) {
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
    if (info.sizes != group.domain || results.count(input) != 0 || constants.count(input) != 0) {
      continue;
    }
    const auto reached = ElementwiseReach(program, group, input);
    if (!reached) {
      continue;
    }
    // Outputs are stored in order, and a later output may load the input
    // again (at an index written differently), so only the last output the
    // input reaches may take its memory.
    for (size_t j = group.outputs.size(); j-- > 0;) {
      if (reached->count(group.outputs[j]) == 0) {
        continue;
      }
      const BufferInfo& out = program.buffers[group.outputs[j]];
      if (out.dtype == info.dtype && out.sizes == group.domain) {
        candidates[j].push_back(k);
      }
      break;
    }
  }
  return candidates;
}

}  // namespace lazyfuse
