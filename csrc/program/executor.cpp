#include "program/executor.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include "ltc/config.h"

namespace lazyfuse {

namespace {

// Whether `tensor` is the only user of its memory: no other tensor object and
// no view of it, so a step may overwrite it once it has read it.
bool SharesNoMemory(const at::Tensor& tensor) {
  return tensor.defined() && tensor.use_count() == 1 && tensor.has_storage() &&
         tensor.storage().use_count() == 1;
}

}  // namespace

ProgramRun StartProgram(std::shared_ptr<const Program> program,
                        std::vector<at::Tensor> parameters,
                        const std::vector<bool>& donated) {
  TORCH_CHECK(parameters.size() == program->parameters.size(),
              "lazyfuse: program takes ",
              program->parameters.size(),
              " parameters, got ",
              parameters.size());
  ProgramRun run;
  run.slots.resize(program->buffers.size());
  run.owned.assign(program->buffers.size(), 0);
  run.donated.assign(program->buffers.size(), 0);
  for (size_t k = 0; k < parameters.size(); ++k) {
    const BufferId id = program->parameters[k];
    run.owned[id] = run.donated[id] = k < donated.size() && donated[k];
    run.slots[id] = std::move(parameters[k]);
  }
  for (const auto& constant : program->constants) {
    run.slots[constant.first] = constant.second;
  }
  run.program = std::move(program);
  return run;
}

std::vector<at::Tensor> ContinueProgram(ProgramRun& run) {
  TORCH_CHECK(run.lost.empty(), run.lost);
  TORCH_LAZY_TIMED("LazyFuseExecute");
  const Program& program = *run.program;
  std::vector<at::Tensor>& slots = run.slots;
  // Steps run on plain backing-device tensors; autograd was already applied
  // while tracing.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const c10::Device device = BackingDevice();
  for (size_t i = run.next_step; i < program.steps.size(); ++i) {
    run.next_step = i;
    const Step& step = program.steps[i];
    KernelArgs args(slots, step.inputs, step.operand_arity, step.op.c_str(), device);
    std::vector<BufferId> overwritten;
    args.AllowOverwrites(run.owned, program.release_after[i], &overwritten);
    std::vector<at::Tensor> outs;
    const auto count_overwrites = [&] {
      for (BufferId id : overwritten) {
        if (run.donated[id] != 0) {
          run.overwrote_parameter = true;
          TORCH_LAZY_COUNTER("LazyFuseDonatedParameters", 1);
        }
      }
    };
    try {
      outs = step.fn(args);
    } catch (const c10::OutOfMemoryError& error) {
      count_overwrites();
      if (!overwritten.empty()) {
        run.lost = std::string("lazyfuse: ") + step.op +
                   " ran out of memory after writing over its inputs";
      }
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
      const std::string message = "lazyfuse: " + step.op + " (step " + std::to_string(i) +
                                  " of the graph) failed on " + BackingDevice().str() +
                                  (out_of_memory ? " (out of memory)" : "") + ": " +
                                  what.substr(0, what.find("\nException raised from"));
      count_overwrites();
      if (!overwritten.empty()) {
        run.lost = "lazyfuse: this value was lost. " + message +
                   "\nThat step had begun writing over its inputs' memory (buffer donation), so "
                   "it cannot run again.";
      }
      TORCH_CHECK(false, message);
    }
    count_overwrites();
    TORCH_CHECK(outs.size() == step.outputs.size(),
                "lazyfuse: ",
                step.op,
                " returned ",
                outs.size(),
                " tensors, expected ",
                step.outputs.size());
    for (size_t j = 0; j < outs.size(); ++j) {
      const BufferId id = step.outputs[j];
      slots[id] = std::move(outs[j]);
      run.owned[id] = SharesNoMemory(slots[id]);
    }
    for (BufferId id : program.release_after[i]) {
      slots[id].reset();
    }
  }
  run.next_step = program.steps.size();
  std::vector<at::Tensor> results;
  results.reserve(program.results.size());
  for (BufferId id : program.results) {
    results.push_back(slots[id]);
  }
  TORCH_LAZY_COUNTER("LazyFuseGraphsExecuted", 1);
  TORCH_LAZY_VALUE_METRIC("LazyFuseStepsPerGraph", program.steps.size());
  return results;
}

std::vector<at::Tensor> RunProgram(const Program& program, std::vector<at::Tensor> parameters) {
  // The run ends before this returns, so it may borrow the program.
  std::shared_ptr<const Program> borrowed(&program, [](const Program*) {});
  ProgramRun run = StartProgram(std::move(borrowed), std::move(parameters), {});
  return ContinueProgram(run);
}

}  // namespace lazyfuse
