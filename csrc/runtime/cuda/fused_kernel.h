#pragma once

// Runs fused groups on the CUDA backing device. A FusedKernel owns one group
// of a planned Program; at launch it binds the real tensors (strides, host
// scalars, alignment) into a KernelSignature, renders and compiles the kernel
// for that signature once, and launches it on torch's current CUDA stream
// with outputs from torch's caching allocator.

#include <c10/core/Device.h>

#include <memory>
#include <mutex>
#include <vector>

#include "fusion/planner.h"
#include "kernels/codegen.h"

namespace lazyfuse {

struct KernelRecord {
  std::string name;
  std::vector<std::string> ops;
  std::string source;
};

class FusedKernel {
 public:
  FusedKernel(std::shared_ptr<const Program> program, FusionGroup group, c10::Device device);

  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs);
  // The kernels rendered so far, one per signature seen.
  std::vector<KernelRecord> Records() const;
  size_t input_count() const {
    return group_.inputs.size();
  }

 private:
  struct Variant {
    KernelSignature signature;
    KernelSource source;
    void* function = nullptr;
  };
  const Variant& VariantFor(const KernelSignature& signature);
  KernelSignature Bind(const std::vector<at::Tensor>& inputs) const;

  std::shared_ptr<const Program> program_;
  FusionGroup group_;
  c10::Device device_;
  // Per input: whether it is a program constant (written into the source).
  std::vector<bool> constant_input_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Variant>> variants_;
};

// The Program the CUDA backing device runs: every fused group of `plan`
// becomes one step that launches its kernel; ATen groups keep their step.
// `kernels` receives the FusedKernel of each fused step, for debugging.
Program BuildFusedProgram(std::shared_ptr<const Program> program,
                          const FusionPlan& plan,
                          c10::Device device,
                          std::vector<std::shared_ptr<FusedKernel>>* kernels);

}  // namespace lazyfuse
