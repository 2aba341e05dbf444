#pragma once

// Compiled kernels behind two caches, for every target. A kernel's key is the
// hash of its source and a compiler key (the target, the compiler's version
// and its flags). The memory cache serves a process and keeps the 1024 most
// recently used binaries; the disk cache
// (~/.cache/lazyfuse, or LAZYFUSE_CACHE_DIR; LAZYFUSE_CACHE_DIR=0 turns it
// off) serves every process after the first. Entries are written to a
// temporary file and renamed into place, and carry a checksum over everything
// they hold, so parallel writers are safe and a damaged entry is recompiled.

#include <functional>
#include <memory>
#include <string>

namespace lazyfuse {

struct CompiledKernel {
  std::string target;  // "sm_90" (CUBIN), "compute_90" (PTX), "host" (shared library)
  bool cubin = true;
  std::string binary;
  std::string log;
};

// The directory of the disk cache, or "" when it is off.
std::string KernelCacheDir();
// LAZYFUSE_CACHE_READONLY=1: entries are read from the disk cache, never
// written there (a cache shared between machines or users).
bool KernelCacheReadOnly();

// A directory for files that must exist even with the disk cache off: kernel
// sources kept for reading, shared libraries to load.
std::string KernelScratchDir(const std::string& subdir);

// Saves a kernel's source where the user can read it; returns its path.
std::string SaveKernelSource(const std::string& source,
                             const std::string& name,
                             const std::string& subdir,
                             const std::string& extension);

// The compiled kernel for `source` under `compiler_key`; `compile` runs only
// when neither cache has it, and counts LazyFuseKernelsCompiled. Thread-safe:
// a thread asking for a key another thread is compiling waits for that compile.
std::shared_ptr<const CompiledKernel> CachedCompile(const std::string& source,
                                                    const std::string& compiler_key,
                                                    const std::function<CompiledKernel()>& compile);

}  // namespace lazyfuse
