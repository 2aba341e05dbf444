#pragma once

// Base of every lazyfuse IR node. Extends LTC's Node with a structural hash
// (op, attributes, shapes and operands) and with Lower(), which emits the
// node into the Program being built.

#include <c10/core/Scalar.h>
#include <torch/csrc/lazy/core/ir.h>

#include <atomic>
#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

namespace lazyfuse {

class LazyFuseLoweringContext;

class LazyFuseNode : public torch::lazy::Node {
 public:
  LazyFuseNode(torch::lazy::OpKind op,
               torch::lazy::OpList operands,
               std::vector<torch::lazy::Shape>&& shapes,
               size_t num_outputs,
               torch::lazy::hash_t hash_seed);

  // Shape computed lazily from the operands; used by non-native nodes.
  LazyFuseNode(torch::lazy::OpKind op,
               torch::lazy::OpList operands,
               const std::function<torch::lazy::Shape()>& shape_fn,
               size_t num_outputs,
               torch::lazy::hash_t hash_seed);

  // Leaf node with a known shape (device data, tensor lists).
  LazyFuseNode(torch::lazy::OpKind op,
               torch::lazy::OpList operands,
               torch::lazy::Shape shape,
               size_t num_outputs,
               torch::lazy::hash_t hash_seed);

  ~LazyFuseNode() override;

  torch::lazy::hash_t hash() const override {
    return dag_hash_;
  }
  torch::lazy::hash_t shapeHash() const override {
    return dag_hash_;
  }

  virtual void Lower(LazyFuseLoweringContext& ctx) const;

  // Called once for each node built on this leaf; device data uses it to
  // know it is still read in this step (see DeviceData::CanBeReused).
  virtual void MarkUsed() const {}

  // Nodes ever constructed; lets tests prove that running a cached graph
  // creates none.
  static int64_t CreatedCount();

  // The values of the node's Scalar operands that its argument checks and
  // shape function last ran with. IR reuse compares no operand's value, so a
  // generated kernel that reuses the node runs them again for new values
  // (clamp(min=2**31) of an int32 tensor after clamp(min=3)).
  bool CheckedWithScalars(std::initializer_list<std::optional<at::Scalar>> values) const;
  void KeepCheckedScalars(std::initializer_list<std::optional<at::Scalar>> values) const;

 private:
  void ComputeHash(torch::lazy::hash_t hash_seed);

  torch::lazy::hash_t dag_hash_;
  mutable std::vector<std::optional<at::Scalar>> checked_scalars_;
};

}  // namespace lazyfuse
