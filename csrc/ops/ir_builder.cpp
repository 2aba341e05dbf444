#include "ops/ir_builder.h"

#include <c10/util/Exception.h>

#include "generated/LazyNonNativeIr.h"
#include "ltc/device_data.h"

namespace lazyfuse {

torch::lazy::NodePtr LazyFuseIrBuilder::MakeDeviceData(
    const std::shared_ptr<torch::lazy::BackendData>& data) const {
  return DeviceData::Create(data);
}

torch::lazy::NodePtr LazyFuseIrBuilder::MakeScalar(const at::Scalar& value,
                                                   const at::ScalarType& type) const {
  return torch::lazy::ReuseOrMakeNode<Scalar>(value, type);
}

torch::lazy::NodePtr LazyFuseIrBuilder::MakeExpand(const torch::lazy::Value& input0,
                                                   const std::vector<int64_t>& size,
                                                   const bool& is_scalar_expand) const {
  return torch::lazy::ReuseOrMakeNode<Expand>(input0, size, is_scalar_expand);
}

torch::lazy::NodePtr LazyFuseIrBuilder::MakeCast(const torch::lazy::Value& input0,
                                                 const at::ScalarType& dtype,
                                                 const std::optional<at::ScalarType>& stype) const {
  return torch::lazy::ReuseOrMakeNode<Cast>(input0, dtype, stype);
}

torch::lazy::NodePtr LazyFuseIrBuilder::MakeTensorList(const torch::lazy::OpList& inputs) const {
  return torch::lazy::ReuseOrMakeNode<TensorList>(inputs);
}

torch::lazy::NodePtr LazyFuseIrBuilder::MakeGeneric(
    const torch::lazy::OpKind& op,
    const torch::lazy::OpList& /*operands*/,
    const torch::lazy::Shape& /*shape*/,
    const size_t& /*num_outputs*/,
    const torch::lazy::hash_t& /*hash_seed*/) const {
  TORCH_CHECK(false, "lazyfuse: generic IR nodes are not supported (op ", op.ToString(), ")");
}

namespace {

[[noreturn]] void NoDynamicShapes(const char* what) {
  TORCH_CHECK(false,
              "lazyfuse: ",
              what,
              ": symbolic shapes are not supported; leave LTC's symbolic shape mode off");
}

}  // namespace

torch::lazy::NodePtr LazyFuseIrBuilder::MakeSizeNode(const torch::lazy::Value&, size_t) const {
  NoDynamicShapes("size node");
}
torch::lazy::NodePtr LazyFuseIrBuilder::MakeSizeAdd(const torch::lazy::Value&,
                                                    const torch::lazy::Value&) const {
  NoDynamicShapes("size add");
}
torch::lazy::NodePtr LazyFuseIrBuilder::MakeSizeMul(const torch::lazy::Value&,
                                                    const torch::lazy::Value&) const {
  NoDynamicShapes("size mul");
}
torch::lazy::NodePtr LazyFuseIrBuilder::MakeSizeDiv(const torch::lazy::Value&,
                                                    const torch::lazy::Value&) const {
  NoDynamicShapes("size div");
}

}  // namespace lazyfuse
