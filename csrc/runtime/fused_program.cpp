#include "runtime/fused_program.h"

#include <torch/csrc/lazy/core/metrics.h>

#include <map>
#include <mutex>
#include <unordered_map>

#include "runtime/view_group.h"

namespace lazyfuse {
namespace {

// Renders every kernel for the signature the run will most likely bind and
// loads them in one call: one compile, or compiles side by side. Best
// effort: a kernel left out, or a batch that fails, compiles alone at its
// launch, which reports its own failure.
void LoadInOneBatch(const std::vector<std::shared_ptr<FusedKernel>>& kernels,
                    KernelTarget& target,
                    const Program& program,
                    const std::vector<FusionGroup>& view_groups,
                    const std::vector<at::Tensor>& parameters) {
  TORCH_LAZY_TIMED("LazyFuseKernelBatch");
  std::unordered_map<BufferId, PredictedLayout> views;
  try {
    views = PredictedViewLayouts(program, view_groups, parameters);
  } catch (const std::exception&) {
    views.clear();  // views then read as contiguous: a miss compiles at launch
  }
  struct Pending {
    std::shared_ptr<FusedKernel> owner;
    KernelSignature signature;
    KernelChoice choice;
    size_t source = 0;  // in `sources`
  };
  std::vector<Pending> pending;
  std::vector<KernelSource> sources;
  // Kernels of one template compile once per batch.
  std::map<const GenericTemplate*, size_t> template_source;
  for (const auto& kernel : kernels) {
    try {
      KernelSignature signature = kernel->Predict(parameters, views);
      if (kernel->HasVariant(signature)) {
        continue;
      }
      KernelChoice choice = kernel->Choose(signature);
      if (choice.loaded != nullptr) {
        kernel->AddVariant(signature, std::move(choice));
        continue;  // known: nothing to compile
      }
      size_t index = sources.size();
      const auto known = template_source.find(choice.generic.get());
      if (choice.generic != nullptr && known != template_source.end()) {
        index = known->second;
      } else {
        sources.push_back(choice.source);
        if (choice.generic != nullptr) {
          template_source[choice.generic.get()] = index;
        }
      }
      pending.push_back(Pending{kernel, std::move(signature), std::move(choice), index});
    } catch (const std::exception&) {
      continue;
    }
  }
  if (sources.empty()) {
    return;
  }
  std::vector<std::shared_ptr<LoadedKernel>> loaded;
  try {
    loaded = target.LoadBatch(sources);
  } catch (const std::exception&) {
    // Each kernel then compiles alone at its launch and reports its own
    // error; this counts the wasted batch compile.
    TORCH_LAZY_COUNTER("LazyFuseBatchCompileFailed", 1);
    return;
  }
  for (Pending& entry : pending) {
    if (entry.source < loaded.size() && loaded[entry.source] != nullptr) {
      entry.choice.Loaded(loaded[entry.source]);
      entry.owner->AddVariant(entry.signature, std::move(entry.choice));
    }
  }
}

}  // namespace

Program BuildFusedProgram(std::shared_ptr<const Program> program,
                          const FusionPlan& plan,
                          const std::shared_ptr<KernelTarget>& target,
                          bool strict,
                          std::vector<std::shared_ptr<FusedKernel>>* kernels) {
  Program out;
  std::vector<std::shared_ptr<FusedKernel>> batch;
  out.buffers = program->buffers;
  out.parameters = program->parameters;
  out.constants = program->constants;
  out.results = program->results;
  out.derived_results = program->derived_results;
  std::vector<FusionGroup> view_groups;
  for (const FusionGroup& group : plan.groups) {
    if (group.kind == GroupKind::kAten) {
      out.steps.push_back(program->steps[group.steps.front()]);
      continue;
    }
    if (group.kind == GroupKind::kView) {
      out.steps.push_back(ViewGroupStep(*program, group));
      view_groups.push_back(group);
      continue;
    }
    auto kernel = std::make_shared<FusedKernel>(program, group, target, strict);
    batch.push_back(kernel);
    if (kernels != nullptr) {
      kernels->push_back(kernel);
    }
    Step step;
    step.op = FusedStepName(*program, group);
    step.kind = group.kind == GroupKind::kPointwise ? StepKind::kPointwise : StepKind::kReduction;
    step.inputs = group.inputs;
    step.outputs = group.outputs;
    step.fn = [kernel](KernelArgs& args) {
      const size_t count = kernel->input_count();
      std::vector<at::Tensor> inputs;
      inputs.reserve(count);
      for (size_t k = 0; k < count; ++k) {
        inputs.push_back(args.host_tensor());
      }
      if (!kernel->may_take_inputs()) {
        return kernel->Run(inputs, {}, nullptr);  // the launch path of most kernels
      }
      std::vector<bool> may_overwrite(count);
      for (size_t k = 0; k < count; ++k) {
        may_overwrite[k] = args.may_overwrite(k);
      }
      std::vector<bool> overwritten(count, false);
      // Reported on failure too: the run then knows what it can no longer redo.
      const auto report = [&] {
        for (size_t k = 0; k < count; ++k) {
          if (overwritten[k]) {
            args.overwrote(k);
          }
        }
      };
      std::vector<at::Tensor> outputs;
      try {
        outputs = kernel->Run(inputs, may_overwrite, &overwritten);
      } catch (...) {
        report();
        throw;
      }
      report();
      return outputs;
    };
    out.steps.push_back(std::move(step));
  }
  if (target->batches() && !batch.empty()) {
    auto once = std::make_shared<std::once_flag>();
    out.before_run = [batch, target, once, program, view_groups = std::move(view_groups)](
                         const std::vector<at::Tensor>& parameters) {
      std::call_once(*once,
                     [&] { LoadInOneBatch(batch, *target, *program, view_groups, parameters); });
    };
  }
  ComputeLifetimes(out);
  return out;
}

}  // namespace lazyfuse
