#include "runtime/host_library.h"

#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/csrc/lazy/core/hash.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

extern char** environ;

namespace lazyfuse {
namespace {

std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

// Runs `command` with /bin/sh; returns its exit status.
int RunShell(const std::string& command) {
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) {
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string OnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return ::access(name.c_str(), X_OK) == 0 ? name : std::string();
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::string();
}

std::string VersionOf(const std::string& path) {
  const std::string dir = KernelScratchDir("host/build");
  const std::string out = dir + "/version." + std::to_string(::getpid());
  RunShell(Quote(path) + " --version > " + Quote(out) + " 2>&1");
  std::string text = ReadFile(out);
  std::remove(out.c_str());
  return text.substr(0, text.find('\n'));
}

// The first model name and flags lines of /proc/cpuinfo: what -march=native
// compiles for.
std::string MachineIsa() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::string isa;
  bool model = false;
  bool flags = false;
  while (std::getline(in, line) && !(model && flags)) {
    if (!model && line.rfind("model name", 0) == 0) {
      isa += line + "\n";
      model = true;
    } else if (!flags && (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0)) {
      isa += line + "\n";
      flags = true;
    }
  }
  return isa;
}

// The directory holding `prelude` as a precompiled header (lf_prelude.h and
// its .gch), made once per prelude, compiler and flags; "" when it cannot be
// made, and the kernel then parses the prelude itself.
std::string PrecompiledPrelude(const HostCompiler& compiler,
                               const HostBuild& build,
                               const std::string& prelude) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const std::string key =
      torch::lazy::HashToString(torch::lazy::Hash(compiler.path + "\n" + compiler.version + "\n" +
                                                  build.flags + "\n" + prelude))
          .substr(2, 16);
  const std::string dir = KernelScratchDir(build.subdir + "/pch/" + key);
  const std::string header = dir + "/lf_prelude.h";
  if (::access((header + ".gch").c_str(), R_OK) == 0) {
    return dir;
  }
  const std::string temp = header + ".tmp." + std::to_string(::getpid());
  std::ofstream(temp, std::ios::binary) << prelude;
  std::rename(temp.c_str(), header.c_str());
  const std::string gch = header + ".gch.tmp." + std::to_string(::getpid());
  const int status =
      RunShell(Quote(compiler.path) + " " + build.flags + " -fPIC -x c++-header -o " + Quote(gch) +
               " " + Quote(header) + " > /dev/null 2>&1");
  if (status != 0) {
    std::remove(gch.c_str());
    return "";
  }
  std::rename(gch.c_str(), (header + ".gch").c_str());
  return dir;
}

CompiledKernel CompileSharedLibrary(const HostCompiler& compiler,
                                    const HostBuild& build,
                                    const std::string& source,
                                    const std::string& name,
                                    size_t prelude_begin,
                                    size_t prelude_size) {
  TORCH_LAZY_TIMED("LazyFuseHostCompile");
  const std::string source_path = SaveKernelSource(source, name, build.subdir + "/src", ".cpp");
  std::string dir = KernelScratchDir(build.subdir + "/build") + "/" + name + ".XXXXXX";
  TORCH_CHECK(::mkdtemp(dir.data()) != nullptr,
              "lazyfuse: cannot make a build directory for kernel ",
              name);
  std::string compiled_path = source_path;
  std::string include;
  const std::string pch =
      prelude_size > 0
          ? PrecompiledPrelude(compiler, build, source.substr(prelude_begin, prelude_size))
          : "";
  if (!pch.empty()) {
    compiled_path = dir + "/kernel.cpp";
    std::ofstream(compiled_path, std::ios::binary)
        << source.substr(0, prelude_begin) << "#include \"lf_prelude.h\"\n"
        << source.substr(prelude_begin + prelude_size);
    include = " -I " + Quote(pch);
  }
  const std::string library = dir + "/kernel.so";
  const std::string log_path = dir + "/log.txt";
  const auto compile = [&](const std::string& flags, const std::string& path) {
    return RunShell(Quote(compiler.path) + " " + build.flags + flags + " -shared -fPIC -o " +
                    Quote(library) + " " + Quote(path) + " " + build.libraries + " > " +
                    Quote(log_path) + " 2>&1");
  };
  int status = compile(include, compiled_path);
  if (status != 0 && !pch.empty()) {
    // A precompiled prelude left damaged in the cache (a full disk, a copy
    // cut short) would fail every kernel from then on: it is dropped, to be
    // built again, and this kernel compiles from its whole source.
    std::remove((pch + "/lf_prelude.h.gch").c_str());
    status = compile("", source_path);
  }
  CompiledKernel out;
  out.target = "host";
  out.cubin = true;
  out.log = ReadFile(log_path);
  if (status == 0) {
    out.binary = ReadFile(library);
  }
  std::remove(library.c_str());
  std::remove(log_path.c_str());
  if (compiled_path != source_path) {
    std::remove(compiled_path.c_str());
  }
  ::rmdir(dir.c_str());
  TORCH_CHECK(status == 0 && !out.binary.empty(),
              "lazyfuse: ",
              compiler.path,
              " could not compile kernel ",
              name,
              " (exit ",
              status,
              ")\nsource: ",
              source_path,
              "\nlog:\n",
              out.log.substr(0, 4000));
  return out;
}

const HostCompiler& CompilerOrThrow() {
  std::string why;
  const HostCompiler* compiler = FindHostCompiler(&why);
  TORCH_CHECK(compiler != nullptr, "lazyfuse: host-compiled kernels need a C++ compiler: ", why);
  return *compiler;
}

}  // namespace

const HostCompiler* FindHostCompiler(std::string* why) {
  static std::once_flag once;
  static HostCompiler* compiler = nullptr;
  static std::string reason;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    for (const char* env : {"LAZYFUSE_EMULATE_CXX", "CXX"}) {
      if (const char* value = std::getenv(env); value != nullptr && *value != '\0') {
        candidates.emplace_back(value);
      }
    }
    candidates.insert(candidates.end(), {"c++", "g++", "clang++"});
    for (const std::string& name : candidates) {
      const std::string path = OnPath(name);
      if (path.empty()) {
        const char* chosen = std::getenv("LAZYFUSE_EMULATE_CXX");
        if (chosen != nullptr && name == chosen) {
          TORCH_WARN("lazyfuse: LAZYFUSE_EMULATE_CXX=",
                     name,
                     " is not a compiler on PATH or an executable file; trying $CXX, c++, g++ "
                     "and clang++ instead.");
        }
        continue;
      }
      compiler = new HostCompiler();
      compiler->path = path;
      compiler->version = VersionOf(path);
      return;
    }
    reason = "no host C++ compiler found (tried $LAZYFUSE_EMULATE_CXX, $CXX, c++, g++, clang++)";
  });
  if (why != nullptr) {
    *why = reason;
  }
  return compiler;
}

bool HostCompilerAvailable(std::string* description_or_why) {
  std::string why;
  const HostCompiler* compiler = FindHostCompiler(&why);
  if (description_or_why != nullptr) {
    *description_or_why =
        compiler != nullptr ? compiler->path + " (" + compiler->version + ")" : why;
  }
  return compiler != nullptr;
}

HostLibrary::~HostLibrary() {
  if (handle_ != nullptr) {
    ::dlclose(handle_);
  }
}

void* HostLibrary::Symbol(const char* symbol) const {
  void* address = ::dlsym(handle_, symbol);
  TORCH_CHECK(address != nullptr, "lazyfuse: kernel library ", name_, " has no ", symbol);
  return address;
}

std::shared_ptr<HostLibrary> LoadHostLibrary(const HostBuild& build,
                                             const std::string& source,
                                             const std::string& name,
                                             size_t prelude_begin,
                                             size_t prelude_size) {
  static auto* loaded = new ModuleRegistry<HostLibrary>();
  const HostCompiler& compiler = CompilerOrThrow();
  static const std::string isa = MachineIsa();
  const std::string key =
      build.subdir +
      torch::lazy::HashToString(torch::lazy::Hash(compiler.path + "\n" + compiler.version + "\n" +
                                                  build.flags + "\n" + build.libraries + "\n" +
                                                  (build.native ? isa : "")))
          .substr(2, 16);
  auto compiled = CachedCompile(source, key, [&] {
    return CompileSharedLibrary(compiler, build, source, name, prelude_begin, prelude_size);
  });
  const std::string hash = torch::lazy::HashToString(torch::lazy::Hash(compiled->binary)).substr(2);
  return loaded->GetOrLoad(hash, [&] {
    // dlopen needs a file: written once, beside the kernel sources.
    const std::string path = KernelScratchDir(build.subdir + "/lib") + "/" + hash + ".so";
    // A file cut short by an earlier run (a full disk, a copy of the cache)
    // would fault inside dlopen: one whose bytes differ is written again.
    if (ReadFile(path) != compiled->binary) {
      const std::string temp = path + ".tmp." + std::to_string(::getpid());
      std::ofstream(temp, std::ios::binary)
          .write(compiled->binary.data(), static_cast<std::streamsize>(compiled->binary.size()));
      std::rename(temp.c_str(), path.c_str());
    }
    auto library = std::make_shared<HostLibrary>();
    library->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(library->handle_ != nullptr,
                "lazyfuse: cannot load kernel ",
                name,
                " from ",
                path,
                ": ",
                ::dlerror());
    library->name_ = name;
    library->source_path_ = SaveKernelSource(source, name, build.subdir + "/src", ".cpp");
    return library;
  });
}

SlotCall CallFromSlots(const std::string& callee, const std::vector<std::string>& types) {
  SlotCall slot_call;
  slot_call.call = callee + "(";
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string arg = "lf_arg" + std::to_string(i);
    slot_call.typedefs += "  typedef " + types[i] + " " + arg + ";\n";
    slot_call.call += (i ? ", *(" : "*(") + arg + "*)args[" + std::to_string(i) + "]";
  }
  slot_call.call += ")";
  return slot_call;
}

}  // namespace lazyfuse
