#pragma once

// Ahead-of-time compilation of a graph's fused kernels for a named CUDA
// architecture. Needs NVRTC but no GPU: nothing is launched. Compiled kernels
// land in the kernel cache, so this also warms it.

#include <string>
#include <vector>

#include "program/program.h"

namespace lazyfuse {

struct KernelCompileRecord {
  std::string name;
  std::vector<std::string> ops;
  std::string source;
  std::string target;  // what NVRTC compiled for: "sm_90", or "compute_XX" (PTX)
  bool compiled = false;
  std::string log;
  // The launch a GPU with `sms` streaming multiprocessors would make.
  int64_t grid = 0;
  int64_t block = 0;
  int launches = 1;  // of that grid: a few-row softmax or layer norm takes 2
};

// `host_scalar_parameters[k]` says whether parameter k is a 0-dim CPU value.
// `block_limit` caps threads per block as a target's launch limits do (0:
// none), so the emulator's kernels can be rendered for comparison. `generic`
// compiles each kernel's shape-generic template (LAZYFUSE_DYNAMIC=1's) instead.
std::vector<KernelCompileRecord> CompileFusedKernels(
    const Program& program,
    const std::vector<bool>& host_scalar_parameters,
    const std::string& arch,
    int sms,
    int block_limit = 0,
    bool generic = false);

// Whether libnvrtc loads, and from where (or why not).
bool NvrtcAvailable(std::string* where_or_why);

}  // namespace lazyfuse
