#pragma once

// Process-wide settings: which device backs the lazy device, and IR reuse.

#include <c10/core/Device.h>

namespace lazyfuse {

// LAZYFUSE_DEVICE=cpu|cuda picks the backing device; unset means cuda when a
// GPU is present, otherwise cpu. Read once, at init.
c10::Device BackingDevice();
void InitBackingDeviceFromEnv();

// LTC's IR reuse (TrieCache). On by default; LAZYFUSE_REUSE_IR=0 turns it off.
bool ReuseIrEnabled();
void SetReuseIr(bool enabled);

// Fused CUDA kernels on the CUDA backing device. On unless LAZYFUSE_FUSION=0,
// which runs every step as its ATen call (for bisecting a wrong result).
bool FusionEnabled();

// How fused kernels run. LAZYFUSE_EMULATE_CUDA=1 runs them on the CPU backing
// device as the same CUDA source, emulated (runtime/emulated), with
// LAZYFUSE_EMULATE_BLOCK threads per block (default 32) and at most
// LAZYFUSE_EMULATE_GRID blocks (default 3). LAZYFUSE_STRICT_KERNELS=1 makes a
// kernel that fails to compile, load or launch an error instead of a
// fallback to its ATen steps. Read at init; the setters serve tests.
struct KernelSettings {
  bool emulate_cuda = false;
  int emulated_block = 32;
  int emulated_grid = 3;
  bool strict = false;
  // Fused kernels on the CPU backing device as native host code (the CPU
  // target); emulate_cuda takes precedence. Off when no host compiler exists.
  bool cpu_kernels = true;
};
const KernelSettings& GetKernelSettings();
void SetKernelSettings(const KernelSettings& settings);
// Graphs compiled under different settings must not share a cache entry.
uint64_t KernelSettingsHash();
// Whether compiled graphs get fused kernels: on the CUDA backing device, or
// on the CPU as native CPU kernels or under CUDA emulation.
bool FusedKernelsEnabled();

// Matmuls every reader transposes are computed transposed
// (fusion/transposed_matmuls.h). On unless LAZYFUSE_TRANSPOSED_MATMULS=0
// (to bisect a wrong result, or to time the rewrite). Read once.
bool TransposedMatmulsEnabled();

// Buffer donation: at mark_step, a fused kernel or a pointwise ATen step may
// write a result into the memory of a parameter nothing else will read, so
// optimizer steps update in place. On unless LAZYFUSE_DONATE=0; the setter serves tests.
bool DonationEnabled();
void SetDonation(bool enabled);

// Asynchronous execution on the CPU backing device: mark_step hands the
// graph to the CPU stream and returns, so the next step traces while it runs
// (ltc/pending_run.h). On unless LAZYFUSE_ASYNC=0, or on one core; a failure
// then surfaces at the next read, mark_step or wait_device_ops, as on a GPU.
bool AsyncExecutionEnabled();
void SetAsyncExecution(bool enabled);

}  // namespace lazyfuse
