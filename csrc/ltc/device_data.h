#pragma once

// Leaf IR nodes with no ATen op behind them: data already on the backing
// device (a graph parameter) and a TensorList grouping several operands.
// The LoweringContext lowers both itself, as parameters and buffer groups.

#include <torch/csrc/lazy/backend/backend_data.h>
#include <torch/csrc/lazy/core/ir.h>

#include "ltc/node.h"

namespace lazyfuse {

class DeviceData : public LazyFuseNode {
 public:
  static torch::lazy::OpKind ClassOpKind();

  explicit DeviceData(std::shared_ptr<torch::lazy::BackendData> data);

  ~DeviceData() override;

  // With IR reuse on, a node of the same shape is recycled for new data; the
  // graph hash does not depend on the data, only on its shape.
  static torch::lazy::NodePtr Create(const std::shared_ptr<torch::lazy::BackendData>& data);

  // A node may be recycled only when nothing can still read it: it was last
  // used in an earlier step. Each graph that used it was synced by that
  // step's mark_step, and a tensor still holding it as its IR value (as
  // BatchNorm's running statistics do in eval mode) marks it used again.
  bool CanBeReused(const std::shared_ptr<torch::lazy::BackendData>& data) const;

  // Called by each node built on this one: it is in use in this step.
  void MarkUsed() const override;

  // Called after mark_step synced every live tensor, with the IR values
  // those tensors still hold: starts a new step, and lets go of the data of
  // nodes nothing can read any more, which the TrieCache would otherwise
  // keep alive.
  static void EndStep(const std::vector<const torch::lazy::Node*>& held_by_tensors);

  std::string ToString() const override;

  const std::shared_ptr<torch::lazy::BackendData>& data() const {
    return data_;
  }
  // A Python number promotes differently from a 0-dim tensor of its dtype
  // (BufferInfo::wrapped_number), so the two hash apart and never share a node.
  bool wrapped_number() const {
    return wrapped_number_;
  }

  static const DeviceData* Cast(const torch::lazy::Node* node);

 private:
  DeviceData(std::shared_ptr<torch::lazy::BackendData> data, bool wrapped_number);
  static bool IsWrappedNumber(const std::shared_ptr<torch::lazy::BackendData>& data);

  std::shared_ptr<torch::lazy::BackendData> data_;
  bool wrapped_number_;
  mutable uint64_t last_used_step_;
};

class TensorList : public LazyFuseNode {
 public:
  static torch::lazy::OpKind ClassOpKind();

  explicit TensorList(torch::lazy::OpList values);

  bool CanBeReused(torch::lazy::OpList values) const;
};

}  // namespace lazyfuse
