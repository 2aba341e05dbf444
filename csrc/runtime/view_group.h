#pragma once

// Runs a view-only fusion group as aliases of its inputs instead of a copy
// kernel: each view step becomes the ATen view it stands for (view, expand,
// permute, slice, select), so the result shares its input's storage and
// carries the strides consumers then read.

#include <ATen/Tensor.h>

#include <unordered_map>
#include <vector>

#include "fusion/planner.h"
#include "fusion/rules.h"

namespace lazyfuse {

// The alias `rule` makes of `input`, with the view step's output sizes.
at::Tensor AliasView(const at::Tensor& input,
                     const ViewRule& rule,
                     const std::vector<int64_t>& out_sizes);

// The step a kView group runs: reads the group's inputs, returns its outputs
// as aliases.
Step ViewGroupStep(const Program& program, const FusionGroup& group);

// How a kernel will find a view-group output bound: its strides, and
// whether its data pointer is 16-byte aligned.
struct PredictedLayout {
  std::vector<int64_t> strides;
  bool aligned = true;
};

// The layout of each output of the view groups among `groups`, for a run
// that binds `parameters` (program parameters, in order; those left out are
// taken contiguous and aligned) and makes every other buffer a view group
// reads as a new contiguous tensor. Worked out on meta tensors, so that
// kernels compiled ahead of their launch (a batch, or ahead of time) are
// the ones the launch binds.
std::unordered_map<BufferId, PredictedLayout> PredictedViewLayouts(
    const Program& program,
    const std::vector<FusionGroup>& groups,
    const std::vector<at::Tensor>& parameters = {});

}  // namespace lazyfuse
