#pragma once

// Lowers the pending IR of some lazy tensors to a Program without running or
// caching it, for inspection (fusion plans, ahead-of-time kernel compiles).

#include <ATen/Tensor.h>

#include <memory>
#include <vector>

#include "program/program.h"

namespace lazyfuse {

struct PendingGraph {
  std::shared_ptr<const Program> program;
  // Per parameter: whether its value is a 0-dim CPU scalar.
  std::vector<bool> host_scalar_parameters;
};

// Tensors that are already materialised contribute nothing; a lazy tensor is
// required for each entry.
PendingGraph LowerPendingGraph(const std::vector<at::Tensor>& tensors);

}  // namespace lazyfuse
