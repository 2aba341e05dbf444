#pragma once

// NVRTC compilation for the CUDA target, through the kernel cache.

#include <memory>
#include <string>

#include "runtime/kernel_cache.h"

namespace lazyfuse {
namespace cuda {

// "sm_90", "sm90", "90" and "compute_90" give 90.
int ParseArch(const std::string& arch);
// "13.5"; throws when libnvrtc is missing.
std::string NvrtcVersion();

// The compiled kernel for `source` on compute capability `sm` (e.g. 90).
// NVRTC older than the GPU gets PTX for its newest architecture instead,
// which the driver compiles on load. A compile error throws with NVRTC's log
// and the path of the kernel source, saved for reading.
std::shared_ptr<const CompiledKernel> CompileKernel(const std::string& source,
                                                    const std::string& name,
                                                    int sm);

}  // namespace cuda
}  // namespace lazyfuse
