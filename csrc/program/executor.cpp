#include "program/executor.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include "ltc/config.h"

namespace lazyfuse {

std::vector<at::Tensor> RunProgram(const Program& program, std::vector<at::Tensor> parameters) {
  TORCH_LAZY_TIMED("LazyFuseExecute");
  TORCH_CHECK(parameters.size() == program.parameters.size(),
              "lazyfuse: program takes ",
              program.parameters.size(),
              " parameters, got ",
              parameters.size());
  // Steps run on plain backing-device tensors; autograd was already applied
  // while tracing.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  std::vector<at::Tensor> slots(program.buffers.size());
  for (size_t k = 0; k < parameters.size(); ++k) {
    slots[program.parameters[k]] = std::move(parameters[k]);
  }
  for (const auto& constant : program.constants) {
    slots[constant.first] = constant.second;
  }
  const c10::Device device = BackingDevice();
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const Step& step = program.steps[i];
    KernelArgs args(slots, step.inputs, step.operand_arity, step.op.c_str(), device);
    std::vector<at::Tensor> outs;
    try {
      outs = step.fn(args);
    } catch (const c10::OutOfMemoryError& error) {
      TORCH_CHECK_WITH(OutOfMemoryError,
                       false,
                       "lazyfuse: ",
                       step.op,
                       " (step ",
                       i,
                       " of the graph) ran out of memory on ",
                       BackingDevice(),
                       ": ",
                       error.what_without_backtrace());
    } catch (const std::exception& error) {
      const std::string what = error.what();
      const bool out_of_memory = what.find("can't allocate memory") != std::string::npos ||
                                 what.find("out of memory") != std::string::npos;
      TORCH_CHECK(false,
                  "lazyfuse: ",
                  step.op,
                  " (step ",
                  i,
                  " of the graph) failed on ",
                  BackingDevice(),
                  out_of_memory ? " (out of memory)" : "",
                  ": ",
                  what.substr(0, what.find("\nException raised from")));
    }
    TORCH_CHECK(outs.size() == step.outputs.size(),
                "lazyfuse: ",
                step.op,
                " returned ",
                outs.size(),
                " tensors, expected ",
                step.outputs.size());
    for (size_t j = 0; j < outs.size(); ++j) {
      slots[step.outputs[j]] = std::move(outs[j]);
    }
    for (BufferId id : program.release_after[i]) {
      slots[id].reset();
    }
  }
  std::vector<at::Tensor> results;
  results.reserve(program.results.size());
  for (BufferId id : program.results) {
    results.push_back(slots[id]);
  }
  TORCH_LAZY_COUNTER("LazyFuseGraphsExecuted", 1);
  TORCH_LAZY_VALUE_METRIC("LazyFuseStepsPerGraph", program.steps.size());
  return results;
}

}  // namespace lazyfuse
