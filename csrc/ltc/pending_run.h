#pragma once

// The results of a graph run that has not finished, as device data each made
// on its first read:
// - a run that failed after a step that cannot be undone (it overwrote some
//   of its parameters, or ran a collective) finishes on that read, on the
//   reading thread;
// - a run mark_step handed to the CPU stream (asynchronous execution,
//   runtime/cpu/stream.h) runs there while the next step traces, and a read
//   waits for it. If it failed there, nothing is lost: a read runs the rest
//   of it again, and raises if it fails again.

#include <torch/csrc/lazy/backend/backend_data.h>
#include <torch/csrc/lazy/backend/backend_device.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "program/executor.h"

namespace lazyfuse {

struct CollectiveGroups;  // ops/collective_call.h

// Pending data for each of the failed `run`'s results; the sync that ran it
// raises `failure`. Until the run finishes it holds its `arguments`, the
// values a tensor it updates may be undone to (ltc/prior_values.h).
std::vector<torch::lazy::BackendDataPtr> ResultsFinishedOnRead(
    std::shared_ptr<ProgramRun> run,
    const torch::lazy::BackendDevice& device,
    std::vector<torch::lazy::BackendDataPtr> arguments,
    std::exception_ptr failure);

// Hands `run`, not yet started, to the CPU stream and returns pending data
// for each of its results, holding `arguments` as above. `groups`: those of
// its collectives, if it holds any.
std::vector<torch::lazy::BackendDataPtr> ResultsRunOnCpuStream(
    std::shared_ptr<ProgramRun> run,
    const torch::lazy::BackendDevice& device,
    std::vector<torch::lazy::BackendDataPtr> arguments,
    std::shared_ptr<const CollectiveGroups> groups);

// Makes the values of those of `data` that wait for the CPU stream: a graph
// reads its arguments' values, and decides donation, only once they exist.
void SettleStreamResults(c10::ArrayRef<torch::lazy::BackendDataPtr> data);

// How many runs that failed on values, their failure raised, still have
// results to make: while none has, no sync looks for them
// (LazyFuseBackendData::awaits_failed_run).
long FailedRunsRaisedAlive();

// Waits for every graph on the CPU stream, then raises the first failure of
// one whose results are still pending.
void WaitForCpuStreamRuns();

}  // namespace lazyfuse
