#pragma once

// Turns a planned Program into the one a kernel target runs.

#include <memory>
#include <vector>

#include "fusion/planner.h"
#include "runtime/fused_kernel.h"
#include "runtime/target.h"

namespace lazyfuse {

// The Program a kernel target runs: every fused group of `plan` becomes one
// step that launches its kernel; ATen groups keep their step. `kernels`
// receives the FusedKernel of each fused step, for debugging. On a target
// that batches, the Program loads its kernels in one batch before its first
// run (Program::before_run), for the signatures that run binds.
Program BuildFusedProgram(std::shared_ptr<const Program> program,
                          const FusionPlan& plan,
                          const std::shared_ptr<KernelTarget>& target,
                          bool strict,
                          std::vector<std::shared_ptr<FusedKernel>>* kernels);

}  // namespace lazyfuse
