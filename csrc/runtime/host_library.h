#pragma once

// Kernels built by the host C++ compiler into shared libraries and loaded
// with dlopen: the emulated CUDA target's and the CPU target's. The compiler
// is found at run time: LAZYFUSE_EMULATE_CXX, then $CXX, then c++, g++ and
// clang++ on PATH. Libraries go through the kernel cache (keyed on the
// source, the compiler, its flags and, for native code, the machine's ISA),
// and each loaded library is shared by every kernel with the same binary.

#include <memory>
#include <string>

#include "runtime/kernel_cache.h"
#include "runtime/module_registry.h"

namespace lazyfuse {

struct HostCompiler {
  std::string path;
  std::string version;  // the first line of `--version`
};

// The compiler, or nullptr with the reason in `why`.
const HostCompiler* FindHostCompiler(std::string* why);

// The host compiler ("path (version)"), or why there is none.
bool HostCompilerAvailable(std::string* description_or_why);

// How one target builds its libraries.
struct HostBuild {
  std::string flags;      // besides -shared -fPIC
  std::string libraries;  // linked after the source: "-lmvec"
  std::string subdir;     // under the scratch dir: "emulated", "cpu"
  // Code for this machine's ISA (-march=native): the cache key names the ISA.
  bool native = false;
};

// A loaded library; closed when the last kernel holding it is gone.
class HostLibrary {
 public:
  ~HostLibrary();
  // The address of exported `symbol`; raises naming the kernel if missing.
  void* Symbol(const char* symbol) const;
  const std::string& source_path() const {
    return source_path_;
  }

 private:
  friend std::shared_ptr<HostLibrary> LoadHostLibrary(
      const HostBuild&, const std::string&, const std::string&, size_t, size_t);
  void* handle_ = nullptr;
  std::string name_;
  std::string source_path_;
  LoadedModuleCount counted_;
};

// Compiles (or finds in the kernel cache) and loads `source`, a kernel
// library named `name`. A compile error throws with the compiler's output
// and the path of the saved source. The `prelude_size` characters from
// `prelude_begin`, shared by many kernels, are compiled once as a
// precompiled header.
std::shared_ptr<HostLibrary> LoadHostLibrary(const HostBuild& build,
                                             const std::string& source,
                                             const std::string& name,
                                             size_t prelude_begin = 0,
                                             size_t prelude_size = 0);

// How a library's `extern "C"` entry point calls a kernel whose parameters
// have `types`, each argument read from its 8-byte slot in `void** args`:
// the typedefs to put in the entry's body, and the call expression.
struct SlotCall {
  std::string typedefs;  // "  typedef <type> lf_arg<i>;\n" per parameter
  std::string call;      // "callee(*(lf_arg0*)args[0], ...)"
};
SlotCall CallFromSlots(const std::string& callee, const std::vector<std::string>& types);

}  // namespace lazyfuse
