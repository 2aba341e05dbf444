#pragma once

// The nodes LTC core creates on its own (device data, constants, expands,
// casts, tensor lists) are built here, from lazyfuse's node classes.

#include <torch/csrc/lazy/core/ir_builder.h>

namespace lazyfuse {

struct LazyFuseIrBuilder : torch::lazy::IrBuilder {
  torch::lazy::NodePtr MakeDeviceData(
      const std::shared_ptr<torch::lazy::BackendData>& data) const override;
  torch::lazy::NodePtr MakeScalar(const at::Scalar& value,
                                  const at::ScalarType& type) const override;
  torch::lazy::NodePtr MakeExpand(const torch::lazy::Value& input0,
                                  const std::vector<int64_t>& size,
                                  const bool& is_scalar_expand) const override;
  torch::lazy::NodePtr MakeCast(const torch::lazy::Value& input0,
                                const at::ScalarType& dtype,
                                const std::optional<at::ScalarType>& stype) const override;
  torch::lazy::NodePtr MakeTensorList(const torch::lazy::OpList& inputs) const override;
  torch::lazy::NodePtr MakeGeneric(const torch::lazy::OpKind& op,
                                   const torch::lazy::OpList& operands,
                                   const torch::lazy::Shape& shape,
                                   const size_t& num_outputs,
                                   const torch::lazy::hash_t& hash_seed) const override;
  torch::lazy::NodePtr MakeSizeNode(const torch::lazy::Value& input, size_t dim) const override;
  torch::lazy::NodePtr MakeSizeAdd(const torch::lazy::Value& a,
                                   const torch::lazy::Value& b) const override;
  torch::lazy::NodePtr MakeSizeMul(const torch::lazy::Value& a,
                                   const torch::lazy::Value& b) const override;
  torch::lazy::NodePtr MakeSizeDiv(const torch::lazy::Value& a,
                                   const torch::lazy::Value& b) const override;
};

}  // namespace lazyfuse
