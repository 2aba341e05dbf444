#pragma once

// LAZYFUSE_DEBUG=3: a line per fused kernel launch with the bytes it moved,
// its time and its bandwidth, as tinygrad's debug levels show every kernel,
// so a slow kernel is found by reading rather than by a profiler. The
// launch is timed alone: the device's queue is drained before and after.

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

#include "kernels/codegen.h"

namespace lazyfuse {

// Waits for the work queued on `device` (a no-op on the CPU).
void WaitForDevice(const c10::Device& device);

// Prints the launch of `source` that read `inputs` (each counted by the
// bytes its elements span, so a broadcast is read once) and wrote
// `outputs` in `seconds`.
void PrintLaunch(const KernelSource& source,
                 bool generic,
                 const std::vector<at::Tensor>& inputs,
                 const std::vector<at::Tensor>& outputs,
                 double seconds);

}  // namespace lazyfuse
