#include "lazyfuse/lazyfuse_device_data.h"

#include <torch/csrc/lazy/core/internal_ops/ltc_ops.h>
#include <torch/csrc/lazy/core/ir_builder.h>

#include <sstream>

#include "lazyfuse/lazyfuse_lowering_context.h"

namespace lazyfuse {

torch::lazy::OpKind DeviceData::ClassOpKind() {
  return torch::lazy::ltc_device_data;
}

DeviceData::DeviceData(std::shared_ptr<torch::lazy::BackendData> data)
    : LazyFuseNode(ClassOpKind(),
                   /*operands=*/{},
                   data->shape(),
                   /*num_outputs=*/1,
                   /*hash_seed=*/static_cast<uint32_t>(0x6c6664)),
      data_(std::move(data)) {}

torch::lazy::NodePtr DeviceData::Create(const std::shared_ptr<torch::lazy::BackendData>& data) {
  torch::lazy::NodePtr node = torch::lazy::ReuseOrMakeNode<DeviceData>(data);
  // ReuseOrMakeNode may return a recycled node still holding older data.
  auto* device_data = static_cast<DeviceData*>(node.get());
  if (device_data->data() != data) {
    device_data->SetData(data);
  }
  return node;
}

std::string DeviceData::ToString() const {
  std::ostringstream out;
  out << LazyFuseNode::ToString() << ", device=" << data_->device();
  return out.str();
}

void DeviceData::Lower(LazyFuseLoweringContext& ctx) const {
  ctx.EmitParameter(this, data_);
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
    if (!(operand(i) == values[i])) {
      return false;
    }
  }
  return true;
}

void TensorList::Lower(LazyFuseLoweringContext& ctx) const {
  ctx.EmitTensorList(this);
}

}  // namespace lazyfuse
