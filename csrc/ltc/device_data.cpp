#include "ltc/device_data.h"

#include <torch/csrc/lazy/core/internal_ops/ltc_ops.h>
#include <torch/csrc/lazy/core/ir_builder.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "ltc/backend_data.h"
#include "ltc/ir_reuse.h"

namespace lazyfuse {
namespace {

std::atomic<uint64_t> g_step{1};

// Every live DeviceData node, so that EndStep can release data no graph can
// read. Nodes are built and freed on autograd's threads too.
struct LiveNodes {
  std::mutex mutex;
  std::unordered_set<DeviceData*> nodes;
};

LiveNodes& Live() {
  static auto* live = new LiveNodes();  // leaked: nodes may die at exit
  return *live;
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
  LiveNodes& live = Live();
  std::lock_guard<std::mutex> lock(live.mutex);
  live.nodes.insert(this);
}

DeviceData::~DeviceData() {
  LiveNodes& live = Live();
  std::lock_guard<std::mutex> lock(live.mutex);
  live.nodes.erase(this);
}

torch::lazy::NodePtr DeviceData::Create(const std::shared_ptr<torch::lazy::BackendData>& data) {
  torch::lazy::NodePtr node = torch::lazy::ReuseOrMakeNode<DeviceData>(data);
  // ReuseOrMakeNode may return a recycled node still holding older data.
  auto* device_data = static_cast<DeviceData*>(node.get());
  if (device_data->data_ != data) {
    device_data->data_ = data;
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
  LiveNodes& live = Live();
  std::lock_guard<std::mutex> lock(live.mutex);
  for (DeviceData* node : live.nodes) {
    // Every live tensor was just synced, so a node no tensor holds is only
    // history in the TrieCache: no graph can read its data any more.
    if (node->last_used_step_ < step) {
      node->data_.reset();
    }
  }
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
