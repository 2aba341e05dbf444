#pragma once

// Process-wide settings: which device backs the lazy device, and IR reuse.

#include <c10/core/Device.h>

namespace lazyfuse {

// LAZYFUSE_DEVICE=cpu|cuda picks the backing device; unset means cuda when a
// GPU is present, otherwise cpu. Read once, at init.
c10::Device BackingDevice();
void InitBackingDeviceFromEnv();

// LTC's IR reuse (TrieCache). Off by default; LAZYFUSE_REUSE_IR=1 turns it on.
bool ReuseIrEnabled();
void SetReuseIr(bool enabled);

// Fused CUDA kernels on the CUDA backing device. On unless LAZYFUSE_FUSION=0,
// which runs every step as its ATen call (for bisecting a wrong result).
bool FusionEnabled();

}  // namespace lazyfuse
