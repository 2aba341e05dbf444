#include "ltc/config.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/config.h>

#include <cstdlib>
#include <string>

namespace lazyfuse {
namespace {

c10::Device g_backing_device(c10::kCPU);

}  // namespace

c10::Device BackingDevice() {
  return g_backing_device;
}

void InitBackingDeviceFromEnv() {
  const char* env = std::getenv("LAZYFUSE_DEVICE");
  const std::string choice = env ? env : "";
  if (choice.empty()) {
    g_backing_device = at::hasCUDA() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
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
