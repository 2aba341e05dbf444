#pragma once

// An IR node written by hand in C++ rather than generated: it carries the
// step it lowers to. Used by kernels whose inputs torchgen cannot model
// (random ops with a seed operand, indexing with optional index lists).

#include "ltc/node.h"
#include "program/program.h"

namespace lazyfuse {

class ClosureNode : public LazyFuseNode {
 public:
  ClosureNode(torch::lazy::OpKind op,
              torch::lazy::OpList operands,
              std::vector<torch::lazy::Shape>&& shapes,
              torch::lazy::hash_t attributes_hash,
              StepKind kind,
              StepFn fn,
              StepAttrs attrs = {});

  void Lower(LazyFuseLoweringContext& ctx) const override;

 private:
  StepKind kind_;
  StepFn fn_;
  StepAttrs attrs_;
};

}  // namespace lazyfuse
