#include "program/pending_graph.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/ir_util.h>
#include <torch/csrc/lazy/core/tensor.h>

#include "ltc/backend_data.h"
#include "program/lowering_context.h"

namespace lazyfuse {

PendingGraph LowerPendingGraph(const std::vector<at::Tensor>& tensors) {
  std::vector<torch::lazy::Value> values;
  std::vector<const torch::lazy::Node*> roots;
  std::optional<torch::lazy::BackendDevice> device;
  for (const at::Tensor& tensor : tensors) {
    auto lazy = torch::lazy::TryGetLtcTensor(tensor);
    TORCH_CHECK(lazy, "lazyfuse.debug: expected lazy tensors, got one on ", tensor.device());
    device = lazy->GetDevice();
    torch::lazy::Value value = lazy->CurrentIrValue();
    if (value) {
      roots.push_back(value.node.get());
      values.push_back(std::move(value));
    }
  }
  PendingGraph graph;
  if (!device) {
    graph.program = std::make_shared<const Program>();
    return graph;
  }
  auto post_order = torch::lazy::Util::ComputePostOrder(roots);
  LazyFuseLoweringContext context("pending", *device, post_order, {});
  for (const auto& value : values) {
    context.AddResult(torch::lazy::Output(value.node.get(), value.index));
  }
  for (const auto& data : context.GetParametersData()) {
    const auto* ours = dynamic_cast<const LazyFuseBackendData*>(data.get());
    graph.host_scalar_parameters.push_back(ours != nullptr && ours->HasValue() &&
                                           ours->is_host_scalar());
  }
  auto computation = context.Build();
  graph.program = dynamic_cast<const LazyFuseComputation&>(*computation).program();
  return graph;
}

}  // namespace lazyfuse
