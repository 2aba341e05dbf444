#pragma once

// Process-wide settings: which device backs the lazy device, and IR reuse.

#include <c10/core/Device.h>

namespace lazyfuse {

// LAZYFUSE_DEVICE=cpu|cuda picks the backing device; unset means cuda when a
// GPU is present, otherwise cpu. Read once, at init.
c10::Device BackingDevice();
void InitBackingDeviceFromEnv();

// LTC's IR reuse (TrieCache). LAZYFUSE_REUSE_IR=0 turns it off at init.
bool ReuseIrEnabled();
void SetReuseIr(bool enabled);

}  // namespace lazyfuse
