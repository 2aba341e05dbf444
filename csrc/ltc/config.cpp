#include "ltc/config.h"

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/config.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

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

// A device index written as up to three digits, or -1.
int DeviceIndexFrom(const std::string& digits) {
  const bool valid = !digits.empty() && digits.size() <= 3 &&
                     digits.find_first_not_of("0123456789") == std::string::npos;
  return valid ? std::stoi(digits) : -1;
}

// torchrun starts one process per GPU and names its GPU in LOCAL_RANK; a
// process started otherwise uses the current device (torch.cuda.set_device
// before the import picks it).
c10::Device DefaultCudaDevice() {
  const auto* guard = c10::impl::getDeviceGuardImpl(c10::kCUDA);
  const char* local_rank = std::getenv("LOCAL_RANK");
  const int index = DeviceIndexFrom(local_rank ? local_rank : "");
  if (index >= 0 && index < guard->deviceCount()) {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return c10::Device(c10::kCUDA, guard->getDevice().index());
}

// The N of "cuda:N", checked before CUDA is looked for.
int CudaIndexNamed(const std::string& name) {
  const int index = DeviceIndexFrom(name.substr(5));
  TORCH_CHECK(index >= 0,
              "lazyfuse: LAZYFUSE_DEVICE=",
              name,
              " does not name a CUDA device; write cuda:N, N a device index");
  return index;
}

c10::Device CudaDevice(const std::string& name, int index) {
  const int count = c10::impl::getDeviceGuardImpl(c10::kCUDA)->deviceCount();
  TORCH_CHECK(index < count,
              "lazyfuse: LAZYFUSE_DEVICE=",
              name,
              ", but this machine has ",
              count,
              " CUDA device",
              count == 1 ? "" : "s");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
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
    g_backing_device = gpu ? DefaultCudaDevice() : c10::Device(c10::kCPU);
  } else if (choice == "cpu") {
    g_backing_device = c10::Device(c10::kCPU);
  } else if (choice == "cuda" || choice.rfind("cuda:", 0) == 0) {
    const int index = choice == "cuda" ? -1 : CudaIndexNamed(choice);
    TORCH_CHECK(at::hasCUDA(),
                "lazyfuse: LAZYFUSE_DEVICE=",
                choice,
                ", but this torch build or machine has no CUDA device");
    g_backing_device = index < 0 ? DefaultCudaDevice() : CudaDevice(choice, index);
  } else {
    TORCH_CHECK(
        false, "lazyfuse: LAZYFUSE_DEVICE must be 'cpu', 'cuda' or 'cuda:N', got '", choice, "'");
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
  const char* cpu_kernels = std::getenv("LAZYFUSE_CPU_KERNELS");
  settings.cpu_kernels = cpu_kernels == nullptr || std::string(cpu_kernels) != "0";
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
  return (static_cast<uint64_t>(s.cpu_kernels) << 2 | static_cast<uint64_t>(s.emulate_cuda) << 1 |
          static_cast<uint64_t>(s.strict)) ^
         (static_cast<uint64_t>(s.emulated_block) << 8) ^
         (static_cast<uint64_t>(s.emulated_grid) << 24);
}

bool FusedKernelsEnabled() {
  return FusionEnabled() && (g_backing_device.is_cuda() || g_kernel_settings.emulate_cuda ||
                             g_kernel_settings.cpu_kernels);
}

bool FusionEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("LAZYFUSE_FUSION");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

bool TransposedMatmulsEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("LAZYFUSE_TRANSPOSED_MATMULS");
    return env == nullptr || std::string(env) != "0";
  }();
  return enabled;
}

namespace {
std::atomic<bool> g_donation{[] {
  const char* env = std::getenv("LAZYFUSE_DONATE");
  return env == nullptr || std::string(env) != "0";
}()};
}  // namespace

bool DonationEnabled() {
  return g_donation.load(std::memory_order_relaxed);
}

void SetDonation(bool enabled) {
  g_donation.store(enabled, std::memory_order_relaxed);
}

namespace {
// On unless LAZYFUSE_ASYNC=0, where the next step's trace has a core of its
// own to run on beside the graph: on one core they would only take turns.
std::atomic<bool> g_async_execution{[] {
  if (const char* env = std::getenv("LAZYFUSE_ASYNC")) {
    return std::string(env) != "0";
  }
  return std::thread::hardware_concurrency() >= 2;
}()};
}  // namespace

bool AsyncExecutionEnabled() {
  return g_async_execution.load(std::memory_order_relaxed);
}

void SetAsyncExecution(bool enabled) {
  g_async_execution.store(enabled, std::memory_order_relaxed);
}

bool ReuseIrEnabled() {
  return FLAGS_torch_lazy_reuse_ir;
}

void SetReuseIr(bool enabled) {
  FLAGS_torch_lazy_reuse_ir = enabled;
}

}  // namespace lazyfuse
