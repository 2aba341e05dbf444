#include "ltc/pending_run_failures.h"

#include <c10/util/Exception.h>

#include "program/error_text.h"

namespace lazyfuse {

std::string WhyResultsPending(const ProgramRun& run) {
  if (!run.ran_collective.empty() && !run.lost.empty()) {
    return "the collective " + run.ran_collective +
           " failed. A collective is never retried, since other ranks may have completed it: "
           "the values this graph computes are lost, and reading one of them raises this "
           "error. Every rank must stop, or re-create the process group and reassign those "
           "tensors (for example, load a checkpoint).";
  }
  if (!run.lost.empty()) {
    return "the failing kernel had already begun writing its results over the memory of some "
           "of its inputs (buffer donation), parameters among them, so neither it nor the "
           "graph can be run again: the values this graph computes are lost, and reading one "
           "of them raises this error. Reassign those tensors (for example, load a checkpoint) "
           "to go on. LAZYFUSE_DONATE=0 turns donation off.";
  }
  const std::string cause =
      run.ran_collective.empty()
          ? "had already written results over some of its inputs, or let go of them (buffer "
            "donation)"
          : "had already run the collective " + run.ran_collective +
                ", which every rank runs exactly once";
  return "the graph " + cause +
         ", so it cannot be redone from the start. Nothing is lost: the tensors it computes keep "
         "their pending values, and the graph finishes when one of them is next read (free "
         "memory first if it ran out). A step that fails on its inputs' values fails again "
         "at each read of a tensor that needs it; the others read as usual, and a tensor it "
         "updates in place that needs the failing step reads as it was before the graph, "
         "unless a step wrote over that value." +
         (run.ran_collective.empty() ? std::string(" LAZYFUSE_DONATE=0 turns donation off.")
                                     : std::string());
}

void RaiseWithResultsPending(const std::exception_ptr& failure, const std::string& explanation) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& error) {
    RaiseWrapping(error, ErrorText(error) + "\nlazyfuse: " + explanation);
  }
  TORCH_CHECK(false, "lazyfuse: ", explanation);
}

bool FailureUndoes(const std::exception_ptr& failure) {
  return !RanOutOfMemory(failure);
}

}  // namespace lazyfuse
