#pragma once

// The CUDA kernel target: NVRTC compiles (runtime/cuda/nvrtc), the driver
// loads the module and launches on torch's current stream for the device.

#include <c10/core/Device.h>

#include <memory>

#include "runtime/target.h"

namespace lazyfuse {

std::shared_ptr<KernelTarget> MakeCudaTarget(c10::Device device);

}  // namespace lazyfuse
