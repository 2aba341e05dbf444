#pragma once

// lazyfuse's LazyGraphExecutor: LTC's, with a graph hash that also covers how
// nodes are wired to each other.

#include <torch/csrc/lazy/core/lazy_graph_executor.h>

namespace lazyfuse {

class LazyFuseGraphExecutor : public torch::lazy::LazyGraphExecutor {
 protected:
  // LTC hashes each root's DAG and the parameter sequence, but two nodes
  // with equal hashes (same-shape DeviceData, or equal subgraphs) are
  // interchangeable in that hash. When such nodes are also graph outputs,
  // where(m, a, b) and where(m, b, a) get one hash and would share a cached
  // Program that binds parameters differently. Folding every operand's
  // post-order position into the hash removes the ambiguity.
  PostOrderData RunPostOrder(const std::vector<torch::lazy::Value>& ir_values,
                             SyncTensorCollection* coll) override;
};

}  // namespace lazyfuse
