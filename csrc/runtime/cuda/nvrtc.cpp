#include "runtime/cuda/nvrtc.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/hash.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda/loader.h"

namespace lazyfuse {
namespace cuda {
namespace {

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

// The options every kernel compiles with beside its architecture; the
// kernel cache's key names them. 177: index variables the renderer derives
// but a kernel does not use. --fmad=false: no contraction of a * b + c into
// one rounding (NVRTC's default), since eager runs each op as its own kernel
// and rounds each, and the emulator's host build rounds each too, so an
// emulated run predicts a GPU run's values.
const std::vector<std::string>& KernelOptions() {
  static const std::vector<std::string> options{
      "-std=c++17", "--device-as-default-execution-space", "--diag-suppress=177", "--fmad=false"};
  return options;
}

CompiledKernel RunNvrtc(const std::string& source, const std::string& name, int sm) {
  const NvrtcApi& api = Nvrtc();
  const int newest = NewestArch(api);
  CompiledKernel out;
  out.cubin = newest == 0 || sm <= newest;
  out.target = (out.cubin ? "sm_" : "compute_") + std::to_string(out.cubin ? sm : newest);
  const std::string arch_flag = "--gpu-architecture=" + out.target;
  std::vector<const char*> options{arch_flag.c_str()};
  for (const std::string& option : KernelOptions()) {
    options.push_back(option.c_str());
  }
  TORCH_LAZY_TIMED("LazyFuseNvrtcCompile");
  nvrtcProgram program = nullptr;
  const std::string file = name + ".cu";
  int status = api.nvrtcCreateProgram(&program, source.c_str(), file.c_str(), 0, nullptr, nullptr);
  TORCH_CHECK(status == 0, "lazyfuse: nvrtcCreateProgram failed: ", NvrtcError(api, status));
  status = api.nvrtcCompileProgram(program, static_cast<int>(options.size()), options.data());
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
                SaveKernelSource(source, name, "failed", ".cu"),
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
  return out;
}

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

std::shared_ptr<const CompiledKernel> CompileKernel(const std::string& source,
                                                    const std::string& name,
                                                    int sm) {
  static const std::string options_hash = [] {
    std::string joined;
    for (const std::string& option : KernelOptions()) {
      joined += option + " ";
    }
    return torch::lazy::HashToString(torch::lazy::Hash(joined)).substr(2, 8);
  }();
  return CachedCompile(source,
                       "sm" + std::to_string(sm) + "_nvrtc" + NvrtcVersion() + "_" + options_hash,
                       [&] { return RunNvrtc(source, name, sm); });
}

}  // namespace cuda
}  // namespace lazyfuse
