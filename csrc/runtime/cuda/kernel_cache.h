#pragma once

// NVRTC compilation behind two caches. A kernel's key is the hash of its
// source, the target architecture and the NVRTC version. The memory cache
// serves a process; the disk cache (~/.cache/lazyfuse, or LAZYFUSE_CACHE_DIR;
// LAZYFUSE_CACHE_DIR=0 turns it off) serves every process after the first.
// Entries are written to a temporary file and renamed into place, and carry a
// checksum, so parallel writers are safe and a damaged entry is recompiled.

#include <memory>
#include <string>

namespace lazyfuse {
namespace cuda {

struct CompiledKernel {
  std::string target;  // "sm_90" (CUBIN) or "compute_90" (PTX)
  bool cubin = true;
  std::string binary;
  std::string log;
};

// "sm_90", "sm90", "90" and "compute_90" give 90.
int ParseArch(const std::string& arch);
// "13.5"; throws when libnvrtc is missing.
std::string NvrtcVersion();
// The directory of the disk cache, or "" when it is off.
std::string KernelCacheDir();

// The compiled kernel for `source` on compute capability `sm` (e.g. 90).
// NVRTC older than the GPU gets PTX for its newest architecture instead,
// which the driver compiles on load. A compile error throws with NVRTC's log
// and the path of the kernel source, saved for reading.
std::shared_ptr<const CompiledKernel> CompileKernel(const std::string& source,
                                                    const std::string& name,
                                                    int sm);

}  // namespace cuda
}  // namespace lazyfuse
