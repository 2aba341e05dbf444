#include "runtime/cuda/kernel_cache.h"

#include <c10/util/Exception.h>
#include <sys/stat.h>
#include <torch/csrc/lazy/core/hash.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/loader.h"

namespace lazyfuse {
namespace cuda {
namespace {

constexpr char kMagic[4] = {'L', 'Z', 'F', 'K'};
constexpr uint8_t kFormat = 1;

uint64_t Fnv1a(const std::string& data) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : data) {
    hash = (hash ^ c) * 1099511628211ull;
  }
  return hash;
}

void MakeDirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at == path.size() || path[at] == '/') {
      ::mkdir(path.substr(0, at).c_str(), 0755);
    }
  }
}

std::string NvrtcError(const NvrtcApi& api, int status) {
  return std::string(api.nvrtcGetErrorString(status)) + " (" + std::to_string(status) + ")";
}

int NewestArch(const NvrtcApi& api) {
  int count = 0;
  if (api.nvrtcGetNumSupportedArchs(&count) != 0 || count <= 0) {
    return 0;
  }
  std::vector<int> archs(count);
  api.nvrtcGetSupportedArchs(archs.data());
  return archs.back();
}

// Saves a failed kernel's source where the user can read it.
std::string SaveSource(const std::string& source, const std::string& name) {
  std::string dir = KernelCacheDir();
  dir = (dir.empty() ? std::string("/tmp/lazyfuse") : dir) + "/failed";
  MakeDirs(dir);
  const std::string path =
      dir + "/" + name + "_" + torch::lazy::HashToString(torch::lazy::Hash(source)) + ".cu";
  std::ofstream(path) << source;
  return path;
}

CompiledKernel RunNvrtc(const std::string& source, const std::string& name, int sm) {
  const NvrtcApi& api = Nvrtc();
  const int newest = NewestArch(api);
  CompiledKernel out;
  out.cubin = newest == 0 || sm <= newest;
  out.target = (out.cubin ? "sm_" : "compute_") + std::to_string(out.cubin ? sm : newest);
  const std::string arch_flag = "--gpu-architecture=" + out.target;
  // 177: index variables the renderer derives but a kernel does not use.
  const char* options[] = {arch_flag.c_str(),
                           "-std=c++17",
                           "--device-as-default-execution-space",
                           "--diag-suppress=177"};
  TORCH_LAZY_TIMED("LazyFuseNvrtcCompile");
  nvrtcProgram program = nullptr;
  const std::string file = name + ".cu";
  int status = api.nvrtcCreateProgram(&program, source.c_str(), file.c_str(), 0, nullptr, nullptr);
  TORCH_CHECK(status == 0, "lazyfuse: nvrtcCreateProgram failed: ", NvrtcError(api, status));
  status = api.nvrtcCompileProgram(program, 4, options);
  size_t log_size = 0;
  api.nvrtcGetProgramLogSize(program, &log_size);
  out.log.assign(log_size, '\0');
  if (log_size > 0) {
    api.nvrtcGetProgramLog(program, out.log.data());
    out.log.resize(strnlen(out.log.c_str(), log_size));
  }
  if (status != 0) {
    api.nvrtcDestroyProgram(&program);
    TORCH_CHECK(false,
                "lazyfuse: NVRTC could not compile kernel ",
                name,
                " for ",
                out.target,
                ": ",
                NvrtcError(api, status),
                "\nsource: ",
                SaveSource(source, name),
                "\nlog:\n",
                out.log);
  }
  size_t size = 0;
  if (out.cubin) {
    api.nvrtcGetCUBINSize(program, &size);
    out.binary.resize(size);
    api.nvrtcGetCUBIN(program, out.binary.data());
  } else {
    api.nvrtcGetPTXSize(program, &size);
    out.binary.resize(size);
    api.nvrtcGetPTX(program, out.binary.data());
  }
  api.nvrtcDestroyProgram(&program);
  TORCH_LAZY_COUNTER("LazyFuseKernelsCompiled", 1);
  return out;
}

std::shared_ptr<const CompiledKernel> ReadEntry(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return nullptr;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  constexpr size_t kHeader = 4 + 1 + 1 + 8 + 8;
  if (data.size() < kHeader || std::memcmp(data.data(), kMagic, 4) != 0 ||
      static_cast<uint8_t>(data[4]) != kFormat) {
    return nullptr;
  }
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::memcpy(&size, data.data() + 6, 8);
  std::memcpy(&checksum, data.data() + 14, 8);
  if (data.size() < kHeader || data.size() - kHeader < size) {
    return nullptr;
  }
  // The target name follows the payload.
  auto entry = std::make_shared<CompiledKernel>();
  entry->binary = data.substr(kHeader, size);
  entry->target = data.substr(kHeader + size);
  entry->cubin = data[5] == 0;
  if (Fnv1a(entry->binary) != checksum || entry->target.empty()) {
    return nullptr;
  }
  return entry;
}

void WriteEntry(const std::string& path, const CompiledKernel& kernel) {
  std::string data(kMagic, 4);
  data.push_back(static_cast<char>(kFormat));
  data.push_back(kernel.cubin ? 0 : 1);
  const uint64_t size = kernel.binary.size();
  const uint64_t checksum = Fnv1a(kernel.binary);
  data.append(reinterpret_cast<const char*>(&size), 8);
  data.append(reinterpret_cast<const char*>(&checksum), 8);
  data += kernel.binary;
  data += kernel.target;
  std::random_device random;
  const std::string temp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(random());
  {
    std::ofstream out(temp, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      std::remove(temp.c_str());
      return;  // a full or read-only disk only costs a recompile next time
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
  }
}

std::mutex g_cache_mutex;

}  // namespace

int ParseArch(const std::string& arch) {
  std::string digits;
  for (char c : arch) {
    if (isdigit(c)) {
      digits += c;
    }
  }
  const bool known_prefix = arch.rfind("sm", 0) == 0 || arch.rfind("compute_", 0) == 0 ||
                            (!arch.empty() && isdigit(arch[0]));
  TORCH_CHECK(known_prefix && !digits.empty() && digits.size() <= 3,
              "lazyfuse: unknown CUDA architecture '",
              arch,
              "'; expected a name like \"sm_90\"");
  return std::stoi(digits);
}

std::string NvrtcVersion() {
  int major = 0;
  int minor = 0;
  Nvrtc().nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string KernelCacheDir() {
  if (const char* env = std::getenv("LAZYFUSE_CACHE_DIR"); env != nullptr && *env != '\0') {
    return std::string(env) == "0" ? std::string() : std::string(env);
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/lazyfuse";
  }
  const char* home = std::getenv("HOME");
  return home != nullptr ? std::string(home) + "/.cache/lazyfuse" : std::string();
}

std::shared_ptr<const CompiledKernel> CompileKernel(const std::string& source,
                                                    const std::string& name,
                                                    int sm) {
  static auto* memory =
      new std::unordered_map<std::string, std::shared_ptr<const CompiledKernel>>();
  const std::string key = torch::lazy::HashToString(torch::lazy::Hash(source)).substr(2) + "_sm" +
                          std::to_string(sm) + "_nvrtc" + NvrtcVersion();
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = memory->find(key);
    if (it != memory->end()) {
      return it->second;
    }
  }
  const std::string dir = KernelCacheDir();
  const std::string path = dir.empty() ? std::string() : dir + "/kernels/" + key + ".bin";
  std::shared_ptr<const CompiledKernel> entry = path.empty() ? nullptr : ReadEntry(path);
  if (entry) {
    TORCH_LAZY_COUNTER("LazyFuseKernelsLoadedFromDisk", 1);
  } else {
    auto compiled = std::make_shared<CompiledKernel>(RunNvrtc(source, name, sm));
    if (!path.empty()) {
      MakeDirs(dir + "/kernels");
      WriteEntry(path, *compiled);
    }
    entry = std::move(compiled);
  }
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  return memory->emplace(key, entry).first->second;
}

}  // namespace cuda
}  // namespace lazyfuse
