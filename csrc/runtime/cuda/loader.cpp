#include "runtime/cuda/loader.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace lazyfuse {
namespace cuda {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat info{};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// Matches newest first, leaving out libnvrtc-builtins.
std::vector<std::string> GlobNvrtc(const std::string& pattern) {
  std::vector<std::string> found;
  glob_t matches{};
  if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) {
      const std::string path = matches.gl_pathv[i];
      if (path.find("builtins") == std::string::npos) {
        found.push_back(path);
      }
    }
  }
  globfree(&matches);
  std::sort(found.rbegin(), found.rend());
  return found;
}

// site-packages, found from where libc10 was loaded (torch/lib/libc10.so).
std::string SitePackages() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  std::string path = info.dli_fname;
  for (int up = 0; up < 3; ++up) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) {
      return {};
    }
    path = path.substr(0, slash);
  }
  return path;
}

template <typename Fn>
void BindOptional(void* handle, const char* name, Fn& slot) {
  slot = reinterpret_cast<Fn>(dlsym(handle, name));
}

template <typename Fn>
void Bind(void* handle, const char* name, Fn& slot, std::string* missing) {
  BindOptional(handle, name, slot);
  if (slot == nullptr && missing->empty()) {
    *missing = name;
  }
}

std::mutex g_load_mutex;

}  // namespace

std::vector<std::string> NvrtcCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("LAZYFUSE_NVRTC_PATH"); env != nullptr && *env != '\0') {
    if (IsDirectory(env)) {
      for (const auto& path : GlobNvrtc(std::string(env) + "/libnvrtc.so*")) {
        out.push_back(path);
      }
    } else {
      out.emplace_back(env);
    }
  }
  const std::string site = SitePackages();
  if (!site.empty()) {
    for (const auto& path : GlobNvrtc(site + "/nvidia/*/lib/libnvrtc.so*")) {
      out.push_back(path);
    }
  }
  const char* home = std::getenv("CUDA_HOME");
  home = home != nullptr ? home : std::getenv("CUDA_PATH");
  const std::string cuda_home = home != nullptr ? home : "/usr/local/cuda";
  for (const auto& path : GlobNvrtc(cuda_home + "/lib64/libnvrtc.so*")) {
    out.push_back(path);
  }
  for (const char* name : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}) {
    out.emplace_back(name);
  }
  return out;
}

const NvrtcApi* TryNvrtc(std::string* why) {
  static NvrtcApi api;
  static bool loaded = false;
  static std::string failure;
  std::lock_guard<std::mutex> lock(g_load_mutex);
  if (!loaded && failure.empty()) {
    std::string tried;
    for (const auto& candidate : NvrtcCandidates()) {
      void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        tried += "\n  " + candidate;
        continue;
      }
      std::string missing;
      Bind(handle, "nvrtcVersion", api.nvrtcVersion, &missing);
      Bind(handle, "nvrtcGetErrorString", api.nvrtcGetErrorString, &missing);
      Bind(handle, "nvrtcCreateProgram", api.nvrtcCreateProgram, &missing);
      Bind(handle, "nvrtcCompileProgram", api.nvrtcCompileProgram, &missing);
      Bind(handle, "nvrtcDestroyProgram", api.nvrtcDestroyProgram, &missing);
      Bind(handle, "nvrtcGetProgramLogSize", api.nvrtcGetProgramLogSize, &missing);
      Bind(handle, "nvrtcGetProgramLog", api.nvrtcGetProgramLog, &missing);
      Bind(handle, "nvrtcGetCUBINSize", api.nvrtcGetCUBINSize, &missing);
      Bind(handle, "nvrtcGetCUBIN", api.nvrtcGetCUBIN, &missing);
      Bind(handle, "nvrtcGetPTXSize", api.nvrtcGetPTXSize, &missing);
      Bind(handle, "nvrtcGetPTX", api.nvrtcGetPTX, &missing);
      Bind(handle, "nvrtcGetNumSupportedArchs", api.nvrtcGetNumSupportedArchs, &missing);
      Bind(handle, "nvrtcGetSupportedArchs", api.nvrtcGetSupportedArchs, &missing);
      if (!missing.empty()) {
        tried += "\n  " + candidate + " (lacks " + missing + ")";
        dlclose(handle);
        continue;
      }
      api.path = candidate;
      loaded = true;
      break;
    }
    if (!loaded) {
      failure = "libnvrtc was not found; tried:" + tried +
                "\nInstall it with `pip install nvidia-cuda-nvrtc` or set LAZYFUSE_NVRTC_PATH.";
    }
  }
  if (!loaded && why != nullptr) {
    *why = failure;
  }
  return loaded ? &api : nullptr;
}

const NvrtcApi& Nvrtc() {
  std::string why;
  const NvrtcApi* api = TryNvrtc(&why);
  TORCH_CHECK(api != nullptr, "lazyfuse: ", why);
  return *api;
}

const DriverApi& Driver() {
  static DriverApi api;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    void* handle = nullptr;
    for (const char* name : {"libcuda.so.1", "libcuda.so"}) {
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        api.path = name;
        break;
      }
    }
    if (handle == nullptr) {
      failure = "libcuda.so.1 (the CUDA driver) was not found; fused CUDA kernels need a GPU";
      return;
    }
    std::string missing;
    Bind(handle, "cuInit", api.cuInit, &missing);
    Bind(handle, "cuGetErrorString", api.cuGetErrorString, &missing);
    Bind(handle, "cuDeviceGet", api.cuDeviceGet, &missing);
    Bind(handle, "cuDeviceGetAttribute", api.cuDeviceGetAttribute, &missing);
    Bind(handle, "cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain, &missing);
    Bind(handle, "cuCtxGetCurrent", api.cuCtxGetCurrent, &missing);
    Bind(handle, "cuCtxSetCurrent", api.cuCtxSetCurrent, &missing);
    Bind(handle, "cuModuleLoadData", api.cuModuleLoadData, &missing);
    Bind(handle, "cuModuleUnload", api.cuModuleUnload, &missing);
    Bind(handle, "cuModuleGetFunction", api.cuModuleGetFunction, &missing);
    Bind(handle, "cuLaunchKernel", api.cuLaunchKernel, &missing);
    if (!missing.empty()) {
      failure = "the CUDA driver at " + api.path + " lacks " + missing;
      return;
    }
    BindOptional(handle,
                 "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                 api.cuOccupancyMaxActiveBlocksPerMultiprocessor);
    const int status = api.cuInit(0);
    if (status != 0) {
      failure = "cuInit failed with CUDA driver error " + std::to_string(status);
    }
  });
  TORCH_CHECK(failure.empty(), "lazyfuse: ", failure);
  return api;
}

}  // namespace cuda
}  // namespace lazyfuse
