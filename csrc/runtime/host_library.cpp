#include "runtime/emulated/host_compiler.h"

#include <c10/util/Exception.h>
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
namespace emulated {
namespace {

// The dialect NVRTC compiles (C++17); -O1 keeps compiles short and loops
// fast enough for the small tensors emulation runs on.
// -fwrapv: signed integers wrap on a GPU (and in eager's kernels); without
// it the host compiler may assume int64 overflow never happens.
constexpr const char* kFlags = "-std=c++17 -O1 -shared -fPIC -w -fwrapv";

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
  const std::string dir = KernelScratchDir("emulated/build");
  const std::string out = dir + "/version." + std::to_string(::getpid());
  RunShell(Quote(path) + " --version > " + Quote(out) + " 2>&1");
  std::string text = ReadFile(out);
  std::remove(out.c_str());
  return text.substr(0, text.find('\n'));
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
        continue;
      }
      compiler = new HostCompiler();
      compiler->path = path;
      compiler->version = VersionOf(path);
      compiler->flags = kFlags;
      compiler->cache_key =
          "emu" + torch::lazy::HashToString(
                      torch::lazy::Hash(path + "\n" + compiler->version + "\n" + compiler->flags))
                      .substr(2, 16);
      return;
    }
    reason = "no host C++ compiler found (tried $LAZYFUSE_EMULATE_CXX, $CXX, c++, g++, clang++)";
  });
  if (why != nullptr) {
    *why = reason;
  }
  return compiler;
}

CompiledKernel CompileSharedLibrary(const HostCompiler& compiler,
                                    const std::string& source,
                                    const std::string& name) {
  TORCH_LAZY_TIMED("LazyFuseHostCompile");
  const std::string source_path = SaveKernelSource(source, name, "emulated/src", ".cpp");
  std::string dir = KernelScratchDir("emulated/build") + "/" + name + ".XXXXXX";
  TORCH_CHECK(::mkdtemp(dir.data()) != nullptr,
              "lazyfuse: cannot make a build directory for emulated kernel ",
              name);
  const std::string library = dir + "/kernel.so";
  const std::string log_path = dir + "/log.txt";
  const int status =
      RunShell(Quote(compiler.path) + " " + compiler.flags + " -o " + Quote(library) + " " +
               Quote(source_path) + " > " + Quote(log_path) + " 2>&1");
  CompiledKernel out;
  out.target = "host";
  out.cubin = true;
  out.log = ReadFile(log_path);
  if (status == 0) {
    out.binary = ReadFile(library);
  }
  std::remove(library.c_str());
  std::remove(log_path.c_str());
  ::rmdir(dir.c_str());
  TORCH_CHECK(status == 0 && !out.binary.empty(),
              "lazyfuse: ",
              compiler.path,
              " could not compile emulated kernel ",
              name,
              " (exit ",
              status,
              ")\nsource: ",
              source_path,
              "\nlog:\n",
              out.log.substr(0, 4000));
  return out;
}

}  // namespace emulated
}  // namespace lazyfuse
