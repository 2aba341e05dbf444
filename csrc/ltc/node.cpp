#include "ltc/node.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/internal_ops/ltc_ops.h>

#include <algorithm>

#include "ltc/ir_reuse.h"

namespace lazyfuse {
namespace {

std::atomic<int64_t> g_created{0};

}  // namespace

LazyFuseNode::LazyFuseNode(torch::lazy::OpKind op,
                           torch::lazy::OpList operands,
                           std::vector<torch::lazy::Shape>&& shapes,
                           size_t num_outputs,
                           torch::lazy::hash_t hash_seed)
    : torch::lazy::Node(std::move(op), operands, std::move(shapes), num_outputs) {
  ComputeHash(hash_seed);
}

LazyFuseNode::LazyFuseNode(torch::lazy::OpKind op,
                           torch::lazy::OpList operands,
                           const std::function<torch::lazy::Shape()>& shape_fn,
                           size_t num_outputs,
                           torch::lazy::hash_t hash_seed)
    : torch::lazy::Node(std::move(op), operands, num_outputs) {
  // Not LTC's addComputedShape: its shape cache is keyed by hash(), which
  // here includes the shape and is computed only below. Keyed by a hash not
  // yet set, it served one node's shape to another (an expand of [3, 4]
  // shaped [2]).
  shapes_.push_back(shape_fn());
  ComputeHash(hash_seed);
}

LazyFuseNode::LazyFuseNode(torch::lazy::OpKind op,
                           torch::lazy::OpList operands,
                           torch::lazy::Shape shape,
                           size_t num_outputs,
                           torch::lazy::hash_t hash_seed)
    : torch::lazy::Node(std::move(op), operands, num_outputs) {
  shapes_.push_back(std::move(shape));
  ComputeHash(hash_seed);
}

LazyFuseNode::~LazyFuseNode() = default;

void LazyFuseNode::ComputeHash(torch::lazy::hash_t hash_seed) {
  // Shapes are part of the hash: a graph compiled for one size must never be
  // reused for another.
  torch::lazy::hash_t h = torch::lazy::HashCombine(op().hash(), hash_seed);
  for (const auto& shape : shapes_) {
    h = torch::lazy::HashCombine(h, shape.hash(/*bakeInSizes=*/true));
  }
  for (const auto& operand : operands()) {
    h = torch::lazy::HashCombine(h, operand.hash());
    // Keeps IR reuse from recycling device data this new node reads. Device
    // data nodes come only from lazyfuse's IR builder, so the op kind tells
    // them apart without a dynamic_cast on this hot path.
    if (operand.node->op() == torch::lazy::ltc_device_data) {
      static_cast<const LazyFuseNode*>(operand.node)->MarkUsed();
    }
  }
  dag_hash_ = h;
  g_created.fetch_add(1, std::memory_order_relaxed);
}

void LazyFuseNode::Lower(LazyFuseLoweringContext& /*ctx*/) const {
  TORCH_CHECK(false, "lazyfuse: no lowering for IR node ", ToString());
}

int64_t LazyFuseNode::CreatedCount() {
  return g_created.load(std::memory_order_relaxed);
}

bool LazyFuseNode::CheckedWithScalars(
    std::initializer_list<std::optional<at::Scalar>> values) const {
  return std::equal(values.begin(),
                    values.end(),
                    checked_scalars_.begin(),
                    checked_scalars_.end(),
                    [](const std::optional<at::Scalar>& a, const std::optional<at::Scalar>& b) {
                      return a.has_value() == b.has_value() && (!a || SameScalar(*a, *b));
                    });
}

void LazyFuseNode::KeepCheckedScalars(
    std::initializer_list<std::optional<at::Scalar>> values) const {
  checked_scalars_.assign(values.begin(), values.end());
}

}  // namespace lazyfuse
