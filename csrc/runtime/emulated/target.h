#pragma once

// The emulated CUDA kernel target: the kernels the CUDA dialect renders, with
// the emulated prelude, compiled by the host C++ compiler into shared
// libraries (cached like CUBINs) and launched over CPU tensors by the
// emulator (launcher.h). Outputs carry guard bytes, checked after each launch.

#include <memory>
#include <string>

#include "runtime/target.h"

namespace lazyfuse {

struct EmulationLimits {
  int block = 32;  // threads per block, a multiple of 32
  int grid = 3;    // most blocks per grid
  double barrier_timeout_seconds = 30;
};

std::shared_ptr<KernelTarget> MakeEmulatedTarget(const EmulationLimits& limits);

// Compiles `source` (a kernel the emulated dialect rendered, named `name`)
// and runs it over `inputs` and `outputs` (CPU tensors, in parameter order;
// 0-dim inputs are host scalars) with the given launch shape. For tests that
// plant faulty kernels; raises what the emulator reports.
void LaunchEmulatedSource(const std::string& source,
                          const std::string& name,
                          const std::vector<at::Tensor>& inputs,
                          const std::vector<at::Tensor>& outputs,
                          int64_t grid,
                          int64_t block);

}  // namespace lazyfuse
