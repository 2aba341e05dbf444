#include "fusion/planner.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>

#include "fusion/in_place.h"
#include "fusion/rules.h"
#include "fusion/step_roles.h"

namespace lazyfuse {
namespace {

class Planner {
 public:
  explicit Planner(const Program& program)
      : program_(program),
        producer_(program.buffers.size(), -1),
        row_level_(program.buffers.size(), false),
        readers_(program.buffers.size()),
        is_result_(program.buffers.size(), false),
        making_step_(MakingSteps(program)) {
    for (size_t i = 0; i < program.steps.size(); ++i) {
      for (BufferId id : program.steps[i].inputs) {
        readers_[id].push_back(i);
      }
    }
    is_result_ = KeptResults(program);
  }

  FusionPlan Run() {
    for (size_t i = 0; i < program_.steps.size(); ++i) {
      const Step& step = program_.steps[i];
      switch (RoleOf(step, program_)) {
        case Role::kOpaque:
          AddAtenStep(i);
          break;
        case Role::kReduction:
          AddReduction(i);
          break;
        case Role::kView:
          if (IsResultView(i) ||
              (OnlyMatmulsRead(program_, i, readers_) && !is_result_[step.outputs[0]])) {
            AddResultView(i);
            break;
          }
          [[fallthrough]];
        case Role::kPointwise:
          AddPointwise(i);
          break;
      }
    }
    return Finish();
  }

 private:
  const std::vector<int64_t>& Shape(BufferId id) const {
    return program_.buffers[id].sizes;
  }

  int NewGroup(GroupKind kind, std::vector<int64_t> domain) {
    FusionGroup group;
    group.kind = kind;
    group.domain = std::move(domain);
    groups_.push_back(std::move(group));
    sealed_.push_back(false);
    alive_.push_back(true);
    return static_cast<int>(groups_.size() - 1);
  }

  void Place(size_t step_index, int group) {
    groups_[group].steps.push_back(step_index);
    for (BufferId id : program_.steps[step_index].outputs) {
      producer_[id] = group;
    }
  }

  // A group whose value something outside it has read takes no more steps:
  // it runs at its last step, which must stay before that reader.
  void SealProducersOf(const Step& step, int except) {
    for (BufferId id : step.inputs) {
      const int g = producer_[id];
      if (g >= 0 && g != except) {
        sealed_[g] = true;
      }
    }
  }

  void AddAtenStep(size_t i) {
    SealProducersOf(program_.steps[i], -1);
    const int g = NewGroup(GroupKind::kAten, {});
    Place(i, g);
    sealed_[g] = true;
  }

  bool Open(int g) const {
    return g >= 0 && alive_[g] && !sealed_[g] && groups_[g].kind != GroupKind::kAten;
  }

  // The shape epilogue steps of a reduction group are computed over.
  std::vector<int64_t> EpilogueDomain(int g) const {
    const FusionGroup& group = groups_[g];
    const Step& reduction = program_.steps[*group.reduction];
    const auto rule = ReductionRuleFor(reduction, program_);
    return WritesFullShape(rule->kind) ? group.domain : Shape(reduction.outputs[0]);
  }

  bool CanJoin(int g, const Step& step) const {
    const std::vector<int64_t>& out = Shape(step.outputs[0]);
    const FusionGroup& group = groups_[g];
    if (group.kind == GroupKind::kReduction) {
      // The epilogue runs at the current row's index, where the row results
      // live in registers. A view that moves elements (permute, slice,
      // select) would read them at another row's index; a reshape keeps
      // every element's linear position.
      const auto view = ViewRuleFor(step, program_);
      if (view && view->kind != ViewKind::kReshape) {
        return false;
      }
      const std::vector<int64_t> epilogue = EpilogueDomain(g);
      if (ShapeNumel(out) > ShapeNumel(epilogue) || !FitsDomain(out, epilogue)) {
        return false;
      }
      const bool row_epilogue = epilogue != group.domain;
      for (BufferId id : step.inputs) {
        if (row_epilogue && producer_[id] == g && !row_level_[id]) {
          return false;  // a per-element prologue value is gone once the row is reduced
        }
      }
      return true;
    }
    if (ShapeNumel(out) <= ShapeNumel(group.domain)) {
      return FitsDomain(out, group.domain);
    }
    // Growing the domain: everything already in the group must fit the new one.
    for (size_t s : group.steps) {
      for (BufferId id : program_.steps[s].outputs) {
        if (!BroadcastsTo(Shape(id), out)) {
          return false;
        }
      }
    }
    return true;
  }

  void Join(int g, size_t i) {
    const Step& step = program_.steps[i];
    FusionGroup& group = groups_[g];
    const std::vector<int64_t>& out = Shape(step.outputs[0]);
    if (group.kind == GroupKind::kPointwise && ShapeNumel(out) > ShapeNumel(group.domain)) {
      group.domain = out;
    }
    if (group.kind == GroupKind::kReduction && EpilogueDomain(g) != group.domain) {
      row_level_[step.outputs[0]] = true;
    }
    Place(i, g);
  }

  // The shape group `g`'s stored values are indexed in: its domain, or
  // a reduction's epilogue.
  std::vector<int64_t> StoreDomain(int g) const {
    return groups_[g].kind == GroupKind::kReduction ? EpilogueDomain(g) : groups_[g].domain;
  }

  // Whether every value of group `g` that may be stored fits `domain`, so
  // the group can run over it; a value only the group and step `i` read is
  // never stored, and its readers index it.
  bool ValuesFit(int g, const std::vector<int64_t>& domain, size_t i) const {
    for (size_t s : groups_[g].steps) {
      for (BufferId id : program_.steps[s].outputs) {
        if (!FitsDomain(Shape(id), domain) && !Private(id, g, i)) {
          return false;
        }
      }
    }
    return true;
  }

  // Moves group `from`'s steps into group `into`, for step `i`. The target
  // keeps its domain: a reduction's is the shape it reduces (an empty one
  // reduces nothing), and a pointwise target has already grown to the
  // step's shape. The caller checked that `from`'s values fit there.
  void MergeInto(int into, int from, size_t i) {
    FusionGroup& target = groups_[into];
    FusionGroup& source = groups_[from];
    TORCH_CHECK(ValuesFit(from, StoreDomain(into), i),
                "lazyfuse: fusion planner: a ",
                GroupKindName(source.kind),
                " group over ",
                c10::IntArrayRef(source.domain),
                " cannot merge into a ",
                GroupKindName(target.kind),
                " group over ",
                c10::IntArrayRef(target.domain));
    for (size_t s : source.steps) {
      for (BufferId id : program_.steps[s].outputs) {
        producer_[id] = into;
      }
    }
    target.steps.insert(target.steps.end(), source.steps.begin(), source.steps.end());
    std::sort(target.steps.begin(), target.steps.end());
    source.steps.clear();
    alive_[from] = false;
  }

  // A step reading a reduction's results and values of pointwise groups that
  // all run after the reduction, over its epilogue's shape (a bias's
  // momentum buffer scaled, then added to its gradient's sum): those groups
  // join the epilogue, so the step joins too. The reduction group, or -1.
  int EpilogueTakingOver(const std::vector<int>& candidates, size_t i) const {
    const Step& step = program_.steps[i];
    int reduction = -1;
    for (int g : candidates) {
      if (groups_[g].kind == GroupKind::kReduction) {
        if (reduction >= 0) {
          return -1;
        }
        reduction = g;
      }
    }
    if (reduction < 0 || !CanJoin(reduction, step)) {
      return -1;
    }
    const size_t reduction_step = *groups_[reduction].reduction;
    const std::vector<int64_t> epilogue = EpilogueDomain(reduction);
    for (int g : candidates) {
      const FusionGroup& group = groups_[g];
      if (g == reduction) {
        continue;
      }
      if (group.kind != GroupKind::kPointwise || group.steps.front() < reduction_step ||
          ShapeNumel(group.domain) != ShapeNumel(epilogue) || !ValuesFit(g, epilogue, i)) {
        return -1;
      }
      for (size_t s : group.steps) {
        for (BufferId id : program_.steps[s].inputs) {
          if (producer_[id] == reduction) {
            return -1;
          }
        }
      }
    }
    return reduction;
  }

  // Group `from`'s values, computed in reduction group `into`'s epilogue,
  // are per row there when the epilogue runs over rows.
  void MarkRowLevel(int into, int from) {
    if (EpilogueDomain(into) == groups_[into].domain) {
      return;
    }
    for (size_t s : groups_[from].steps) {
      for (BufferId id : program_.steps[s].outputs) {
        row_level_[id] = true;
      }
    }
  }

  bool IsResultView(size_t i) const {
    const Step& step = program_.steps[i];
    return std::any_of(step.outputs.begin(),
                       step.outputs.end(),
                       [&](BufferId id) { return is_result_[id]; }) &&
           ResultAliasSavesMemory(program_, i, making_step_);
  }

  // A reshape whose value outlives the graph (a detached parameter) aliases
  // its input, as in eager, instead of being a copy a kernel writes: both
  // would be held after the step. It goes in a view-only group, sealed so
  // that no kernel joins it.
  void AddResultView(size_t i) {
    const Step& step = program_.steps[i];
    const int producer = producer_[step.inputs[0]];
    if (Open(producer) && OnlyViews(groups_[producer])) {
      SealProducersOf(step, producer);
      Join(producer, i);
      sealed_[producer] = true;
      return;
    }
    SealProducersOf(step, -1);
    const int view = NewGroup(GroupKind::kPointwise, Shape(step.outputs[0]));
    Place(i, view);
    sealed_[view] = true;
  }

  void AddPointwise(size_t i) {
    const Step& step = program_.steps[i];
    const std::vector<int64_t>& out = Shape(step.outputs[0]);
    std::vector<int> candidates;
    for (BufferId id : step.inputs) {
      const int g = producer_[id];
      if (Open(g) && std::find(candidates.begin(), candidates.end(), g) == candidates.end()) {
        candidates.push_back(g);
      }
    }
    if (candidates.empty()) {
      const int sibling = SiblingReading(step);
      if (sibling >= 0) {
        Place(i, sibling);
        return;
      }
    }
    if (candidates.size() == 1 && ShrinksPrivateGroup(candidates[0], i)) {
      // The group now computes only the view's elements, each producer value
      // at the index the view reads (KernelWriter walks views backwards).
      groups_[candidates[0]].domain = out;
      Place(i, candidates[0]);
      return;
    }
    if (candidates.size() == 1 && CanJoin(candidates[0], step)) {
      SealProducersOf(step, candidates[0]);
      Join(candidates[0], i);
      return;
    }
    if (candidates.size() > 1) {
      // Pointwise groups that can all join a reduction's epilogue do, and
      // the step with them.
      const int reduction = EpilogueTakingOver(candidates, i);
      if (reduction >= 0) {
        for (int g : candidates) {
          if (g != reduction) {
            MarkRowLevel(reduction, g);
            MergeInto(reduction, g, i);
          }
        }
        SealProducersOf(step, reduction);
        Join(reduction, i);
        return;
      }
      // Else the pointwise candidates merge and take the step; a reduction
      // whose results it reads is sealed (its kernel runs first).
      // The merged group runs over the step's shape, which every
      // candidate's domain and stored values must fit.
      std::vector<int> pointwise;
      bool all_fit = true;
      for (int g : candidates) {
        if (groups_[g].kind == GroupKind::kPointwise) {
          pointwise.push_back(g);
          all_fit = all_fit && CanJoin(g, step) && FitsDomain(groups_[g].domain, out) &&
                    ValuesFit(g, out, i);
        }
      }
      if (!pointwise.empty() && all_fit) {
        groups_[pointwise[0]].domain = out;
        for (size_t k = 1; k < pointwise.size(); ++k) {
          MergeInto(pointwise[0], pointwise[k], i);
        }
        SealProducersOf(step, pointwise[0]);
        Join(pointwise[0], i);
        return;
      }
    }
    SealProducersOf(step, -1);
    Place(i, NewGroup(GroupKind::kPointwise, out));
  }

  // Whether step `i` is a select or slice of pointwise group `g`'s values that
  // nothing else reads, so the group need not compute (or store) the rest.
  bool ShrinksPrivateGroup(int g, size_t i) const {
    const Step& step = program_.steps[i];
    const auto view = ViewRuleFor(step, program_);
    if (!view || (view->kind != ViewKind::kSlice && view->kind != ViewKind::kSelect) ||
        groups_[g].kind != GroupKind::kPointwise ||
        ShapeNumel(Shape(step.outputs[0])) >= ShapeNumel(groups_[g].domain)) {
      return false;
    }
    for (size_t s : groups_[g].steps) {
      for (BufferId id : program_.steps[s].outputs) {
        if (!Private(id, g, i)) {
          return false;
        }
      }
    }
    return true;
  }

  // Whether only group `g`'s steps and step `i` read buffer `id`, and it is
  // no result: it is never stored, so it need not fit the group's domain.
  bool Private(BufferId id, int g, size_t i) const {
    if (is_result_[id]) {
      return false;
    }
    for (size_t reader : readers_[id]) {
      const auto& outputs = program_.steps[reader].outputs;
      const bool inside = !outputs.empty() && producer_[outputs[0]] == g;
      if (reader != i && !inside) {
        return false;
      }
    }
    return true;
  }

  // Horizontal fusion: an open pointwise group over the same shape that
  // already reads one of this step's inputs, so that input is read once.
  int SiblingReading(const Step& step) const {
    const std::vector<int64_t>& out = Shape(step.outputs[0]);
    for (int g = static_cast<int>(groups_.size()) - 1; g >= 0; --g) {
      if (!Open(g) || groups_[g].kind != GroupKind::kPointwise || groups_[g].domain != out) {
        continue;
      }
      for (size_t s : groups_[g].steps) {
        for (BufferId read : program_.steps[s].inputs) {
          if (!Shape(read).empty() &&
              std::find(step.inputs.begin(), step.inputs.end(), read) != step.inputs.end()) {
            return g;
          }
        }
      }
    }
    return -1;
  }

  void AddReduction(size_t i) {
    const Step& step = program_.steps[i];
    const std::vector<int64_t>& in = Shape(step.inputs[0]);
    const int g = producer_[step.inputs[0]];
    int target = -1;
    if (Open(g) && groups_[g].kind == GroupKind::kPointwise &&
        ShapeNumel(groups_[g].domain) == ShapeNumel(in)) {
      target = g;
      for (size_t s : groups_[g].steps) {
        for (BufferId id : program_.steps[s].outputs) {
          target = FitsDomain(Shape(id), in) || Private(id, g, i) ? target : -1;
        }
      }
    }
    SealProducersOf(step, target);
    if (target < 0) {
      target = NewGroup(GroupKind::kReduction, in);
    }
    FusionGroup& group = groups_[target];
    group.kind = GroupKind::kReduction;
    group.domain = in;
    group.reduction = i;
    Place(i, target);
    const bool full = WritesFullShape(ReductionRuleFor(step, program_)->kind);
    for (size_t k = 0; k < step.outputs.size(); ++k) {
      row_level_[step.outputs[k]] = !(full && k == 0);
    }
  }

  bool OnlyViews(const FusionGroup& group) const {
    return std::all_of(group.steps.begin(), group.steps.end(), [&](size_t s) {
      return RoleOf(program_.steps[s], program_) == Role::kView;
    });
  }

  FusionPlan Finish() {
    std::vector<size_t> order;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (alive_[g] && !groups_[g].steps.empty()) {
        order.push_back(g);
      }
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return groups_[a].steps.back() < groups_[b].steps.back();
    });
    FusionPlan plan;
    for (size_t g : order) {
      if (groups_[g].kind == GroupKind::kPointwise && OnlyViews(groups_[g])) {
        groups_[g].kind = GroupKind::kView;
      }
      plan.groups.push_back(std::move(groups_[g]));
    }
    AssignGroupBuffers(program_, plan);
    return plan;
  }

  const Program& program_;
  std::vector<FusionGroup> groups_;
  std::vector<bool> sealed_;
  std::vector<bool> alive_;
  std::vector<int> producer_;
  std::vector<bool> row_level_;
  std::vector<std::vector<size_t>> readers_;  // per buffer, the steps reading it
  std::vector<bool> is_result_;
  std::vector<int> making_step_;  // MakingSteps(program_)
};

}  // namespace

FusionPlan PlanFusion(const Program& program) {
  TORCH_LAZY_TIMED("LazyFusePlanning");
  FusionPlan plan = Planner(program).Run();
  for (FusionGroup& group : plan.groups) {
    if (LaunchesKernel(group.kind)) {
      group.in_place = InPlaceInputs(program, group);
    }
  }
  return plan;
}

}  // namespace lazyfuse
