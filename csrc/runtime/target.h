#pragma once

// Where fused kernels run. A KernelTarget compiles (through the kernel
// cache), loads and launches rendered kernels on one kind of device: a CUDA
// GPU (runtime/cuda), or the CPU running the same CUDA source under emulation
// (runtime/emulated). Everything else on the way to a launch, binding,
// parameter packing and the launch configuration, is shared (FusedKernel).

#include <ATen/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/dialect.h"
#include "kernels/signature.h"

namespace lazyfuse {

// A kernel argument by value: an 8-byte slot, read at the C type of the
// kernel parameter.
union ArgSlot {
  void* pointer;
  double f64;
  float f32;
  long long i64;
  unsigned long long u64;
  int i32;
  unsigned int u32;
  short i16;
  signed char i8;
  unsigned char u8;
  bool b;
};

// What the launch configuration depends on besides the kernel.
struct LaunchLimits {
  int processors = 1;  // streaming multiprocessors
  int block = 0;       // threads per block; 0 keeps the kernel's own choice
  int max_grid = 0;    // most blocks in a grid; 0 means no cap
};

struct LaunchConfig {
  int64_t grid = 1;
  int64_t block = 1;
};

LaunchConfig ComputeLaunch(const KernelSource& source, const LaunchLimits& limits);

// A compiled kernel, loaded and ready to launch.
class LoadedKernel {
 public:
  virtual ~LoadedKernel() = default;
};

// The tensors of one launch, for targets that check memory accesses.
struct LaunchTensors {
  const std::vector<at::Tensor>& inputs;  // host scalars and constants included
  const std::vector<at::Tensor>& outputs;
  // Scratch the kernel both writes and reads (a split reduction's partials
  // and counters).
  const std::vector<at::Tensor>& workspace;
};

class KernelTarget {
 public:
  virtual ~KernelTarget() = default;

  virtual const KernelDialect& dialect() const = 0;
  virtual c10::Device device() const = 0;
  virtual LaunchLimits limits() = 0;

  // Compiles (or finds in the kernel cache) and loads `source`.
  virtual std::shared_ptr<LoadedKernel> Load(const KernelSource& source) = 0;
  // Whether LoadBatch beats loading each kernel at its first launch, so a
  // Program's kernels are better loaded together before its first run.
  virtual bool batches() const {
    return false;
  }
  // Loads every source, in order: by default, Load on each, side by side
  // (ForEachInParallel). A source that fails gives nullptr; it compiles
  // again at its launch, which reports the error. A target may instead
  // compile all of them at once, and throw if that fails.
  virtual std::vector<std::shared_ptr<LoadedKernel>> LoadBatch(
      const std::vector<KernelSource>& sources);
  // An output buffer of the kernel; uninitialised.
  virtual at::Tensor NewOutput(const std::vector<int64_t>& sizes, at::ScalarType dtype) = 0;
  // `params` points at one 8-byte slot per kernel parameter, in order.
  virtual void Launch(const LoadedKernel& kernel,
                      const KernelSource& source,
                      const LaunchConfig& config,
                      void** params,
                      const LaunchTensors& tensors) = 0;
};

}  // namespace lazyfuse
