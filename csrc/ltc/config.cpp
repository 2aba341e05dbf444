#include "ltc/config.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/config.h>

#include <cstdlib>
#include <string>

namespace lazyfuse {
namespace {

c10::Device g_backing_device(c10::kCPU);
KernelSettings g_kernel_settings;

int IntFromEnv(const char* name, int fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') {
    return fallback;
  }
  try {
    return std::stoi(env);
  } catch (const std::exception&) {
    TORCH_CHECK(false, "lazyfuse: ", name, " must be an integer, got '", env, "'");
  }
}

bool FlagFromEnv(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

}  // namespace

c10::Device BackingDevice() {
  return g_backing_device;
}

void InitBackingDeviceFromEnv() {
  const char* env = std::getenv("LAZYFUSE_DEVICE");
  const std::string choice = env ? env : "";
  if (choice.empty()) {
    // Emulating CUDA means running its kernels on the CPU, GPU or not.
    const bool gpu = at::hasCUDA() && !FlagFromEnv("LAZYFUSE_EMULATE_CUDA");
    g_backing_device = gpu ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  } else if (choice == "cpu") {
    g_backing_device = c10::Device(c10::kCPU);
  } else if (choice == "cuda") {
    TORCH_CHECK(
        at::hasCUDA(),
        "lazyfuse: LAZYFUSE_DEVICE=cuda, but this torch build or machine has no CUDA device");
    g_backing_device = c10::Device(c10::kCUDA, 0);
  } else {
    TORCH_CHECK(false, "lazyfuse: LAZYFUSE_DEVICE must be 'cpu' or 'cuda', got '", choice, "'");
  }
  // On unless turned off: tracing a step that repeats then recycles the IR
  // nodes of the last one instead of building new ones.
  const char* reuse = std::getenv("LAZYFUSE_REUSE_IR");
  SetReuseIr(reuse == nullptr || std::string(reuse) != "0");
  KernelSettings settings;
  settings.emulate_cuda = FlagFromEnv("LAZYFUSE_EMULATE_CUDA");
  settings.emulated_block = IntFromEnv("LAZYFUSE_EMULATE_BLOCK", settings.emulated_block);
  settings.emulated_grid = IntFromEnv("LAZYFUSE_EMULATE_GRID", settings.emulated_grid);
  settings.strict = FlagFromEnv("LAZYFUSE_STRICT_KERNELS");
  SetKernelSettings(settings);
}

const KernelSettings& GetKernelSettings() {
  return g_kernel_settings;
}

void SetKernelSettings(const KernelSettings& settings) {
  TORCH_CHECK(settings.emulated_block > 0 && settings.emulated_block % 32 == 0 &&
                  settings.emulated_block <= 1024,
              "lazyfuse: the emulated block size must be a multiple of 32 up to 1024, got ",
              settings.emulated_block);
  TORCH_CHECK(settings.emulated_grid > 0,
              "lazyfuse: the emulated grid must have at least one block, got ",
              settings.emulated_grid);
  TORCH_CHECK(!settings.emulate_cuda || !g_backing_device.is_cuda(),
              "lazyfuse: CUDA emulation runs on the CPU backing device; this process backs the "
              "lazy device with ",
              g_backing_device,
              " (set LAZYFUSE_DEVICE=cpu)");
  g_kernel_settings = settings;
}

uint64_t KernelSettingsHash() {
  const KernelSettings& s = g_kernel_settings;
  return (static_cast<uint64_t>(s.emulate_cuda) << 1 | static_cast<uint64_t>(s.strict)) ^
         (static_cast<uint64_t>(s.emulated_block) << 8) ^
         (static_cast<uint64_t>(s.emulated_grid) << 24);
}

bool FusedKernelsEnabled() {
  return FusionEnabled() && (g_backing_device.is_cuda() || g_kernel_settings.emulate_cuda);
}

bool FusionEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("LAZYFUSE_FUSION");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

bool ReuseIrEnabled() {
  return FLAGS_torch_lazy_reuse_ir;
}

void SetReuseIr(bool enabled) {
  FLAGS_torch_lazy_reuse_ir = enabled;
}

}  // namespace lazyfuse
