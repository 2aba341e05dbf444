// Replaying a captured step (see step_replay.h).

#include "ltc/step_replay.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <unordered_map>

#include "ltc/backend_data.h"
#include "ltc/graph_executor.h"
#include "ltc/replay_binding.h"

namespace lazyfuse {
namespace {

ReplayOutcome Refuse(ReplayStatus status, std::string why) {
  ReplayOutcome outcome;
  outcome.status = status;
  outcome.why = std::move(why);
  return outcome;
}

// A replay leaves a parameter and its storage base holding one tensor
// through two data, and the graph reads only the parameter's: counted as a
// second reader, the other datum kept the graph from writing over the
// parameter. Hands the base `data` itself when both hold the same tensor
// (same value, so no reader sees a change) and says whether the base now
// holds `data`.
bool ShareWithBase(const at::Tensor& view, const torch::lazy::BackendDataPtr& data) {
  torch::lazy::LazyTensorPtr base = LazyStorageBase(view);
  if (base == nullptr || base->CurrentIrValue()) {
    return false;
  }
  torch::lazy::BackendDataPtr held = base->CurrentDataHandle();
  if (held == data) {
    return true;
  }
  const auto* held_data = dynamic_cast<const LazyFuseBackendData*>(held.get());
  const auto* view_data = dynamic_cast<const LazyFuseBackendData*>(data.get());
  if (held_data == nullptr || view_data == nullptr ||
      held_data->value_identity() != view_data->value_identity() ||
      held->shape().sizes() != data->shape().sizes()) {
    return false;
  }
  base->SetDataHandle(data);
  return true;
}

}  // namespace

ReplayOutcome Replay(const StepRecord& record, const std::vector<at::Tensor>& arguments) {
  if (!record.not_replayable.empty()) {
    return Refuse(ReplayStatus::kGuardFailed, record.not_replayable);
  }
  if (arguments.size() != record.arguments.size()) {
    return Refuse(ReplayStatus::kGuardFailed, "the call passed another number of tensors");
  }
  for (size_t k = 0; k < arguments.size(); ++k) {
    if (!ArgumentMatches(record.arguments[k], arguments[k])) {
      return Refuse(ReplayStatus::kGuardFailed,
                    "tensor argument " + std::to_string(k) + " changed its metadata");
    }
  }
  if (std::string why = BindingChanged(record, arguments); !why.empty()) {
    return Refuse(ReplayStatus::kGuardFailed, std::move(why));
  }
  const auto& backend = torch::lazy::getBackend();
  std::vector<torch::lazy::BackendDataPtr> data(record.inputs.size());
  std::vector<at::Tensor> bound;  // keeps every bound tensor alive until the results are in
  std::unordered_map<const torch::lazy::BackendData*, long> sole_holders;
  bool pending = false;
  for (size_t j = 0; j < record.inputs.size(); ++j) {
    const RecordedInput& input = record.inputs[j];
    switch (input.source) {
      case InputSource::kArgument:
        data[j] = DataOf(arguments[input.index], &pending);
        break;
      case InputSource::kLive: {
        at::Tensor tensor = BoundTensor(input);
        if (!tensor.defined()) {
          return Refuse(ReplayStatus::kGuardFailed,
                        "a tensor the step reads was freed (or a gradient it reads is None)");
        }
        data[j] = DataOf(tensor, &pending, input.via_base);
        if (data[j] != nullptr && input.rewritten) {
          // Its holders are the tensors the results replace it in.
          sole_holders[data[j].get()] =
              1 + (input.base_rewritten && ShareWithBase(tensor, data[j]));
        }
        bound.push_back(std::move(tensor));
        break;
      }
      case InputSource::kTransfer:
      case InputSource::kHostTensor: {
        const at::Tensor host = input.source == InputSource::kTransfer ? arguments[input.index]
                                                                       : HostTensorNow(input.host);
        if (!host.defined()) {
          return Refuse(ReplayStatus::kGuardFailed, kHostTensorGone);
        }
        // As the traced call moved it, cast included (x.to(lazy, torch.half)).
        data[j] = backend->MakeComputationDataFromTensor(
            host.to(input.shape.scalar_type()), input.shape, *record.device);
        break;
      }
      case InputSource::kSeed:
        break;  // drawn once every guard held
      case InputSource::kFrozen:
      case InputSource::kUnspecified:
        data[j] = input.frozen;
        break;
    }
    if (pending) {
      return Refuse(ReplayStatus::kInputPending, "a tensor the step reads has pending IR");
    }
    if (input.source != InputSource::kSeed &&
        (data[j] == nullptr || !SameShape(data[j], input.shape))) {
      return Refuse(ReplayStatus::kGuardFailed,
                    "a tensor the step reads changed its dtype or shape, or left the lazy "
                    "device");
    }
  }
  std::vector<int64_t> seeds(record.seeds);
  for (int64_t& seed : seeds) {
    seed = DrawSeed();
  }
  for (size_t j = 0; j < record.inputs.size(); ++j) {
    if (record.inputs[j].source == InputSource::kSeed) {
      data[j] = backend->MakeComputationDataFromScalar(at::Scalar(seeds[record.inputs[j].index]),
                                                       *record.device);
    }
  }
  std::vector<torch::lazy::BackendDataPtr> results;
  {
    ReplayOverwrites overwrites(std::move(sole_holders));
    results = backend->ExecuteComputation(record.computation, data, *record.device);
    data.clear();
    for (const RecordedWrite& write : record.writes) {
      const torch::lazy::BackendDataPtr& result = results.at(write.result);
      if (IsSet(write.grad_of)) {
        at::Tensor parameter(write.grad_of.lock());
        if (!parameter.defined()) {
          continue;
        }
        at::Tensor current = parameter.grad();
        if (!write.made_in_call && current.defined() &&
            current.unsafeGetTensorImpl() == write.target._unsafe_get_target()) {
          SetValue(current, write, results);
        } else {
          SetNewGrad(parameter, result);
        }
        continue;
      }
      const at::Tensor target = WriteTarget(write, arguments);
      if (target.defined()) {  // else nothing can read it any more
        SetValue(target, write, results);
      }
    }
    overwrites.RaiseIfFailed();
  }
  ReplayOutcome outcome;
  outcome.returned = ReturnedTensors(record, arguments, results);
  TORCH_LAZY_COUNTER("LazyFuseStepsReplayed", 1);
  return outcome;
}

}  // namespace lazyfuse
