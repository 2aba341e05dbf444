#include "runtime/fused_kernel.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "kernels/writer.h"
#include "program/compile_log.h"
#include "program/error_text.h"
#include "runtime/host_scalars.h"
#include "runtime/launch_report.h"
#include "runtime/view_group.h"

namespace lazyfuse {
namespace {

std::atomic<bool> g_inject_faults{false};
std::atomic<bool> g_faults_after_launch{false};
std::atomic<int> g_launches_before_faults{0};

// Whether this launch is one InjectKernelFaultsForTesting makes fail.
bool InjectedFault() {
  return g_inject_faults.load() && g_launches_before_faults.fetch_sub(1) <= 0;
}

}  // namespace

std::string FusedStepName(const Program& program, const FusionGroup& group) {
  std::string name = "lazyfuse::fused(";
  for (size_t i = 0; i < group.steps.size(); ++i) {
    name += (i ? ", " : "") + program.steps[group.steps[i]].qualified_op();
  }
  return name + ")";
}

LaunchConfig ComputeLaunch(const KernelSource& source, const LaunchLimits& limits) {
  LaunchConfig config;
  config.block = source.launch == LaunchShape::kElementwise ? 256 : source.block_size;
  // A block-per-row kernel's loops assume its own block size, which codegen
  // kept within the limit (KernelSignature::block_limit).
  if (limits.block > 0 && source.launch != LaunchShape::kBlockPerRow) {
    config.block = limits.block;
  }
  const int64_t processors = std::max(limits.processors, 1);
  if (source.launch == LaunchShape::kBlockPerRow) {
    config.grid = std::min<int64_t>(source.work_items, processors * 32);
  } else {
    config.grid =
        std::min<int64_t>((source.work_items + config.block - 1) / config.block, processors * 8);
  }
  if (limits.max_grid > 0) {
    config.grid = std::min<int64_t>(config.grid, limits.max_grid);
  }
  config.grid = std::max<int64_t>(config.grid, 1);
  return config;
}

FusedKernel::FusedKernel(std::shared_ptr<const Program> program,
                         FusionGroup group,
                         std::shared_ptr<KernelTarget> target,
                         bool strict)
    : program_(std::move(program)),
      group_(std::move(group)),
      target_(std::move(target)),
      strict_(strict),
      device_type_(target_->device().type()),
      block_limit_(target_->limits().block) {
  TORCH_CHECK(group_.in_place.size() == group_.outputs.size(),
              "lazyfuse: a fused group reached the runtime without its in-place plan");
  may_take_inputs_ = std::any_of(group_.in_place.begin(),
                                 group_.in_place.end(),
                                 [](const auto& inputs) { return !inputs.empty(); });
  for (BufferId id : group_.inputs) {
    constant_input_.push_back(std::any_of(program_->constants.begin(),
                                          program_->constants.end(),
                                          [&](const auto& c) { return c.first == id; }));
  }
}

InputBinding FusedKernel::BindInput(size_t k, const at::Tensor& tensor) const {
  InputBinding binding;
  if (IsHostScalar(tensor)) {
    binding.kind =
        constant_input_[k] ? InputBinding::Kind::kConstant : InputBinding::Kind::kHostScalar;
    if (constant_input_[k]) {
      binding.literal = ConstantLiteral(tensor);
    }
    return binding;
  }
  TORCH_CHECK(tensor.device().type() == device_type_,
              "lazyfuse: fused kernel input ",
              k,
              " is on ",
              tensor.device(),
              ", expected the ",
              target_->dialect().name,
              " kernel target's device");
  // The kernel reads the input as the graph's dtype: a shape function that
  // disagrees with its ATen kernel would make it read the wrong bytes.
  const at::ScalarType expected = program_->buffers[group_.inputs[k]].dtype;
  TORCH_CHECK(tensor.scalar_type() == expected,
              "lazyfuse: fused kernel input ",
              k,
              " (%",
              group_.inputs[k],
              ") is ",
              tensor.scalar_type(),
              " but the graph says ",
              expected,
              ": the shape function of the op that made it disagrees with its ATen kernel");
  binding.strides = tensor.strides().vec();
  binding.aligned = reinterpret_cast<uintptr_t>(tensor.data_ptr()) % 16 == 0;
  return binding;
}

KernelSignature FusedKernel::Bind(const std::vector<at::Tensor>& inputs) const {
  KernelSignature signature;
  signature.block_limit = block_limit_;
  for (size_t k = 0; k < inputs.size(); ++k) {
    signature.inputs.push_back(BindInput(k, inputs[k]));
  }
  return signature;
}

KernelSignature FusedKernel::Predict(
    const std::vector<at::Tensor>& parameters,
    const std::unordered_map<BufferId, PredictedLayout>& views) const {
  KernelSignature signature;
  signature.block_limit = block_limit_;
  for (size_t k = 0; k < group_.inputs.size(); ++k) {
    const BufferId id = group_.inputs[k];
    const at::Tensor* known = nullptr;
    for (size_t p = 0; p < program_->parameters.size() && p < parameters.size(); ++p) {
      known = program_->parameters[p] == id ? &parameters[p] : known;
    }
    for (const auto& constant : program_->constants) {
      known = constant.first == id ? &constant.second : known;
    }
    if (known != nullptr) {
      signature.inputs.push_back(BindInput(k, *known));
      continue;
    }
    // An intermediate: a view group's alias, or a new contiguous tensor on
    // the target's device.
    const BufferInfo& info = program_->buffers[id];
    InputBinding binding;
    const auto view = views.find(id);
    if (info.sizes.empty() && device_type_ == c10::kCPU) {
      binding.kind = InputBinding::Kind::kHostScalar;
    } else if (view != views.end()) {
      binding.strides = view->second.strides;
      binding.aligned = view->second.aligned;
    } else {
      binding.strides = ContiguousStrides(info.sizes);
    }
    signature.inputs.push_back(std::move(binding));
  }
  return signature;
}

bool FusedKernel::HasVariant(const KernelSignature& signature) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::any_of(variants_.begin(), variants_.end(), [&](const auto& variant) {
    return variant->signature == signature;
  });
}

KernelChoice FusedKernel::Choose(const KernelSignature& signature) const {
  const KernelDialect& dialect = target_->dialect();
  return ChooseKernel(
      GenerateKernel(*program_, group_, signature, dialect),
      program_.get(),
      [&](const RowStrategy& prefer) {
        return GenerateKernel(*program_, group_, signature, dialect, &prefer);
      },
      [&] {
        return GenerateKernel(
            *program_, group_, signature, dialect, nullptr, /*simplify_indices=*/true);
      });
}

void FusedKernel::AddVariant(const KernelSignature& signature, KernelChoice choice) {
  TORCH_CHECK(choice.loaded != nullptr, "lazyfuse: a kernel variant added before it loaded");
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& variant : variants_) {
    if (variant->signature == signature) {
      return;
    }
  }
  auto variant = std::make_unique<Variant>();
  variant->signature = signature;
  variant->source = std::move(choice.source);
  variant->loaded = std::move(choice.loaded);
  variant->generic_args = std::move(choice.generic_args);
  variants_.push_back(std::move(variant));
  last_variant_.store(variants_.back().get(), std::memory_order_release);
}

bool FusedKernel::Matches(const KernelSignature& signature,
                          const std::vector<at::Tensor>& inputs) const {
  for (size_t k = 0; k < inputs.size(); ++k) {
    const InputBinding& binding = signature.inputs[k];
    const at::Tensor& tensor = inputs[k];
    // Whether an input is a program constant is fixed, and so is its value.
    if (IsHostScalar(tensor)) {
      if (binding.kind == InputBinding::Kind::kTensor) {
        return false;
      }
      continue;
    }
    const bool aligned = reinterpret_cast<uintptr_t>(tensor.const_data_ptr()) % 16 == 0;
    if (binding.kind != InputBinding::Kind::kTensor || tensor.device().type() != device_type_ ||
        aligned != binding.aligned || !tensor.strides().equals(binding.strides) ||
        tensor.scalar_type() != program_->buffers[group_.inputs[k]].dtype) {
      return false;
    }
  }
  return true;
}

const FusedKernel::Variant& FusedKernel::VariantFor(const KernelSignature& signature) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& variant : variants_) {
    if (variant->signature == signature) {
      return *variant;
    }
  }
  // A kernel's first launch with these arguments: render, look up and load.
  TORCH_LAZY_TIMED("LazyFuseKernelChoice");
  KernelChoice choice = Choose(signature);
  if (choice.generic != nullptr && choice.loaded == nullptr) {
    std::shared_ptr<LoadedKernel> binary;
    try {
      binary = target_->Load(choice.source);
    } catch (const std::exception&) {
      binary = nullptr;  // the render runs as itself instead
    }
    choice.Loaded(std::move(binary));
  }
  if (choice.loaded == nullptr) {
    choice.Loaded(target_->Load(choice.source));
  }
  auto variant = std::make_unique<Variant>();
  variant->signature = signature;
  variant->source = std::move(choice.source);
  variant->loaded = std::move(choice.loaded);
  variant->generic_args = std::move(choice.generic_args);
  variants_.push_back(std::move(variant));
  last_variant_.store(variants_.back().get(), std::memory_order_release);
  return *variants_.back();
}

void InjectKernelFaultsForTesting(bool enabled, int after_launches, bool after_writing) {
  g_launches_before_faults = after_launches;
  g_faults_after_launch = after_writing;
  g_inject_faults = enabled;
}

// Host cost per launch is LazyFuseKernelLaunch's time less LazyFuseTargetLaunch's
// where the target runs the body on the host (emulation); on CUDA the target's
// part is the asynchronous driver call, host work too.
std::vector<at::Tensor> FusedKernel::Launch(const std::vector<at::Tensor>& inputs,
                                            const std::vector<bool>& may_overwrite,
                                            std::vector<bool>* overwritten) {
  TORCH_LAZY_TIMED("LazyFuseKernelLaunch");
  const bool inject = InjectedFault();
  TORCH_CHECK(!inject || g_faults_after_launch.load(),
              "injected kernel fault (InjectKernelFaultsForTesting)");
  const Variant* cached = last_variant_.load(std::memory_order_acquire);
  if (cached == nullptr || !Matches(cached->signature, inputs)) {
    cached = &VariantFor(Bind(inputs));
    last_variant_.store(cached, std::memory_order_release);
  }
  const Variant& variant = *cached;
  const KernelSource& source = variant.source;
  std::vector<at::Tensor> outputs;
  std::vector<size_t> taken;
  for (size_t j = 0; j < group_.outputs.size(); ++j) {
    const auto& candidates = group_.in_place[j];
    const auto free = std::find_if(candidates.begin(), candidates.end(), [&](size_t k) {
      return std::find(taken.begin(), taken.end(), k) == taken.end() &&
             CanTake(variant.signature, inputs, may_overwrite, k);
    });
    if (free != candidates.end()) {
      outputs.push_back(inputs[*free]);
      taken.push_back(*free);
      continue;
    }
    const BufferInfo& info = program_->buffers[group_.outputs[j]];
    outputs.push_back(target_->NewOutput(info.sizes, info.dtype));
  }
  if (source.work_items == 0) {
    return outputs;  // nothing written: no input was overwritten
  }
  std::vector<ArgSlot> slots;
  for (size_t k = 0; k < inputs.size(); ++k) {
    switch (variant.signature.inputs[k].kind) {
      case InputBinding::Kind::kTensor: {
        ArgSlot slot{};
        slot.pointer = inputs[k].data_ptr();
        slots.push_back(slot);
        break;
      }
      case InputBinding::Kind::kHostScalar:
        slots.push_back(HostScalarSlot(inputs[k]));
        break;
      case InputBinding::Kind::kConstant:
        break;
    }
  }
  // A split reduction's partials and per-row counters (zeroed), after the
  // outputs.
  std::vector<at::Tensor> workspace;
  if (source.partials > 0) {
    workspace.push_back(target_->NewOutput({source.partials},
                                           source.partial_bytes == 8 ? at::kDouble : at::kFloat));
  }
  if (source.counters > 0) {
    workspace.push_back(target_->NewOutput({source.counters}, at::kInt).zero_());
  }
  for (const auto* written : {&outputs, &workspace}) {
    for (const at::Tensor& tensor : *written) {
      ArgSlot slot{};
      slot.pointer = tensor.data_ptr();
      slots.push_back(slot);
    }
  }
  const size_t phase_slot = slots.size();
  if (source.launches > 1) {
    slots.push_back(ArgSlot{});  // lf_phase, set before each launch
  }
  slots.insert(slots.end(), variant.generic_args.begin(), variant.generic_args.end());
  std::vector<void*> params;
  for (ArgSlot& slot : slots) {
    params.push_back(&slot);
  }
  const LaunchConfig config = ComputeLaunch(source, target_->limits());
  // From the launch on, the kernel may have written over the inputs it
  // takes, whatever happens next (Run refuses the ATen fallback then).
  for (size_t k : taken) {
    (*overwritten)[k] = true;
  }
  if (!taken.empty()) {
    TORCH_LAZY_COUNTER("LazyFuseInPlaceOutputs", static_cast<int64_t>(taken.size()));
  }
  const bool report = DebugLevel() >= 3;
  if (report) {
    WaitForDevice(target_->device());
  }
  const auto start = std::chrono::steady_clock::now();
  for (int phase = 0; phase < source.launches; ++phase) {
    if (source.launches > 1) {
      slots[phase_slot].i32 = phase;  // the driver copies parameters at the call
    }
    TORCH_LAZY_TIMED("LazyFuseTargetLaunch");
    target_->Launch(
        *variant.loaded, source, config, params.data(), LaunchTensors{inputs, outputs, workspace});
  }
  if (report) {
    WaitForDevice(target_->device());
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    PrintLaunch(source, !variant.generic_args.empty(), inputs, outputs, took.count());
  }
  TORCH_LAZY_COUNTER("LazyFuseKernelLaunches", source.launches);
  TORCH_CHECK(!inject, "injected kernel fault after the launch (InjectKernelFaultsForTesting)");
  return outputs;
}

bool FusedKernel::CanTake(const KernelSignature& signature,
                          const std::vector<at::Tensor>& inputs,
                          const std::vector<bool>& may_overwrite,
                          size_t k) const {
  return k < may_overwrite.size() && may_overwrite[k] &&
         signature.inputs[k].kind == InputBinding::Kind::kTensor &&
         WritableInPlace(inputs[k], target_->device());
}

std::vector<at::Tensor> FusedKernel::RunAtenSteps(const std::vector<at::Tensor>& inputs) const {
  std::vector<at::Tensor> slots(program_->buffers.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    slots[group_.inputs[k]] = inputs[k];
  }
  for (size_t index : group_.steps) {
    const Step& step = program_->steps[index];
    KernelArgs args(slots, step.inputs, step.operand_arity, step.op.c_str(), target_->device());
    std::vector<at::Tensor> outs = step.fn(args);
    for (size_t j = 0; j < outs.size(); ++j) {
      slots[step.outputs[j]] = std::move(outs[j]);
    }
  }
  std::vector<at::Tensor> outputs;
  for (BufferId id : group_.outputs) {
    outputs.push_back(slots[id]);
  }
  return outputs;
}

std::vector<at::Tensor> FusedKernel::Run(const std::vector<at::Tensor>& inputs,
                                         const std::vector<bool>& may_overwrite,
                                         std::vector<bool>* overwritten) {
  if (failed_after_writing_.load() && !strict_) {
    TORCH_LAZY_COUNTER("LazyFuseKernelFallbacks", 1);
    return RunAtenSteps(inputs);  // its last failure cost values; no more launches
  }
  try {
    return Launch(inputs, may_overwrite, overwritten);
  } catch (const c10::OutOfMemoryError&) {
    throw;  // the ATen steps would need the same memory
  } catch (const std::exception& error) {
    const std::string what = ErrorText(error);
    const std::string name = FusedStepName(*program_, group_);
    // Inputs the kernel wrote over no longer hold what the ATen steps read.
    const size_t written =
        overwritten == nullptr ? 0 : std::count(overwritten->begin(), overwritten->end(), true);
    if (written > 0) {
      failed_after_writing_ = true;
      TORCH_CHECK(false,
                  "lazyfuse: fused kernel ",
                  name,
                  " failed on the ",
                  target_->dialect().name,
                  " target after it began writing its results over ",
                  written,
                  " of its inputs (buffer donation), so its ATen steps cannot run instead: ",
                  what);
    }
    TORCH_CHECK(!strict_,
                "lazyfuse: fused kernel ",
                name,
                " failed on the ",
                target_->dialect().name,
                " target: ",
                what);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!warned_) {
        warned_ = true;
        TORCH_WARN("lazyfuse: fused kernel ",
                   name,
                   " failed on the ",
                   target_->dialect().name,
                   " target; its ATen steps run instead (slower, same values). ",
                   "LAZYFUSE_STRICT_KERNELS=1 makes this an error. Cause: ",
                   what);
      }
    }
    TORCH_LAZY_COUNTER("LazyFuseKernelFallbacks", 1);
    return RunAtenSteps(inputs);
  }
}

std::vector<KernelRecord> FusedKernel::Records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<KernelRecord> out;
  for (const auto& variant : variants_) {
    out.push_back({variant->source.name, variant->source.ops, variant->source.source});
  }
  return out;
}

}  // namespace lazyfuse
