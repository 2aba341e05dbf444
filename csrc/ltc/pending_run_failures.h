#pragma once

// What a failed graph run tells the user, and what its failure allows.

#include <exception>
#include <string>

#include "program/executor.h"

namespace lazyfuse {

// Why a failed run keeps its results pending instead of starting over.
std::string WhyResultsPending(const ProgramRun& run);

// Raises `failure`'s message followed by `explanation`, as the same class of
// error.
[[noreturn]] void RaiseWithResultsPending(const std::exception_ptr& failure,
                                          const std::string& explanation);

// Whether a graph that failed with `failure` undoes the tensors it updates in
// place (ltc/prior_values.h): not where it ran out of memory, which freeing
// memory cures.
bool FailureUndoes(const std::exception_ptr& failure);

}  // namespace lazyfuse
