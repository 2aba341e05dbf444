#include "program/lowering_context.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include "ltc/backing_ops_guard.h"
#include "ltc/device_data.h"
#include "ltc/node.h"

namespace lazyfuse {

LazyFuseComputation::LazyFuseComputation(std::shared_ptr<const Program> program)
    : program_(std::move(program)) {
  for (size_t k = 0; k < program_->parameters.size(); ++k) {
    const BufferInfo& info = program_->buffers[program_->parameters[k]];
    parameter_shapes_.emplace_back(info.dtype, info.sizes);
    parameter_names_.push_back("p" + std::to_string(k));
  }
}

LazyFuseLoweringContext::LazyFuseLoweringContext(const std::string& name,
                                                 torch::lazy::BackendDevice device)
    : torch::lazy::LoweringContext(name, std::move(device)) {}

LazyFuseLoweringContext::LazyFuseLoweringContext(const std::string& name,
                                                 torch::lazy::BackendDevice device,
                                                 c10::ArrayRef<const torch::lazy::Node*> post_order,
                                                 torch::lazy::Util::EmissionMap emit_status)
    : torch::lazy::LoweringContext(name, std::move(device), post_order, std::move(emit_status)) {
  TORCH_LAZY_TIMED("LazyFuseLowering");
  const BackingOpsGuard backing_ops;  // a sync may run inside a functorch transform
  for (const torch::lazy::Node* node : post_order) {
    Lower(node);
  }
}

void LazyFuseLoweringContext::Lower(const torch::lazy::Node* node) {
  if (outputs_.count(node) != 0 || tensor_lists_.count(node) != 0) {
    return;
  }
  if (const DeviceData* device_data = DeviceData::Cast(node)) {
    TORCH_CHECK(device_data->data() != nullptr,
                "lazyfuse: device data of a finished step reached a graph");
    EmitParameter(*device_data);
    return;
  }
  if (node->op() == TensorList::ClassOpKind()) {
    EmitTensorList(node);
    return;
  }
  const auto* lazyfuse_node = dynamic_cast<const LazyFuseNode*>(node);
  TORCH_CHECK(lazyfuse_node != nullptr,
              "lazyfuse: the graph holds a node from another LTC backend: ",
              node->ToString());
  lazyfuse_node->Lower(*this);
}

BufferId LazyFuseLoweringContext::BufferFor(const torch::lazy::Output& output) {
  auto it = outputs_.find(output.node);
  if (it == outputs_.end()) {
    // Results may name nodes outside the post-order that LTC passed (e.g.
    // when lowering for a debug dump); lower them on demand.
    for (const auto& operand : output.node->operands()) {
      BufferFor(operand);
    }
    Lower(output.node);
    it = outputs_.find(output.node);
  }
  TORCH_CHECK(it != outputs_.end() && output.index < it->second.size(),
              "lazyfuse: node was not lowered: ",
              output.node->ToString());
  return it->second[output.index];
}

void LazyFuseLoweringContext::EmitStep(const torch::lazy::Node* node,
                                       StepKind kind,
                                       StepFn fn,
                                       StepAttrs attrs,
                                       std::string overload) {
  Step step;
  step.op = node->op().ToString();
  step.detail = node->ToString();
  step.kind = kind;
  bool has_list = false;
  for (const auto& operand : node->operands()) {
    if (tensor_lists_.count(operand.node) != 0) {
      has_list = true;
      break;
    }
  }
  for (const auto& operand : node->operands()) {
    if (tensor_lists_.count(operand.node) != 0) {
      const auto& members = outputs_.at(operand.node);
      step.inputs.insert(step.inputs.end(), members.begin(), members.end());
      step.operand_arity.push_back(static_cast<uint32_t>(members.size()));
    } else {
      step.inputs.push_back(BufferFor(operand));
      if (has_list) {
        step.operand_arity.push_back(1);
      }
    }
  }
  std::vector<BufferId>& outs = outputs_[node];
  for (const auto& shape : node->shapes()) {
    outs.push_back(builder_.AddBuffer(shape.scalar_type(), shape.sizes().vec()));
  }
  step.outputs = outs;
  step.fn = std::move(fn);
  step.attrs = std::move(attrs);
  step.overload = std::move(overload);
  builder_.AddStep(std::move(step));
}

void LazyFuseLoweringContext::EmitParameter(const DeviceData& node) {
  const std::shared_ptr<torch::lazy::BackendData>& data = node.data();
  // Same numbering as LazyGraphExecutor::RunPostOrder: first appearance in
  // post-order, one parameter per distinct data handle.
  const auto handle = data->GetHandle();
  auto it = parameter_by_handle_.find(handle);
  if (it == parameter_by_handle_.end()) {
    const auto& shape = data->shape();
    BufferId id =
        builder_.AddParameter(shape.scalar_type(), shape.sizes().vec(), node.wrapped_number());
    it = parameter_by_handle_.emplace(handle, BoundParameter{id, parameters_.size()}).first;
    parameters_.push_back(data);
  }
  parameter_sequence_.push_back(it->second.index);
  outputs_[&node] = {it->second.buffer};
}

void LazyFuseLoweringContext::EmitConstant(const torch::lazy::Node* node, at::Tensor value) {
  outputs_[node] = {builder_.AddConstant(std::move(value))};
}

void LazyFuseLoweringContext::EmitTensorList(const torch::lazy::Node* node) {
  std::vector<BufferId> members;
  for (const auto& operand : node->operands()) {
    members.push_back(BufferFor(operand));
  }
  outputs_[node] = std::move(members);
  tensor_lists_.insert(node);
}

size_t LazyFuseLoweringContext::AddResult(const torch::lazy::Output& output) {
  return builder_.AddResult(BufferFor(output));
}

void LazyFuseLoweringContext::AddParameter(const torch::lazy::Output& output,
                                           size_t /*index*/,
                                           const torch::lazy::Shape& shape,
                                           const std::string& /*name*/) {
  BufferId id = builder_.AddParameter(shape.scalar_type(), shape.sizes().vec());
  outputs_[output.node] = {id};
}

torch::lazy::ComputationPtr LazyFuseLoweringContext::Build() {
  const BackingOpsGuard backing_ops;
  auto program = std::make_shared<const Program>(builder_.Finish());
  return std::make_shared<LazyFuseComputation>(std::move(program));
}

}  // namespace lazyfuse
