#pragma once

// Runs fused groups on a KernelTarget. A FusedKernel owns one group of a
// planned Program; at launch it binds the real tensors (strides, host
// scalars, alignment) into a KernelSignature, renders and loads the kernel
// for that signature once, allocates its outputs and launches it. A kernel
// that fails to compile, load or launch runs the group's own ATen steps
// instead, warned once and counted (LazyFuseKernelFallbacks), unless the
// kernels are strict, when the failure raises.

#include <c10/core/Device.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "fusion/planner.h"
#include "kernels/codegen.h"
#include "runtime/generic_kernels.h"
#include "runtime/target.h"
#include "runtime/view_group.h"

namespace lazyfuse {

struct KernelRecord {
  std::string name;
  std::vector<std::string> ops;
  std::string source;
};

class FusedKernel {
 public:
  FusedKernel(std::shared_ptr<const Program> program,
              FusionGroup group,
              std::shared_ptr<KernelTarget> target,
              bool strict);

  // `may_overwrite[k]`: input k's memory is the run's to give away; an
  // output planned in place of it (InPlaceInputs) then takes it, and
  // `overwritten[k]` says so, from the launch on: also when Run throws. A
  // kernel that fails after taking an input raises rather than running its
  // ATen steps from the overwritten memory.
  std::vector<at::Tensor> Run(const std::vector<at::Tensor>& inputs,
                              const std::vector<bool>& may_overwrite,
                              std::vector<bool>* overwritten);
  // The kernels rendered so far, one per signature seen.
  std::vector<KernelRecord> Records() const;
  // The signature a run with these program parameters most likely binds:
  // parameters as they are, constants as literals, view-group outputs as
  // `views` lays them out, other intermediates contiguous.
  KernelSignature Predict(const std::vector<at::Tensor>& parameters,
                          const std::unordered_map<BufferId, PredictedLayout>& views) const;
  bool HasVariant(const KernelSignature& signature) const;
  // Renders the kernel for `signature` and chooses how it runs: as itself,
  // or through a shape-generic template (runtime/generic_kernels.h).
  KernelChoice Choose(const KernelSignature& signature) const;
  // A choice loaded elsewhere (a batch), for `signature`.
  void AddVariant(const KernelSignature& signature, KernelChoice choice);
  size_t input_count() const {
    return group_.inputs.size();
  }
  // Whether some output may take an input's memory (InPlaceInputs).
  bool may_take_inputs() const {
    return may_take_inputs_;
  }

 private:
  struct Variant {
    KernelSignature signature;
    KernelSource source;
    std::shared_ptr<LoadedKernel> loaded;
    std::vector<ArgSlot> generic_args;  // a shape-generic template's sizes
  };
  const Variant& VariantFor(const KernelSignature& signature);
  KernelSignature Bind(const std::vector<at::Tensor>& inputs) const;
  InputBinding BindInput(size_t k, const at::Tensor& tensor) const;
  // Whether `inputs` bind as `signature` says, checked without building a
  // signature: the launch path of a cached graph.
  bool Matches(const KernelSignature& signature, const std::vector<at::Tensor>& inputs) const;
  std::vector<at::Tensor> Launch(const std::vector<at::Tensor>& inputs,
                                 const std::vector<bool>& may_overwrite,
                                 std::vector<bool>* overwritten);
  bool CanTake(const KernelSignature& signature,
               const std::vector<at::Tensor>& inputs,
               const std::vector<bool>& may_overwrite,
               size_t k) const;
  std::vector<at::Tensor> RunAtenSteps(const std::vector<at::Tensor>& inputs) const;

  std::shared_ptr<const Program> program_;
  FusionGroup group_;
  std::shared_ptr<KernelTarget> target_;
  bool strict_;
  // Per input: whether it is a program constant (written into the source).
  std::vector<bool> constant_input_;
  c10::DeviceType device_type_;
  int block_limit_;  // the target's most threads per block (KernelSignature)
  bool may_take_inputs_ = false;
  mutable std::mutex mutex_;
  // Never shrinks, so a Variant's address is stable for last_variant_.
  std::vector<std::unique_ptr<Variant>> variants_;
  std::atomic<const Variant*> last_variant_{nullptr};
  bool warned_ = false;
  // A launch failed after writing over inputs: without strict kernels, later
  // runs take the ATen steps.
  std::atomic<bool> failed_after_writing_{false};
};

// "lazyfuse::fused(aten::mul.Tensor, aten::sum)": a fused step's op.
std::string FusedStepName(const Program& program, const FusionGroup& group);

// Makes every kernel launch from now on, after the first `after_launches`,
// fail as a codegen bug would, so tests can see the fallback and the strict
// error: before the launch, or with `after_writing` once it ran (as a CUDA
// error reported late would). Off by default.
void InjectKernelFaultsForTesting(bool enabled, int after_launches = 0, bool after_writing = false);

}  // namespace lazyfuse
