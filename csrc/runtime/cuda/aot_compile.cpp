#include "runtime/cuda/aot_compile.h"

#include <c10/util/Exception.h>

#include "fusion/planner.h"
#include "kernels/codegen.h"
#include "runtime/cuda/loader.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/generic_kernels.h"
#include "runtime/parallel_compile.h"
#include "runtime/target.h"
#include "runtime/view_group.h"

namespace lazyfuse {

bool NvrtcAvailable(std::string* where_or_why) {
  std::string why;
  const cuda::NvrtcApi* api = cuda::TryNvrtc(&why);
  if (where_or_why != nullptr) {
    *where_or_why = api != nullptr ? api->path : why;
  }
  return api != nullptr;
}

std::vector<KernelCompileRecord> CompileFusedKernels(
    const Program& program,
    const std::vector<bool>& host_scalar_parameters,
    const std::string& arch,
    int sms,
    int block_limit,
    bool generic) {
  const int sm = cuda::ParseArch(arch);
  std::string nvrtc;
  const bool have_nvrtc = NvrtcAvailable(&nvrtc);
  std::vector<KernelCompileRecord> records;
  const FusionPlan plan = PlanFusion(program);
  const auto view_layouts = PredictedViewLayouts(program, plan.groups);
  for (const FusionGroup& group : plan.groups) {
    if (!LaunchesKernel(group.kind)) {
      continue;
    }
    KernelSignature signature = PredictedSignature(program, group, host_scalar_parameters);
    signature.block_limit = block_limit;
    for (size_t k = 0; k < group.inputs.size(); ++k) {
      const auto it = view_layouts.find(group.inputs[k]);
      if (it != view_layouts.end() && signature.inputs[k].kind == InputBinding::Kind::kTensor) {
        signature.inputs[k].strides = it->second.strides;
        signature.inputs[k].aligned = it->second.aligned;
      }
    }
    KernelSource source =
        generic ? GuessedTemplate(GenerateKernel(program, group, signature, CudaDialect()))
                : GenerateKernel(program,
                                 group,
                                 signature,
                                 CudaDialect(),
                                 nullptr,
                                 /*simplify_indices=*/true);
    KernelCompileRecord record;
    record.name = source.name;
    record.ops = source.ops;
    record.source = source.source;
    LaunchLimits limits;
    limits.processors = sms;
    limits.block = block_limit;
    const LaunchConfig launch = ComputeLaunch(source, limits);
    record.grid = launch.grid;
    record.block = launch.block;
    record.launches = source.launches;
    record.log = have_nvrtc ? "" : nvrtc;
    records.push_back(std::move(record));
  }
  if (!have_nvrtc) {
    return records;
  }
  // Side by side, as a CUDA target compiles a graph's kernels before its first run.
  ForEachInParallel(records.size(), [&](size_t i) {
    KernelCompileRecord& record = records[i];
    try {
      auto compiled = cuda::CompileKernel(record.source, record.name, sm);
      record.compiled = true;
      record.target = compiled->target;
      record.log = compiled->log;
    } catch (const c10::Error& error) {
      record.log = error.what_without_backtrace();
    } catch (const std::exception& error) {
      record.log = error.what();
    }
  });
  return records;
}

}  // namespace lazyfuse
