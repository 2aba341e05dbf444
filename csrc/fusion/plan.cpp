// The plan's vocabulary, the buffers each group reads and writes, and its
// printout (lazyfuse.debug.fusion_plan); the grouping itself is planner.cpp.

#include <algorithm>
#include <sstream>

#include "fusion/planner.h"

namespace lazyfuse {

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kAten:
      return "aten";
    case GroupKind::kPointwise:
      return "pointwise";
    case GroupKind::kReduction:
      return "reduction";
    case GroupKind::kView:
      return "view";
  }
  return "unknown";
}

bool LaunchesKernel(GroupKind kind) {
  return kind == GroupKind::kPointwise || kind == GroupKind::kReduction;
}

void AssignGroupBuffers(const Program& program, FusionPlan& plan) {
  std::vector<int> group_of(program.buffers.size(), -1);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (size_t s : plan.groups[g].steps) {
      for (BufferId id : program.steps[s].outputs) {
        group_of[id] = static_cast<int>(g);
      }
    }
  }
  auto add_unique = [](std::vector<BufferId>& list, BufferId id) {
    if (std::find(list.begin(), list.end(), id) == list.end()) {
      list.push_back(id);
    }
  };
  std::vector<bool> materialised(program.buffers.size(), false);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (size_t s : plan.groups[g].steps) {
      for (BufferId id : program.steps[s].inputs) {
        if (group_of[id] != static_cast<int>(g)) {
          add_unique(plan.groups[g].inputs, id);
          materialised[id] = true;
        }
      }
    }
  }
  const std::vector<bool> kept = KeptResults(program);
  for (size_t id = 0; id < kept.size(); ++id) {
    materialised[id] = materialised[id] || kept[id];
  }
  for (FusionGroup& group : plan.groups) {
    for (size_t s : group.steps) {
      for (BufferId id : program.steps[s].outputs) {
        if (materialised[id] || group.kind == GroupKind::kAten) {
          add_unique(group.outputs, id);
        }
      }
    }
  }
}

size_t FusionPlan::FusedGroupCount() const {
  return std::count_if(groups.begin(), groups.end(), [](const FusionGroup& group) {
    return LaunchesKernel(group.kind);
  });
}

std::string FusionPlan::ToString(const Program& program) const {
  auto shape = [](const std::vector<int64_t>& sizes) {
    std::ostringstream out;
    out << "[";
    for (size_t d = 0; d < sizes.size(); ++d) {
      out << (d ? "," : "") << sizes[d];
    }
    out << "]";
    return out.str();
  };
  auto buffers = [](const std::vector<BufferId>& ids) {
    std::ostringstream out;
    for (size_t k = 0; k < ids.size(); ++k) {
      out << (k ? " " : "") << "%" << ids[k];
    }
    return out.str();
  };
  std::ostringstream out;
  out << "fusion plan (" << groups.size() << " groups, " << FusedGroupCount() << " fused)\n";
  for (size_t g = 0; g < groups.size(); ++g) {
    const FusionGroup& group = groups[g];
    out << "  group " << g << " [" << GroupKindName(group.kind);
    if (LaunchesKernel(group.kind)) {
      out << " " << shape(group.domain);
    }
    out << "]:";
    for (size_t s : group.steps) {
      out << " " << program.steps[s].qualified_op();
    }
    out << " (" << buffers(group.inputs) << " -> " << buffers(group.outputs) << ")\n";
  }
  return out.str();
}

}  // namespace lazyfuse
