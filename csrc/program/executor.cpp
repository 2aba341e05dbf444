#include "program/executor.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "ltc/backing_ops_guard.h"
#include "ltc/config.h"
#include "program/error_text.h"
#include "program/memory_meter.h"

namespace lazyfuse {

namespace {

// Whether `tensor` is the only user of its memory: no other tensor object and
// no view of it, so a step may overwrite it once it has read it.
bool SharesNoMemory(const at::Tensor& tensor) {
  return tensor.defined() && tensor.use_count() == 1 && tensor.has_storage() &&
         tensor.storage().use_count() == 1;
}

// By step, from `from` on: whether it computes something the wanted results
// read. Every step when all results are wanted.
std::vector<uint8_t> StepsToRun(const Program& program,
                                size_t from,
                                const std::vector<bool>& wanted) {
  std::vector<uint8_t> runs(program.steps.size(), 1);
  if (wanted.empty()) {
    return runs;
  }
  std::vector<uint8_t> read(program.buffers.size(), 0);
  std::vector<size_t> source(program.results.size());
  std::iota(source.begin(), source.end(), 0);
  for (const DerivedResult& entry : program.derived_results) {
    source[entry.result] = entry.from;  // made from that result's value
  }
  for (size_t k = 0; k < program.results.size(); ++k) {
    read[program.results[source[k]]] |= static_cast<uint8_t>(k < wanted.size() && wanted[k]);
  }
  for (size_t i = program.steps.size(); i-- > from;) {
    const Step& step = program.steps[i];
    runs[i] = step.kind == StepKind::kCollective ||
              std::any_of(step.outputs.begin(), step.outputs.end(), [&](BufferId id) {
                return read[id] != 0;
              });
    if (runs[i] != 0) {
      for (BufferId id : step.inputs) {
        read[id] = 1;
      }
    }
  }
  return runs;
}

// The distinct memory the run holds after step `at`, each buffer named by
// the step that made it or the parameter it came in as.
std::vector<HeldBuffer> HeldBuffers(const Program& program,
                                    const std::vector<at::Tensor>& slots,
                                    size_t at) {
  std::vector<std::string> names(program.buffers.size());
  for (size_t k = 0; k < program.parameters.size(); ++k) {
    names[program.parameters[k]] = "parameter " + std::to_string(k);
  }
  for (const auto& constant : program.constants) {
    names[constant.first] = "constant";
  }
  for (size_t i = 0; i <= at && i < program.steps.size(); ++i) {
    for (BufferId id : program.steps[i].outputs) {
      names[id] = program.steps[i].op + " (step " + std::to_string(i) + ")";
    }
  }
  std::vector<HeldBuffer> held;
  std::vector<const void*> seen;
  for (size_t id = 0; id < slots.size(); ++id) {
    const at::Tensor& slot = slots[id];
    if (!slot.defined() || !slot.has_storage()) {
      continue;
    }
    const void* storage = slot.storage().unsafeGetStorageImpl();
    if (std::find(seen.begin(), seen.end(), storage) != seen.end()) {
      continue;
    }
    seen.push_back(storage);
    held.push_back(
        {names[id] + " " + c10::str(slot.sizes()) + " " + c10::toString(slot.scalar_type()),
         static_cast<int64_t>(slot.storage().nbytes())});
  }
  return held;
}

// Donated parameters may share one tensor (a parameter's value and its
// detached view). A step may overwrite that memory only once no other of
// them is read again: only the one read strictly last stays owned.
void KeepOneOwnerPerTensor(const Program& program, ProgramRun& run) {
  std::unordered_map<const c10::TensorImpl*, std::vector<BufferId>> sharing;
  bool shared = false;
  for (BufferId id : program.parameters) {
    if (run.owned[id] != 0) {
      auto& ids = sharing[run.slots[id].unsafeGetTensorImpl()];
      ids.push_back(id);
      shared = shared || ids.size() > 1;
    }
  }
  if (!shared) {
    return;  // the common case, on every mark_step: nothing more to work out
  }
  std::vector<int> last_read(program.buffers.size(), -1);
  for (size_t i = 0; i < program.release_after.size(); ++i) {
    for (BufferId id : program.release_after[i]) {
      last_read[id] = static_cast<int>(i);
    }
  }
  for (const auto& entry : sharing) {
    const std::vector<BufferId>& ids = entry.second;
    if (ids.size() < 2) {
      continue;
    }
    int latest = -1;
    BufferId owner = -1;
    bool tie = false;
    for (BufferId id : ids) {
      if (last_read[id] > latest) {
        latest = last_read[id];
        owner = id;
        tie = false;
      } else if (last_read[id] == latest) {
        tie = true;
      }
    }
    for (BufferId id : ids) {
      if (id != owner || tie) {
        run.owned[id] = run.donated[id] = 0;
      }
    }
  }
}

// Drops the run's reference to a buffer nothing reads again. A donated
// parameter's memory is also held outside the run, by its lazy tensor's
// data, which the sync replaces only once every result is in: that holder
// lets go now. The run can then never start over (an input is gone), as
// after writing over a parameter, so a later failure leaves its results
// pending, finished on their first read.
void Release(ProgramRun& run, BufferId id) {
  run.slots[id].reset();
  if (run.donated[id] == 1 && run.let_go_of_parameter && run.parameter_index[id] >= 0) {
    run.overwrote_parameter = true;
    run.let_go_of_parameter(static_cast<size_t>(run.parameter_index[id]));
  }
}

// A step's result must have the shape and dtype its IR node was given: the
// traced tensors were described by them. A shape function (or a meta kernel
// it runs) that disagrees with the kernel would otherwise give a tensor the
// wrong shape, or fail a later step with a message about another op.
void CheckStepOutput(
    const Program& program, const Step& step, size_t index, size_t output, const at::Tensor& out) {
  if (!out.defined()) {
    return;
  }
  const BufferInfo& info = program.buffers[step.outputs[output]];
  TORCH_CHECK(out.sizes() == c10::IntArrayRef(info.sizes) && out.scalar_type() == info.dtype,
              "lazyfuse: ",
              step.op,
              " (step ",
              index,
              " of the graph) returned result ",
              output,
              " of shape ",
              out.sizes(),
              " and dtype ",
              out.scalar_type(),
              ", where its shape function gave ",
              c10::IntArrayRef(info.sizes),
              " and ",
              info.dtype,
              ". This is a lazyfuse bug: please report it.");
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
  if (program->before_run) {
    program->before_run(parameters);
  }
  ProgramRun run;
  run.slots.resize(program->buffers.size());
  run.owned.assign(program->buffers.size(), 0);
  run.donated.assign(program->buffers.size(), 0);
  run.parameter_index.assign(program->buffers.size(), -1);
  for (size_t k = 0; k < parameters.size(); ++k) {
    const BufferId id = program->parameters[k];
    run.owned[id] = run.donated[id] = k < donated.size() && donated[k];
    run.slots[id] = std::move(parameters[k]);
    run.parameter_index[id] = static_cast<int32_t>(k);
  }
  for (const auto& constant : program->constants) {
    run.slots[constant.first] = constant.second;
  }
  KeepOneOwnerPerTensor(*program, run);
  run.program = std::move(program);
  return run;
}

std::vector<at::Tensor> ContinueProgram(ProgramRun& run, const std::vector<bool>& wanted) {
  TORCH_CHECK(run.lost.empty(), run.lost);
  TORCH_LAZY_TIMED("LazyFuseExecute");
  const Program& program = *run.program;
  std::vector<at::Tensor>& slots = run.slots;
  const BackingOpsGuard backing_ops;
  const c10::Device device = BackingDevice();
  const std::vector<uint8_t> runs = StepsToRun(program, run.next_step, wanted);
  for (size_t i = run.next_step; i < program.steps.size(); ++i) {
    run.next_step = i;
    const Step& step = program.steps[i];
    if (runs[i] == 0) {
      for (BufferId id : program.release_after[i]) {
        Release(run, id);
      }
      continue;
    }
    KernelArgs args(slots, step.inputs, step.operand_arity, step.op.c_str(), device);
    std::vector<BufferId> overwritten;
    args.AllowOverwrites(run.owned, program.release_after[i], &overwritten);
    std::vector<at::Tensor> outs;
    // Donated parameters the step wrote over; a step that failed after
    // writing over any input cannot run again, so the run is lost.
    const auto record_overwrites = [&](const std::string* failure) {
      for (BufferId id : overwritten) {
        if (run.donated[id] != 0) {
          run.overwrote_parameter = true;
          if (slots[id].defined() && slots[id].has_storage()) {
            run.overwritten_memory.push_back(slots[id].storage().data());
          }
        }
        if (run.donated[id] == 1) {
          TORCH_LAZY_COUNTER("LazyFuseDonatedParameters", 1);
        }
      }
      if (failure != nullptr && !overwritten.empty()) {
        run.lost = "lazyfuse: this value was lost. " + *failure +
                   "\nThat step had begun writing over its inputs' memory (buffer donation), so "
                   "it cannot run again.";
      }
      if (step.kind == StepKind::kCollective) {
        run.ran_collective = step.op;
        if (failure != nullptr) {
          run.lost = "lazyfuse: this value was lost. " + *failure +
                     "\nA collective is never retried: other ranks may have completed it, so "
                     "running it again would desynchronise the process group.";
        }
      }
    };
    try {
      outs = step.fn(args);
    } catch (const c10::OutOfMemoryError& error) {
      const std::string message = "lazyfuse: " + step.op + " (step " + std::to_string(i) +
                                  " of the graph) ran out of memory on " + BackingDevice().str() +
                                  ": " + error.what_without_backtrace();
      record_overwrites(&message);
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    } catch (const std::exception& error) {
      const std::string what = ErrorText(error);
      const bool out_of_memory = what.find("can't allocate memory") != std::string::npos ||
                                 what.find("out of memory") != std::string::npos;
      const std::string message = "lazyfuse: " + step.op + " (step " + std::to_string(i) +
                                  " of the graph) failed on " + BackingDevice().str() +
                                  (out_of_memory ? " (out of memory)" : "") + ": " + what;
      record_overwrites(&message);
      RaiseWrapping(error, message);
    }
    record_overwrites(nullptr);
    TORCH_CHECK(outs.size() == step.outputs.size(),
                "lazyfuse: ",
                step.op,
                " returned ",
                outs.size(),
                " tensors, expected ",
                step.outputs.size());
    for (size_t j = 0; j < outs.size(); ++j) {
      CheckStepOutput(program, step, i, j, outs[j]);
      slots[step.outputs[j]] = std::move(outs[j]);
    }
    outs.clear();
    if (MemoryMeter* meter = ActiveMemoryMeter(); meter != nullptr && meter->PeakUndescribed()) {
      meter->DescribePeak(HeldBuffers(program, slots, i));
    }
    // A result that is an owned input dying here (written over it, or
    // passed through) stays the run's, and a donated parameter's memory stays
    // donated: its lazy tensor still holds it, but nothing reads it.
    c10::SmallVector<BufferId, 4> taken_from;
    for (BufferId out : step.outputs) {
      const auto& released = program.release_after[i];
      const auto from = std::find_if(released.begin(), released.end(), [&](BufferId id) {
        return run.owned[id] != 0 && slots[out].defined() && slots[id].is_same(slots[out]);
      });
      taken_from.push_back(from == released.end() ? -1 : *from);
    }
    for (BufferId id : program.release_after[i]) {
      if (std::find(taken_from.begin(), taken_from.end(), id) == taken_from.end()) {
        Release(run, id);
      } else {
        slots[id].reset();
      }
    }
    for (size_t j = 0; j < step.outputs.size(); ++j) {
      const BufferId id = step.outputs[j];
      const at::Tensor& out = slots[id];
      if (taken_from[j] < 0) {
        run.owned[id] = SharesNoMemory(out);
      } else {
        run.owned[id] = out.has_storage() && out.storage().use_count() == 1;
        run.donated[id] = run.owned[id] != 0 && run.donated[taken_from[j]] != 0 ? 2 : 0;
      }
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
