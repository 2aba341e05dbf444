#include "ops/closure_node.h"

#include "program/lowering_context.h"

namespace lazyfuse {

ClosureNode::ClosureNode(torch::lazy::OpKind op,
                         torch::lazy::OpList operands,
                         std::vector<torch::lazy::Shape>&& shapes,
                         torch::lazy::hash_t attributes_hash,
                         StepKind kind,
                         StepFn fn,
                         StepAttrs attrs)
    // The base binds shapes by reference, so size() is read before the move.
    : LazyFuseNode(std::move(op), operands, std::move(shapes), shapes.size(), attributes_hash),
      kind_(kind),
      fn_(std::move(fn)),
      attrs_(std::move(attrs)) {}

void ClosureNode::Lower(LazyFuseLoweringContext& ctx) const {
  ctx.EmitStep(this, kind_, fn_, attrs_);
}

}  // namespace lazyfuse
