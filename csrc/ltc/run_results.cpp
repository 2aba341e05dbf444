#include "ltc/run_results.h"

#include "ltc/backend_data.h"
#include "runtime/result_aliases.h"

namespace lazyfuse {

std::vector<const DerivedResult*> DerivedByResult(const Program& program) {
  std::vector<const DerivedResult*> derived(program.results.size(), nullptr);
  for (const DerivedResult& entry : program.derived_results) {
    derived[entry.result] = &entry;
  }
  return derived;
}

void SettleOutputs(const Program& program, std::vector<at::Tensor>& outputs) {
  for (const DerivedResult& entry : program.derived_results) {
    outputs[entry.result].reset();
    if (outputs[entry.from].defined()) {
      outputs[entry.from] = outputs[entry.from].contiguous();
    }
  }
  ShareIdenticalAliases(outputs);
}

std::vector<torch::lazy::BackendDataPtr> ResultsOfFinishedRun(
    std::vector<at::Tensor> outputs,
    const Program& program,
    const torch::lazy::BackendDevice& device) {
  SettleOutputs(program, outputs);
  const std::vector<const DerivedResult*> derived = DerivedByResult(program);
  std::vector<torch::lazy::BackendDataPtr> results;
  results.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const BufferInfo& info = program.buffers[program.results[i]];
    const torch::lazy::Shape shape(info.dtype, info.sizes);
    if (const DerivedResult* entry = derived[i]) {
      results.push_back(std::make_shared<LazyFuseBackendData>(
          device,
          shape,
          [entry = *entry, sizes = info.sizes, from = outputs[entry->from]](
              const torch::lazy::BackendDataPtr& /*prior*/, bool* /*no_value_for_good*/) {
            return MakeDerivedResult(entry, sizes, from);
          }));
    } else {
      results.push_back(
          std::make_shared<LazyFuseBackendData>(device, shape, std::move(outputs[i])));
    }
  }
  return results;
}

}  // namespace lazyfuse
