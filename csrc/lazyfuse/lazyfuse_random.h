#pragma once

// Random ops as seeded IR nodes. Each node takes, as its last operand, a seed
// drawn at trace time from torch's default CPU generator (so
// torch.manual_seed makes runs reproducible). The seed is a host-scalar
// graph parameter: the graph hash stays the same from step to step, yet
// running one graph twice -- e.g. syncing a tensor, then the whole step --
// draws the same numbers both times.

#include <ATen/core/Generator.h>

#include <functional>

#include "lazyfuse/lazyfuse_node.h"

namespace lazyfuse {

class SeededRandom : public LazyFuseNode {
 public:
  // Computes the op from its tensor operands with a generator seeded for
  // this node.
  using Draw = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs,
                                                     at::Generator gen)>;

  SeededRandom(torch::lazy::OpKind op,
               torch::lazy::OpList operands,
               std::vector<torch::lazy::Shape>&& shapes,
               torch::lazy::hash_t attributes_hash,
               Draw draw);

  void Lower(LazyFuseLoweringContext& ctx) const override;

 private:
  Draw draw_;
};

}  // namespace lazyfuse
