#pragma once

// Runs a Program on the backing device: every step is one ATen call.

#include <ATen/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "program/program.h"

namespace lazyfuse {

// One run of a Program: its buffers and how far it got. Kept by the caller,
// so a run that fails after a step wrote into a donated parameter, and so
// cannot be redone from its parameters, can be finished later instead.
struct ProgramRun {
  std::shared_ptr<const Program> program;
  std::vector<at::Tensor> slots;
  // Buffers whose memory the run may give to the step that reads them last:
  // donated parameters, and step outputs that share no memory.
  std::vector<uint8_t> owned;
  // By buffer: 1, a donated parameter; 2, a step's result in one's memory.
  std::vector<uint8_t> donated;
  size_t next_step = 0;
  bool overwrote_parameter = false;
  // The memory of each donated parameter a step wrote over.
  std::vector<const void*> overwritten_memory;
  // A collective step ran (or failed): the run must never start over, or
  // this rank would run the collective again, alone.
  std::string ran_collective;
  // Set when a step failed after writing over one of its inputs: it cannot
  // run again, so the run cannot be finished. Says why.
  std::string lost;
  // Called with a donated parameter's index once no step reads it again and
  // none took its memory: its holder outside the run lets go too, so the
  // memory goes now, not when the run ends. Unset, the holder keeps it.
  std::function<void(size_t)> let_go_of_parameter;
  // By buffer, the index of the parameter it is, or -1.
  std::vector<int32_t> parameter_index;
};

// `donated[k]`: nothing outside this run reads parameter k's memory, so a
// step may write its result there (buffer donation).
ProgramRun StartProgram(std::shared_ptr<const Program> program,
                        std::vector<at::Tensor> parameters,
                        const std::vector<bool>& donated);

// Runs the steps left and returns the program's results. A failing step
// leaves the run at that step, ready to be continued, unless it had written
// over an input or was a collective (`lost`). With `wanted` (by result), only the steps those
// results need run, and the other results come back undefined: a run finished
// later must not redo work, such as a failed allocation, that nothing reads.
std::vector<at::Tensor> ContinueProgram(ProgramRun& run, const std::vector<bool>& wanted = {});

// Runs `program` from start to end, donating no parameter.
std::vector<at::Tensor> RunProgram(const Program& program, std::vector<at::Tensor> parameters);

}  // namespace lazyfuse
