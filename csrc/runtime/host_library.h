#pragma once

// The host C++ compiler that builds emulated kernels into shared libraries.
// Found at run time: LAZYFUSE_EMULATE_CXX, then $CXX, then c++, g++ and
// clang++ on PATH.

#include <string>

#include "runtime/kernel_cache.h"

namespace lazyfuse {
namespace emulated {

struct HostCompiler {
  std::string path;
  std::string version;  // the first line of `--version`
  std::string flags;
  // Names the compiler, its version and flags in kernel cache keys.
  std::string cache_key;
};

// The compiler, or nullptr with the reason in `why`.
const HostCompiler* FindHostCompiler(std::string* why);

// Compiles `source` into a shared library (CompiledKernel::binary holds its
// bytes). A compile error throws with the compiler's output and the path of
// the saved source.
CompiledKernel CompileSharedLibrary(const HostCompiler& compiler,
                                    const std::string& source,
                                    const std::string& name);

}  // namespace emulated
}  // namespace lazyfuse
