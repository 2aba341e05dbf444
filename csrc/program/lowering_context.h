#pragma once

// Turns LTC's post-order node list into a lazyfuse Program.

#include <torch/csrc/lazy/backend/lowering_context.h>

#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "program/program.h"

namespace lazyfuse {

class DeviceData;

class LazyFuseComputation : public torch::lazy::Computation {
 public:
  explicit LazyFuseComputation(std::shared_ptr<const Program> program);

  int parameters_size() const override {
    return static_cast<int>(parameter_shapes_.size());
  }
  const std::vector<torch::lazy::Shape>& parameter_shapes() const override {
    return parameter_shapes_;
  }
  const std::vector<std::string>& parameter_names() const override {
    return parameter_names_;
  }
  const torch::lazy::Shape& result_shape() const override {
    return result_shape_;
  }
  const std::string to_string() const override {
    return program_->ToString();
  }

  const std::shared_ptr<const Program>& program() const {
    return program_;
  }

 private:
  std::shared_ptr<const Program> program_;
  std::vector<torch::lazy::Shape> parameter_shapes_;
  std::vector<std::string> parameter_names_;
  torch::lazy::Shape result_shape_;
};

class LazyFuseLoweringContext : public torch::lazy::LoweringContext {
 public:
  LazyFuseLoweringContext(const std::string& name, torch::lazy::BackendDevice device);
  LazyFuseLoweringContext(const std::string& name,
                          torch::lazy::BackendDevice device,
                          c10::ArrayRef<const torch::lazy::Node*> post_order,
                          torch::lazy::Util::EmissionMap emit_status);

  size_t AddResult(const torch::lazy::Output& output) override;
  void AddParameter(const torch::lazy::Output& output,
                    size_t index,
                    const torch::lazy::Shape& shape,
                    const std::string& name) override;
  torch::lazy::ComputationPtr Build() override;

  // Called by nodes from their Lower().
  void EmitStep(const torch::lazy::Node* node,
                StepKind kind,
                StepFn fn,
                StepAttrs attrs = {},
                std::string overload = {});
  void EmitParameter(const DeviceData& node);
  void EmitConstant(const torch::lazy::Node* node, at::Tensor value);
  void EmitTensorList(const torch::lazy::Node* node);

 private:
  void Lower(const torch::lazy::Node* node);
  BufferId BufferFor(const torch::lazy::Output& output);

  ProgramBuilder builder_;
  std::unordered_map<const torch::lazy::Node*, std::vector<BufferId>> outputs_;
  std::unordered_set<const torch::lazy::Node*> tensor_lists_;
  struct BoundParameter {
    BufferId buffer;
    size_t index;
  };
  std::unordered_map<torch::lazy::BackendData::Handle, BoundParameter> parameter_by_handle_;
};

}  // namespace lazyfuse
