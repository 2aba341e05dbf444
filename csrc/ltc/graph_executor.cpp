#include "ltc/graph_executor.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/ir_util.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/trie.h>

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ltc/backend_data.h"
#include "ltc/config.h"
#include "ltc/device_data.h"
#include "ltc/pending_run.h"
#include "ltc/pending_run_failures.h"
#include "ltc/prior_values.h"
#include "ltc/step_replay.h"
#include "ltc/tracing_thread.h"

namespace lazyfuse {
namespace {

thread_local torch::lazy::hash_t t_pending_hash;

// Set while this thread syncs every live tensor: the DeviceData nodes of the
// graph being synced, counted per data.
struct FullSync {
  bool active = false;
  bool may_return_early = false;
  std::unordered_map<const torch::lazy::BackendData*, long> graph_holders;
  std::exception_ptr failure;
  std::string explanation;
};
thread_local FullSync t_full_sync;

// The results of the graph this thread synced last, in order (the synced
// tensors' IR keeps their nodes alive), and for each whether it needs what
// failed (NoteResultsNeedingFailedStep): a step, or a parameter with no value.
struct SyncedResults {
  std::vector<std::pair<const torch::lazy::Node*, size_t>> roots;
  std::vector<bool> needs_failed_step;
};
thread_local SyncedResults t_synced_results;

class FullSyncScope {
 public:
  explicit FullSyncScope(bool may_return_early) {
    t_full_sync = FullSync();
    t_full_sync.active = true;
    t_full_sync.may_return_early = may_return_early;
  }
  ~FullSyncScope() {
    t_full_sync = FullSync();
  }
};

// Whether the failed graph of this sync needed its failing step for `value`.
bool NeedsFailedStep(const torch::lazy::Value& value) {
  const auto& roots = t_synced_results.roots;
  const auto& needs = t_synced_results.needs_failed_step;
  if (roots.size() != needs.size()) {
    return false;
  }
  for (size_t k = 0; k < roots.size(); ++k) {
    if (needs[k] && roots[k].first == value.node.get() && roots[k].second == value.index) {
      return true;
    }
  }
  return false;
}

// Data with no value for good in place of the tensor's IR (and of any link
// to an earlier value).
void GiveNoValueForGood(const torch::lazy::LazyTensorPtr& tensor,
                        const std::exception_ptr& failure,
                        const std::string& explanation) {
  tensor->SetDataHandle(LazyFuseBackendData::Failed(
      tensor->GetDevice(), tensor->shape().Get(), failure, explanation));
  ForgetPriorValue(*tensor);
  TORCH_LAZY_COUNTER("LazyFuseValuesFailed", 1);
}

// A tensor whose graph failed, having overwritten nothing, gets back the
// value it held before that graph if it has one (the graph updated it in
// place) and `undo`. Otherwise, if it needs the failing step (`needs_failed`,
// the failure raised), it gets no value for good: that step fails on the
// same values again, so running it at every later sync would only raise the
// same error each time. Otherwise it gets its IR back, to run again.
void RestoreAfterFailure(const torch::lazy::LazyTensorPtr& tensor,
                         const torch::lazy::Value& value,
                         bool undo,
                         const std::exception_ptr& needs_failed) {
  if (undo) {
    if (torch::lazy::BackendDataPtr prior = PriorValue(*tensor)) {
      tensor->SetDataHandle(std::move(prior));
      ForgetPriorValue(*tensor);
      TORCH_LAZY_COUNTER("LazyFuseValuesUndone", 1);
      return;
    }
  }
  if (needs_failed != nullptr) {
    GiveNoValueForGood(tensor, needs_failed, LazyFuseBackendData::kNoValueForGood);
    return;
  }
  tensor->SetIrValue(value);
}

// The failure to keep in a tensor's data in place of its value, or nullptr.
std::exception_ptr FailureKept(const torch::lazy::Value& value,
                               const std::exception_ptr& failure,
                               bool may_undo) {
  return may_undo && NeedsFailedStep(value) ? failure : nullptr;
}

// A tensor whose IR reads data with no value for good gets none either,
// before the sync, and leaves `pending`: its graph would fail on that data,
// and raise at every sync while the tensor lived (a running total a failed
// loss was added to), the rest of the graph waiting. The failure was raised
// once, where it happened; the tensor raises it when read. A result of a run
// whose failure was raised is made first, to learn whether it has a value.
void FailTensorsReadingFailedData(
    std::vector<std::pair<torch::lazy::LazyTensorPtr, torch::lazy::Value>>* pending) {
  if (LazyFuseBackendData::FailedAlive() == 0 && FailedRunsRaisedAlive() == 0) {
    return;
  }
  std::vector<const torch::lazy::Node*> roots;
  roots.reserve(pending->size());
  for (const auto& entry : *pending) {
    roots.push_back(entry.second.node.get());
  }
  // By node: the failed data it reads, or nullptr; operands come first.
  std::unordered_map<const torch::lazy::Node*, const LazyFuseBackendData*> reads;
  for (const torch::lazy::Node* node : torch::lazy::Util::ComputePostOrder(roots)) {
    const LazyFuseBackendData* failed = nullptr;
    if (const DeviceData* leaf = DeviceData::Cast(node)) {
      const auto* data = dynamic_cast<const LazyFuseBackendData*>(leaf->data().get());
      if (data != nullptr && data->awaits_failed_run()) {
        try {
          data->tensor();
        } catch (...) {
          // Raised before; if it left the data a value to make, the sync meets it again.
        }
      }
      failed = data != nullptr && data->failed() ? data : nullptr;
    }
    for (const torch::lazy::Output& operand : node->operands()) {
      failed = failed != nullptr ? failed : reads.at(operand.node);
    }
    reads.emplace(node, failed);
  }
  auto kept = pending->begin();
  for (auto& entry : *pending) {
    const auto& [tensor, value] = entry;
    if (const LazyFuseBackendData* failed = reads.at(value.node.get())) {
      GiveNoValueForGood(tensor, failed->failure(), failed->failure_explanation());
    } else {
      if (&*kept != &entry) {
        *kept = std::move(entry);
      }
      ++kept;
    }
  }
  pending->erase(kept, pending->end());
}

// Data, a constant, or a Python number wrapped as a tensor for an op (which
// names a refusal, tracing_thread.h) adds nothing to the graph.
bool AddsToGraph(const torch::lazy::Node* node) {
  return node != nullptr && node->op() != torch::lazy::OpKind(at::prim::Constant) &&
         DeviceData::Cast(node) == nullptr;
}

}  // namespace

void EndIrReuseStep(const torch::lazy::BackendDevice& device) {
  // LTC's MarkStep resets the TrieCache too; a read that synced every live
  // tensor calls this alone, and must reset it as well.
  torch::lazy::TrieCache::Get()->ResetCurrent();
  std::vector<const torch::lazy::Node*> held;
  for (const auto& tensor : torch::lazy::LazyGraphExecutor::Get()->GetLiveTensors(&device)) {
    DropIrOfComputedTensor(tensor);
    if (const torch::lazy::Value value = tensor->CurrentIrValue()) {
      held.push_back(value.node.get());
    }
  }
  DeviceData::EndStep(held);
}

torch::lazy::hash_t PendingGraphHash() {
  return t_pending_hash;
}

void DropIrOfComputedTensor(const torch::lazy::LazyTensorPtr& tensor) {
  if (tensor->CurrentDataHandle() != nullptr && tensor->data()->ir_value) {
    tensor->data()->ir_value = torch::lazy::Value();
  }
}

at::Tensor ReadValue(const torch::lazy::LazyTensorPtr& tensor, bool detached) {
  if (tensor->CurrentDataHandle() == nullptr && tensor->CurrentIrValue()) {
    // The read runs every live tensor's pending value, as mark_step does. LTC
    // would run this tensor's alone and leave the others' IR pending, IR that
    // shares this graph's nodes: the next graph computed them again, so a
    // loop reading its loss each iteration without mark_step recomputed every
    // earlier iteration at each read. This sync puts back, on failure, what
    // it took (SyncLiveTensorsGraph).
    const torch::lazy::BackendDevice device = tensor->GetDevice();
    torch::lazy::LazyGraphExecutor::Get()->SyncLiveTensorsGraph(&device, {}, /*wait=*/true);
    // Every live tensor has its value, as after mark_step, so IR reuse starts
    // a new step as well. Otherwise its TrieCache kept the nodes, and the old
    // data, of every read until a mark_step that a loop of reads may never
    // call, and as holders of that data they kept the next graph from
    // donating it.
    EndIrReuseStep(device);
  }
  // The sync gave every live tensor a value, or data that raises its failure;
  // LTC's read would sync this tensor alone, and put nothing back on failure.
  TORCH_CHECK(tensor->CurrentDataHandle() != nullptr || !tensor->CurrentIrValue(),
              "lazyfuse: internal error: a read synced every live tensor, but the tensor read "
              "still has no value; its pending value is kept");
  try {
    at::Tensor value = tensor->ToTensor(detached);
    ForgetPriorValue(*tensor);
    return value;
  } catch (...) {
    t_synced_results = SyncedResults();  // its node addresses may be reused
    ClearKeptFailure(tensor->GetDevice());
    throw;
  }
}

void ClearKeptFailure(const torch::lazy::BackendDevice& device) {
  try {
    torch::lazy::LazyGraphExecutor::Get()->DeviceBarrier(device);
  } catch (...) {
  }
}

void NoteResultsNeedingFailedStep(std::vector<bool> needs) {
  t_synced_results.needs_failed_step = std::move(needs);
}

bool SyncMayReturnEarly() {
  return t_full_sync.active && t_full_sync.may_return_early;
}

bool GraphMayOverwrite(const torch::lazy::BackendDataPtr& data) {
  if (!t_full_sync.active || data == nullptr) {
    return false;
  }
  auto it = t_full_sync.graph_holders.find(data.get());
  // The other holder is LTC's list of the graph's parameters.
  return it != t_full_sync.graph_holders.end() && data.use_count() == it->second + 1;
}

void FailWithResultsPending(std::exception_ptr error, std::string explanation) {
  TORCH_CHECK(t_full_sync.active,
              "lazyfuse: a graph that cannot be run again (it overwrote parameters or ran a "
              "collective) failed outside mark_step: ",
              explanation);
  t_full_sync.failure = std::move(error);
  t_full_sync.explanation = std::move(explanation);
}

ReplayOverwrites::ReplayOverwrites(
    std::unordered_map<const torch::lazy::BackendData*, long> sole_holders) {
  t_full_sync = FullSync();
  t_full_sync.active = true;
  t_full_sync.graph_holders = std::move(sole_holders);
}

ReplayOverwrites::~ReplayOverwrites() {
  t_full_sync = FullSync();
}

void ReplayOverwrites::RaiseIfFailed() {
  if (t_full_sync.failure) {
    std::exception_ptr failure = t_full_sync.failure;
    const std::string explanation = t_full_sync.explanation;
    t_full_sync = FullSync();
    RaiseWithResultsPending(failure, explanation);
  }
}

void LazyFuseGraphExecutor::SyncLiveTensorsGraph(const torch::lazy::BackendDevice* device,
                                                 c10::ArrayRef<std::string> devices,
                                                 bool wait) {
  std::vector<std::pair<torch::lazy::LazyTensorPtr, torch::lazy::Value>> pending;
  for (auto& tensor : GetLiveTensors(device)) {
    torch::lazy::Value value = tensor->CurrentIrValue();
    if (value) {
      pending.emplace_back(tensor, std::move(value));
    }
  }
  CheckSyncMayRun("a sync of the lazy device (mark_step, or a read such as .cpu() or .item())",
                  std::any_of(pending.begin(), pending.end(), [](const auto& entry) {
                    return entry.first->CurrentDataHandle() == nullptr &&
                           AddsToGraph(entry.second.node.get());
                  }));
  FailTensorsReadingFailedData(&pending);
  FullSyncScope full_sync(/*may_return_early=*/!wait);
  try {
    torch::lazy::LazyGraphExecutor::SyncLiveTensorsGraph(device, devices, wait);
    if (wait && device != nullptr) {
      DeviceBarrier(*device);  // surfaces a failure of this very sync
    }
  } catch (...) {
    const std::exception_ptr failure = std::current_exception();
    const bool may_undo = FailureUndoes(failure);
    for (auto& [tensor, value] : pending) {
      const std::exception_ptr kept = FailureKept(value, failure, may_undo);
      RestoreAfterFailure(tensor, value, kept != nullptr, kept);
    }
    t_synced_results = SyncedResults();
    if (device != nullptr) {
      ClearKeptFailure(*device);
    }
    throw;
  }
  // A result still to be made (its graph runs on the CPU stream, or failed
  // after writing over a parameter) may be undone to what its tensor held.
  std::vector<const torch::lazy::LazyTensor*> synced;
  synced.reserve(pending.size());
  for (const auto& entry : pending) {
    synced.push_back(entry.first.get());
  }
  const std::vector<torch::lazy::BackendDataPtr> priors = PriorValues(synced);
  for (size_t k = 0; k < priors.size(); ++k) {
    if (priors[k] == nullptr) {
      continue;
    }
    auto* ours = dynamic_cast<LazyFuseBackendData*>(synced[k]->CurrentDataHandle().get());
    if (ours != nullptr) {
      ours->SetPrior(priors[k]);
    }
  }
  ForgetAllPriorValues();
  if (t_full_sync.failure) {
    RaiseWithResultsPending(t_full_sync.failure, t_full_sync.explanation);
  }
  if (wait) {
    WaitForCpuStreamRuns();  // surfaces a failure of a graph an earlier mark_step left running
  }
  if (Capturing()) {
    std::vector<torch::lazy::BackendDataPtr> handles;
    for (auto& [tensor, value] : pending) {
      handles.push_back(tensor->CurrentDataHandle());
    }
    NoteSynced(handles);
  }
}

void LazyFuseGraphExecutor::RegisterTensor(std::shared_ptr<torch::lazy::LazyTensor::Data> data) {
  const torch::lazy::Node* node = data->ir_value.node.get();
  if (!AddsToGraph(node)) {
    torch::lazy::LazyGraphExecutor::RegisterTensor(std::move(data));
    return;
  }
  const torch::lazy::BackendDevice device = data->device;
  ClaimTracing([node] { return node->op().ToString(); },
               [&] {
                 for (const auto& tensor : GetLiveTensors(&device)) {
                   if (tensor->CurrentDataHandle() == nullptr &&
                       AddsToGraph(tensor->CurrentIrValue().node.get())) {
                     return true;
                   }
                 }
                 return false;
               });
  torch::lazy::LazyGraphExecutor::RegisterTensor(std::move(data));
}

void LazyFuseGraphExecutor::MarkStep(const torch::lazy::BackendDevice& device) {
  torch::lazy::LazyGraphExecutor::MarkStep(device);
  EndIrReuseStep(device);
}

torch::lazy::LazyGraphExecutor::PostOrderData LazyFuseGraphExecutor::RunPostOrder(
    const std::vector<torch::lazy::Value>& ir_values, SyncTensorCollection* coll) {
  PostOrderData po_data = torch::lazy::LazyGraphExecutor::RunPostOrder(ir_values, coll);
  NoteGraph(po_data.post_order);
  t_synced_results.roots.clear();
  t_synced_results.needs_failed_step.clear();
  for (const torch::lazy::Value& root : ir_values) {
    t_synced_results.roots.emplace_back(root.node.get(), root.index);
  }
  if (t_full_sync.active) {
    t_full_sync.graph_holders.clear();
    for (const torch::lazy::Node* node : po_data.post_order) {
      if (const DeviceData* leaf = DeviceData::Cast(node)) {
        ++t_full_sync.graph_holders[leaf->data().get()];
      }
    }
  }
  std::unordered_map<const torch::lazy::Node*, uint64_t> position;
  position.reserve(po_data.post_order.size());
  torch::lazy::hash_t wiring = coll->hash;
  for (const torch::lazy::Node* node : po_data.post_order) {
    for (const auto& operand : node->operands()) {
      wiring = torch::lazy::HashCombine(wiring, position.at(operand.node) * 64 + operand.index);
    }
    position.emplace(node, position.size());
  }
  for (const auto& root : ir_values) {
    wiring = torch::lazy::HashCombine(wiring, position.at(root.node.get()) * 64 + root.index);
  }
  // A graph compiled for another kernel target must not be served from the cache.
  wiring = torch::lazy::HashCombine(wiring, KernelSettingsHash());
  coll->hash = wiring;
  // LTC adds the parameter sequence to the hash next; the compile log shows
  // the hash as LTC's cache will key it.
  t_pending_hash = torch::lazy::HashCombine(wiring, torch::lazy::Hash(po_data.parameter_sequence));
  return po_data;
}

}  // namespace lazyfuse
