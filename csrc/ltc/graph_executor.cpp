#include "ltc/graph_executor.h"

#include <unordered_map>

#include "ltc/config.h"
#include "ltc/device_data.h"

namespace lazyfuse {
namespace {

thread_local torch::lazy::hash_t t_pending_hash;

}  // namespace

torch::lazy::hash_t PendingGraphHash() {
  return t_pending_hash;
}

void DropIrOfComputedTensor(const torch::lazy::LazyTensorPtr& tensor) {
  if (tensor->CurrentDataHandle() != nullptr && tensor->data()->ir_value) {
    tensor->data()->ir_value = torch::lazy::Value();
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
  try {
    torch::lazy::LazyGraphExecutor::SyncLiveTensorsGraph(device, devices, wait);
    if (wait && device != nullptr) {
      DeviceBarrier(*device);  // surfaces a failure of this very sync
    }
  } catch (...) {
    for (auto& [tensor, value] : pending) {
      tensor->SetIrValue(value);
    }
    if (device != nullptr) {
      try {
        DeviceBarrier(*device);  // takes the stored failure off the device
      } catch (...) {
      }
    }
    throw;
  }
}

void LazyFuseGraphExecutor::MarkStep(const torch::lazy::BackendDevice& device) {
  torch::lazy::LazyGraphExecutor::MarkStep(device);
  std::vector<const torch::lazy::Node*> held;
  for (const auto& tensor : GetLiveTensors(&device)) {
    DropIrOfComputedTensor(tensor);
    if (const torch::lazy::Value value = tensor->CurrentIrValue()) {
      held.push_back(value.node.get());
    }
  }
  DeviceData::EndStep(held);
}

torch::lazy::LazyGraphExecutor::PostOrderData LazyFuseGraphExecutor::RunPostOrder(
    const std::vector<torch::lazy::Value>& ir_values, SyncTensorCollection* coll) {
  PostOrderData po_data = torch::lazy::LazyGraphExecutor::RunPostOrder(ir_values, coll);
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
