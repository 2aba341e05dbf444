#pragma once

// Leaf IR nodes with no ATen op behind them: data already on the backing
// device (a graph parameter) and a TensorList grouping several operands.

#include <torch/csrc/lazy/backend/backend_data.h>
#include <torch/csrc/lazy/core/ir.h>

#include "lazyfuse/lazyfuse_node.h"

namespace lazyfuse {

class DeviceData : public LazyFuseNode {
 public:
  static torch::lazy::OpKind ClassOpKind();

  explicit DeviceData(std::shared_ptr<torch::lazy::BackendData> data);

  // With IR reuse on, a node of the same shape is recycled for new data; the
  // graph hash does not depend on the data, only on its shape.
  static torch::lazy::NodePtr Create(const std::shared_ptr<torch::lazy::BackendData>& data);

  bool CanBeReused(const std::shared_ptr<torch::lazy::BackendData>& data) const {
    return data_->shape() == data->shape();
  }

  std::string ToString() const override;
  void Lower(LazyFuseLoweringContext& ctx) const override;

  const std::shared_ptr<torch::lazy::BackendData>& data() const {
    return data_;
  }
  void SetData(std::shared_ptr<torch::lazy::BackendData> data) {
    data_ = std::move(data);
  }

  static const DeviceData* Cast(const torch::lazy::Node* node);

 private:
  std::shared_ptr<torch::lazy::BackendData> data_;
};

class TensorList : public LazyFuseNode {
 public:
  static torch::lazy::OpKind ClassOpKind();

  explicit TensorList(torch::lazy::OpList values);

  bool CanBeReused(torch::lazy::OpList values) const;
  void Lower(LazyFuseLoweringContext& ctx) const override;
};

}  // namespace lazyfuse
