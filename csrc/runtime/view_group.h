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

// The strides each view-group output has when every buffer a view group
// reads is contiguous: what a kernel reading that output will be bound to.
// Worked out on meta tensors, for kernels compiled ahead of time.
std::unordered_map<BufferId, std::vector<int64_t>> PredictedViewStrides(const Program& program,
                                                                        const FusionPlan& plan);

}  // namespace lazyfuse
