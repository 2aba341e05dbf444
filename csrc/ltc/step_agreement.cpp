// Whether two captures of a call agree, so one replay can stand for both
// (see step_replay.h).

#include <ATen/Functions.h>
#include <torch/csrc/lazy/backend/backend_interface.h>

#include <sstream>
#include <tuple>
#include <vector>

#include "ltc/replay_binding.h"
#include "ltc/step_replay.h"

namespace lazyfuse {
namespace {

std::string InputName(const RecordedInput& input) {
  std::string name = input.op.empty() ? std::string("a value") : "a value read by " + input.op;
  if (!input.call_site.empty()) {
    name += ", made at " + input.call_site;
  }
  return name;
}

bool ReadSameHostTensor(const RecordedInput& a, const RecordedInput& b) {
  return a.source == InputSource::kHostTensor && b.source == InputSource::kHostTensor &&
         ReadThroughOwner(a.host, b.host).has_value();
}

// Made during the call, or a host tensor's value then.
bool HostValue(const RecordedInput& input) {
  return input.source == InputSource::kFrozen || input.source == InputSource::kHostTensor;
}

bool SameValue(const torch::lazy::BackendDataPtr& a, const torch::lazy::BackendDataPtr& b) {
  if (a == b) {
    return true;
  }
  return SameValues(torch::lazy::getBackend()->MakeTensorFromComputationData(a, std::nullopt),
                    torch::lazy::getBackend()->MakeTensorFromComputationData(b, std::nullopt));
}

std::string DescribeArgument(const RecordedArgument& argument) {
  std::ostringstream out;
  out << (argument.lazy ? "lazy " : argument.device.str() + " ") << argument.dtype << " "
      << c10::IntArrayRef(argument.sizes);
  return out.str();
}

}  // namespace

void BindRepeatedTensors(const StepRecord& previous, StepRecord& next) {
  for (size_t k = 0; k < next.arguments.size() && k < previous.arguments.size(); ++k) {
    RecordedArgument& argument = next.arguments[k];
    argument.pinned = argument.captured_as._unsafe_get_target() ==
                      previous.arguments[k].captured_as._unsafe_get_target();
  }
  for (size_t j = 0; j < next.inputs.size() && j < previous.inputs.size(); ++j) {
    RecordedInput& input = next.inputs[j];
    if (input.source != InputSource::kHostTensor) {
      continue;
    }
    const RecordedInput& before = previous.inputs[j];
    const std::optional<bool> through_owner = before.source == InputSource::kHostTensor
                                                  ? ReadThroughOwner(before.host, input.host)
                                                  : std::nullopt;
    if (through_owner) {
      input.host.through_owner = *through_owner;
    } else {
      input.source = InputSource::kFrozen;  // made during each call
    }
  }
}

std::string Disagreement(const StepRecord& previous, const StepRecord& next, bool replaying) {
  if (!next.not_replayable.empty()) {
    return next.not_replayable;
  }
  if (!previous.not_replayable.empty()) {
    return previous.not_replayable;
  }
  if (previous.arguments.size() != next.arguments.size()) {
    return "the calls took different numbers of tensor arguments";
  }
  for (size_t k = 0; k < next.arguments.size(); ++k) {
    const std::string a = DescribeArgument(previous.arguments[k]);
    const std::string b = DescribeArgument(next.arguments[k]);
    if (a != b) {
      return "tensor argument " + std::to_string(k) + " changed from " + a + " to " + b;
    }
    const at::Tensor& before = previous.arguments[k].host_value;
    const at::Tensor& after = next.arguments[k].host_value;
    if (before.defined() && after.defined() && !SameValues(before, after)) {
      return "tensor argument " + std::to_string(k) +
             " is a host tensor the step does not move to the lazy device, and it held other "
             "values than in the last call: a replay would freeze what the step's Python read "
             "from it (range(int(n)), a branch). Move it to the lazy device, or pass a Python "
             "number, which is guarded";
    }
  }
  if (previous.hash != next.hash || previous.inputs.size() != next.inputs.size() ||
      previous.seeds != next.seeds) {
    return "the calls traced different graphs (a Python branch, or a value that decides "
           "shapes, took another way)";
  }
  for (size_t j = 0; j < next.inputs.size(); ++j) {
    const RecordedInput& a = previous.inputs[j];
    const RecordedInput& b = next.inputs[j];
    const bool same_tensor =
        a.grad_of._unsafe_get_target() == b.grad_of._unsafe_get_target() &&
        (IsSet(b.grad_of) || a.live._unsafe_get_target() == b.live._unsafe_get_target());
    const bool both_host = HostValue(a) && HostValue(b);
    if ((a.source != b.source && !both_host) || a.index != b.index || a.via_base != b.via_base ||
        !same_tensor) {
      return "the calls read " + InputName(b) +
             " from different places: the step reaches a different tensor object each call "
             "(a parameter, gradient or optimizer state replaced instead of updated in place)";
    }
    if (both_host && !(replaying && ReadSameHostTensor(a, b)) && !SameValue(a.frozen, b.frozen)) {
      if (ReadSameHostTensor(a, b)) {
        return InputName(b) +
               " is a host tensor the step moves to the lazy device, and it held other values "
               "than in the last call. A replay would read it anew, but the step replays only "
               "after two calls found equal values in it: a change may come from the step's "
               "own Python, which a replay skips. Keep it on the lazy device instead";
      }
      return InputName(b) +
             " differs from one call to the next. It is a Python number or a host value "
             "made during the step, which a replay would freeze. Keep values that change "
             "in tensors on the lazy device instead (for an optimizer: capturable=True and a "
             "tensor lr)";
    }
  }
  // A tensor made during a call and kept somewhere gets the result as a
  // courtesy (storing it was a Python side effect, frozen by a replay); a
  // capture need not find it to agree.
  auto kept = [](const StepRecord& record) {
    std::vector<const RecordedWrite*> writes;
    for (const RecordedWrite& write : record.writes) {
      if (!write.made_in_call || IsSet(write.grad_of)) {
        writes.push_back(&write);
      }
    }
    return writes;
  };
  const std::vector<const RecordedWrite*> before = kept(previous);
  const std::vector<const RecordedWrite*> after = kept(next);
  if (before.size() != after.size()) {
    return "the calls wrote their results to different numbers of tensors";
  }
  for (size_t w = 0; w < after.size(); ++w) {
    const RecordedWrite& a = *before[w];
    const RecordedWrite& b = *after[w];
    const bool same_target = a.grad_of._unsafe_get_target() == b.grad_of._unsafe_get_target() &&
                             a.argument == b.argument &&
                             (IsSet(b.grad_of) || b.argument ||
                              a.target._unsafe_get_target() == b.target._unsafe_get_target());
    // A gradient may be made anew one call and updated in place the next.
    const bool same_making = IsSet(b.grad_of) || a.made_in_call == b.made_in_call;
    if (a.result != b.result || a.base_result != b.base_result || !same_making || !same_target) {
      return "the calls wrote their results to different tensors";
    }
  }
  if (previous.returns.size() != next.returns.size()) {
    return "the calls returned different numbers of tensors";
  }
  for (size_t r = 0; r < next.returns.size(); ++r) {
    const RecordedReturn& a = previous.returns[r];
    const RecordedReturn& b = next.returns[r];
    if (a.kind != b.kind || a.index != b.index || a.same_as != b.same_as ||
        (a.kind == RecordedReturn::Kind::kAsIs &&
         a.as_is.unsafeGetTensorImpl() != b.as_is.unsafeGetTensorImpl())) {
      return "returned tensor " + std::to_string(r) + " came from different places";
    }
  }
  return "";
}

}  // namespace lazyfuse
