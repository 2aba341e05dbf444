#pragma once

// lazyfuse's LazyGraphExecutor: LTC's, with a graph hash that also covers how
// nodes are wired to each other.

#include <torch/csrc/lazy/core/lazy_graph_executor.h>

#include <unordered_map>
#include <vector>

namespace lazyfuse {

// The hash of the graph this thread is syncing, as LTC's compile cache keys
// it; set just before LTC looks the graph up, read by the compile log.
torch::lazy::hash_t PendingGraphHash();

// A tensor read by value (.item(), .cpu()) keeps its IR next to its new data
// handle: LTC syncs reads without sync_ltc_data. Consumers would then
// recompute the whole graph, and mark_step, which skips tensors that have a
// handle, would leave that IR holding device data of a finished step. The
// handle is the IR's value, so the IR is dropped.
void DropIrOfComputedTensor(const torch::lazy::LazyTensorPtr& tensor);

// After a sync of every live tensor (mark_step, or a read): starts a new step
// for IR reuse: resets the TrieCache, and lets go of the data of nodes no
// tensor can read any more (DeviceData::EndStep). Drops the IR of tensors that
// have their value.
void EndIrReuseStep(const torch::lazy::BackendDevice& device);

// The value of `tensor`. If it is pending, the read first syncs every live
// tensor of its device, as mark_step does (the step stays open). LTC keeps
// a failure of that graph on the device's lock, to raise again at the next
// sync of any tensor; lazyfuse raises it here, at once, so it is taken off
// the device and a later, unrelated read does not fail with it. The tensors
// get back what the sync took (SyncLiveTensorsGraph), so reading this one
// again raises the same error.
at::Tensor ReadValue(const torch::lazy::LazyTensorPtr& tensor, bool detached);

// Takes a failure LTC kept on the device's lock off it (see ReadValue): each
// failure was raised already, by the sync whose graph failed.
void ClearKeptFailure(const torch::lazy::BackendDevice& device);

// Whether the graph this thread is about to run may overwrite `data`, one of
// its parameters (buffer donation). It may when the sync covers every live
// tensor (mark_step) and nothing but this graph's own DeviceData nodes holds
// the data: then no tensor, and no IR left for a later graph, can read it
// once the graph has run. The memory itself must be unshared as well; the
// caller checks that.
bool GraphMayOverwrite(const torch::lazy::BackendDataPtr& data);

// Whether this thread is syncing every live tensor for a mark_step that
// does not wait: its graph may run after the sync returns.
bool SyncMayReturnEarly();

// The graph this thread syncs failed at a step, having overwritten nothing;
// `needs[k]`: whether result k needs that step. The sync then undoes each
// tensor it updates in place whose result needs it (ltc/prior_values.h).
void NoteResultsNeedingFailedStep(std::vector<bool> needs);

// The graph failed after a step that cannot be undone or redone: it had
// overwritten some of its parameters, or run a collective. So it was not
// rolled back: its results wait for it to be finished (see
// LazyFuseBackendData), or raise when read if it cannot be. The sync
// returns, then raises `error` followed by `explanation`.
void FailWithResultsPending(std::exception_ptr error, std::string explanation);

// Lets a replayed step (step_replay.h), which runs outside a sync, overwrite
// data as a sync would: `sole_holders` counts, for each datum, the holders
// besides the run's argument list, all of which let go of it once the step's
// results are written back.
class ReplayOverwrites {
 public:
  explicit ReplayOverwrites(std::unordered_map<const torch::lazy::BackendData*, long> sole_holders);
  ~ReplayOverwrites();
  ReplayOverwrites(const ReplayOverwrites&) = delete;
  ReplayOverwrites& operator=(const ReplayOverwrites&) = delete;
  // Raises what FailWithResultsPending kept, once the pending results are in
  // their tensors.
  void RaiseIfFailed();
};

class LazyFuseGraphExecutor : public torch::lazy::LazyGraphExecutor {
 public:
  // LTC swaps each synced tensor's IR for an output buffer before the graph
  // runs. If the run fails (out of memory, a kernel error), those buffers
  // stay empty and the tensors' values would be lost; this puts their IR
  // back, clears the failure from the device, and rethrows, so the next
  // mark_step recomputes them. A graph that had already overwritten its
  // parameters or ran a collective keeps its results pending instead
  // (FailWithResultsPending).
  void SyncLiveTensorsGraph(const torch::lazy::BackendDevice* device,
                            c10::ArrayRef<std::string> devices,
                            bool wait) override;

  // Refuses a lazy tensor made by one thread while another thread's step is
  // open (tracing_thread.h).
  void RegisterTensor(std::shared_ptr<torch::lazy::LazyTensor::Data> data) override;

  // Ends the step for IR reuse too (see DeviceData::EndStep). Every caller
  // syncs all live tensors first.
  void MarkStep(const torch::lazy::BackendDevice& device) override;

 protected:
  // LTC hashes each root's DAG and the parameter sequence, but two nodes
  // with equal hashes (same-shape DeviceData, or equal subgraphs) are
  // interchangeable in that hash. When such nodes are also graph outputs,
  // where(m, a, b) and where(m, b, a) get one hash and would share a cached
  // Program that binds parameters differently. Folding every operand's
  // post-order position into the hash removes the ambiguity.
  PostOrderData RunPostOrder(const std::vector<torch::lazy::Value>& ir_values,
                             SyncTensorCollection* coll) override;
};

}  // namespace lazyfuse
