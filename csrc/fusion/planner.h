#pragma once

// Groups a Program's steps into kernels. Works on the Program alone, so the
// plan is the same whichever device later runs it; the CUDA backend turns
// each fused group into one NVRTC kernel and leaves the rest as ATen calls.

#include <optional>
#include <string>
#include <vector>

#include "program/program.h"

namespace lazyfuse {

enum class GroupKind {
  kAten,       // one step, run as its ATen call
  kPointwise,  // pointwise steps and views, one thread per element of `domain`
  kReduction,  // one reduction with its pointwise prologue and epilogue
  // Views alone: run as aliases of their inputs, never as a copy kernel.
  // Consumers read the aliased strides (fused kernels bind them, cuBLAS
  // takes transposes), so a transpose or reshape costs nothing.
  kView,
};

const char* GroupKindName(GroupKind kind);
// Pointwise and reduction groups become kernels; ATen and view groups do not.
bool LaunchesKernel(GroupKind kind);

struct FusionGroup {
  GroupKind kind = GroupKind::kAten;
  // Program step indices, ascending. The group runs where its last step was.
  std::vector<size_t> steps;
  // Buffers the group reads that come from outside it, in first-use order.
  std::vector<BufferId> inputs;
  // Buffers the group produces that something outside it (or the program's
  // results) reads, in production order.
  std::vector<BufferId> outputs;
  // kPointwise: the iteration shape. kReduction: the reduction's input shape.
  std::vector<int64_t> domain;
  // kReduction: the reduction step.
  std::optional<size_t> reduction;
  // Groups that launch a kernel, per output: the indices in `inputs` of the
  // inputs whose memory it may take (InPlaceInputs, fusion/in_place.h).
  std::vector<std::vector<size_t>> in_place;
};

struct FusionPlan {
  std::vector<FusionGroup> groups;  // in execution order

  // Groups that launch a kernel.
  size_t FusedGroupCount() const;
  std::string ToString(const Program& program) const;
};

FusionPlan PlanFusion(const Program& program);

// Fills each group's inputs and outputs. Which buffers have to be written to
// memory: a buffer is materialised when a step outside its group reads it or
// the program returns it.
void AssignGroupBuffers(const Program& program, FusionPlan& plan);

}  // namespace lazyfuse
