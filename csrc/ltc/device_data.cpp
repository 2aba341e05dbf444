#include "ltc/device_data.h"

#include <torch/csrc/lazy/core/internal_ops/ltc_ops.h>
#include <torch/csrc/lazy/core/ir_builder.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "ltc/backend_data.h"
#include "ltc/ir_reuse.h"

namespace lazyfuse {
namespace {

std::atomic<uint64_t> g_step{1};

// Every live DeviceData node that holds data, so that EndStep can release
// data no graph can read. A node whose data was released leaves the set:
// the TrieCache keeps such nodes for every shape ever traced, and a walk
// over them all made each step's cost grow with the shapes seen. Nodes are
// built and freed on autograd's threads too.
struct NodesHoldingData {
  std::mutex mutex;
  std::unordered_set<DeviceData*> nodes;
};

NodesHoldingData& Holding() {
  static auto* holding = new NodesHoldingData();  // leaked: nodes may die at exit
  return *holding;
}

}  // namespace

torch::lazy::OpKind DeviceData::ClassOpKind() {
  return torch::lazy::ltc_device_data;
}

DeviceData::DeviceData(std::shared_ptr<torch::lazy::BackendData> data)
    : DeviceData(data, IsWrappedNumber(data)) {}

DeviceData::DeviceData(std::shared_ptr<torch::lazy::BackendData> data, bool wrapped_number)
    : LazyFuseNode(ClassOpKind(),
                   /*operands=*/{},
                   data->shape(),
                   /*num_outputs=*/1,
                   /*hash_seed=*/static_cast<uint32_t>(wrapped_number ? 0x6c6677 : 0x6c6664)),
      data_(std::move(data)),
      wrapped_number_(wrapped_number),
      last_used_step_(g_step.load(std::memory_order_relaxed)) {
  NodesHoldingData& holding = Holding();
  std::lock_guard<std::mutex> lock(holding.mutex);
  holding.nodes.insert(this);
}

DeviceData::~DeviceData() {
  NodesHoldingData& holding = Holding();
  std::lock_guard<std::mutex> lock(holding.mutex);
  holding.nodes.erase(this);
}

torch::lazy::NodePtr DeviceData::Create(const std::shared_ptr<torch::lazy::BackendData>& data) {
  torch::lazy::NodePtr node = torch::lazy::ReuseOrMakeNode<DeviceData>(data);
  // ReuseOrMakeNode may return a recycled node still holding older data.
  auto* device_data = static_cast<DeviceData*>(node.get());
  if (device_data->data_ != data) {
    NodesHoldingData& holding = Holding();
    std::lock_guard<std::mutex> lock(holding.mutex);
    device_data->data_ = data;
    holding.nodes.insert(device_data);
  }
  device_data->MarkUsed();
  return node;
}

bool DeviceData::CanBeReused(const std::shared_ptr<torch::lazy::BackendData>& data) const {
  if (data_ == data) {
    return true;
  }
  return last_used_step_ < g_step.load(std::memory_order_relaxed) && shape() == data->shape() &&
         wrapped_number_ == IsWrappedNumber(data);
}

bool DeviceData::IsWrappedNumber(const std::shared_ptr<torch::lazy::BackendData>& data) {
  const auto* ours = dynamic_cast<const LazyFuseBackendData*>(data.get());
  return ours != nullptr && ours->is_wrapped_number();
}

void DeviceData::MarkUsed() const {
  last_used_step_ = g_step.load(std::memory_order_relaxed);
}

void DeviceData::EndStep(const std::vector<const torch::lazy::Node*>& held_by_tensors) {
  const uint64_t step = g_step.fetch_add(1, std::memory_order_relaxed) + 1;
  // A live tensor may keep a device-data node as its IR value into the new
  // step: it counts as used there.
  for (const torch::lazy::Node* node : held_by_tensors) {
    if (const DeviceData* device_data = Cast(node)) {
      device_data->last_used_step_ = step;
    }
  }
  NodesHoldingData& holding = Holding();
  std::lock_guard<std::mutex> lock(holding.mutex);
  for (auto it = holding.nodes.begin(); it != holding.nodes.end();) {
    DeviceData* node = *it;
    // Every live tensor was just synced, so a node no tensor holds is only
    // history in the TrieCache: no graph can read its data any more.
    if (node->last_used_step_ < step) {
      node->data_.reset();
      it = holding.nodes.erase(it);
    } else {
      ++it;
    }
  }
  TORCH_LAZY_VALUE_METRIC("LazyFuseDeviceDataHeld", holding.nodes.size());
}

std::string DeviceData::ToString() const {
  std::ostringstream out;
  out << LazyFuseNode::ToString();
  if (data_ != nullptr) {
    out << ", device=" << data_->device();
  }
  return out.str();
}

const DeviceData* DeviceData::Cast(const torch::lazy::Node* node) {
  if (node == nullptr || node->op() != ClassOpKind()) {
    return nullptr;
  }
  return static_cast<const DeviceData*>(node);
}

torch::lazy::OpKind TensorList::ClassOpKind() {
  static const torch::lazy::OpKind kind(c10::Symbol::prim("TensorList"));
  return kind;
}

TensorList::TensorList(torch::lazy::OpList values)
    : LazyFuseNode(ClassOpKind(),
                   values,
                   torch::lazy::Shape(),
                   /*num_outputs=*/1,
                   /*hash_seed=*/static_cast<uint32_t>(0x746c)) {}

bool TensorList::CanBeReused(torch::lazy::OpList values) const {
  if (operands().size() != values.size()) {
    return false;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!SameOperand(operand(i), values[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace lazyfuse
