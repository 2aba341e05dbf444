#include "fusion/step_roles.h"

#include <algorithm>
#include <string>

#include "fusion/rules.h"

namespace lazyfuse {

Role RoleOf(const Step& step, const Program& program) {
  if (step.kind == StepKind::kCollective || !step.operand_arity.empty()) {
    return Role::kOpaque;  // tensor-list operands: cat, stack, index
  }
  if (ReductionRuleFor(step, program)) {
    return Role::kReduction;
  }
  if (ViewRuleFor(step, program)) {
    return Role::kView;
  }
  if (PointwiseRuleFor(step, program)) {
    return Role::kPointwise;
  }
  return Role::kOpaque;
}

bool BroadcastsTo(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size()) {
    return false;
  }
  const size_t offset = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != 1 && from[d] != to[offset + d]) {
      return false;
    }
  }
  return true;
}

bool FitsDomain(const std::vector<int64_t>& shape, const std::vector<int64_t>& domain) {
  return ShapeNumel(shape) == ShapeNumel(domain) || BroadcastsTo(shape, domain);
}

bool ResultAliasSavesMemory(const Program& program, size_t i, const std::vector<int>& making_step) {
  for (int s = static_cast<int>(i); s >= 0;) {
    const Step& step = program.steps[s];
    if (RoleOf(step, program) != Role::kView) {
      return true;  // the chain's root: made by a step that is no view
    }
    const std::optional<ViewRule> rule = ViewRuleFor(step, program);
    if (!rule || step.inputs.empty() || rule->kind != ViewKind::kReshape) {
      return false;
    }
    s = making_step[step.inputs[0]];
  }
  return true;  // a parameter's or a constant's view
}

bool OnlyMatmulsRead(const Program& program,
                     size_t i,
                     const std::vector<std::vector<size_t>>& readers) {
  const Step& step = program.steps[i];
  const auto view = ViewRuleFor(step, program);
  if (!view || view->kind != ViewKind::kPermute || step.outputs.size() != 1) {
    return false;
  }
  const std::vector<size_t>& read_by = readers[step.outputs[0]];
  return !read_by.empty() && std::all_of(read_by.begin(), read_by.end(), [&](size_t r) {
    const std::string op = program.steps[r].qualified_op();
    return op == "aten::mm" || op == "aten::bmm" || op == "aten::addmm" || op == "aten::baddbmm";
  });
}

}  // namespace lazyfuse
