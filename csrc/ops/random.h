#pragma once

// Random ops as seeded IR nodes. Each node takes, as its last operand, a seed
// drawn at trace time from torch's default CPU generator (so
// torch.manual_seed makes runs reproducible). The seed is a host-scalar
// graph parameter: the graph hash stays the same from step to step, yet
// running one graph twice -- e.g. syncing a tensor, then the whole step --
// draws the same numbers both times.

#include <ATen/core/Generator.h>

#include <functional>

#include "program/program.h"

namespace lazyfuse {

// Computes a random op from its tensor operand with a generator seeded for
// this node.
using DrawFn = std::function<std::vector<at::Tensor>(const at::Tensor& input, at::Generator gen)>;

// The step of a seeded node: reads the tensor operand, then the seed.
StepFn SeededStep(DrawFn draw);

}  // namespace lazyfuse
