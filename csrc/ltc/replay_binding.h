#pragma once

// What a replay (step_replay.cpp) and a replay on static memory
// (step_graph.cpp) share: reading the data a record's tensors hold now,
// and handing the step's results back to them.

#include <ATen/Tensor.h>
#include <torch/csrc/lazy/backend/backend_data.h>

#include <optional>
#include <string>
#include <vector>

#include "ltc/step_replay.h"

namespace lazyfuse {

bool ArgumentMatches(const RecordedArgument& recorded, const at::Tensor& argument);

HostView HostViewOf(const at::Tensor& host);
// Whether both read the same memory the same way, from the same tensor
// (false) or from views of the same tensor (true); nullopt when neither.
std::optional<bool> ReadThroughOwner(const HostView& a, const HostView& b);
// The host tensor `view` describes, as its memory holds it now; undefined
// once its owner is freed, given other memory or laid out anew.
at::Tensor HostTensorNow(const HostView& view);
// Why a replay cannot run when HostTensorNow is undefined.
constexpr const char* kHostTensorGone =
    "a host tensor the step moves to the lazy device was freed or given new memory";

// Whether two tensors of one dtype and shape hold the same values (NaN
// equal to NaN).
bool SameValues(const at::Tensor& a, const at::Tensor& b);

// Whether `tensor` is no view and no view of it is alive: a step's write to
// it then reaches no other tensor, so a replay may write into whichever
// tensor takes its place.
bool OwnsItsMemory(const at::Tensor& tensor);

// The tensor `write` goes to on a call passed `arguments`, or undefined
// (freed: nothing can read it any more).
at::Tensor WriteTarget(const RecordedWrite& write, const std::vector<at::Tensor>& arguments);

// The data a lazy tensor (or its storage base) holds now: null with
// `pending` set when it still has IR, which a replay cannot read.
torch::lazy::BackendDataPtr DataOf(const at::Tensor& tensor, bool* pending, bool via_base = false);

bool SameShape(const torch::lazy::BackendDataPtr& data, const torch::lazy::Shape& shape);

// The live tensor `input` binds: itself, or the gradient of its parameter
// (undefined when either is gone).
at::Tensor BoundTensor(const RecordedInput& input);

// The current gradient of `parameter`, if both are alive.
at::Tensor GradOf(const WeakTensor& parameter);

// Why a replay, or a graph launch, of `record` with `arguments` would not do
// what a traced call does, or empty. Either the arguments bind unlike the
// capture's: pinned ones are not the tensors captured, or lazy ones share
// data unlike then (tensors passed twice then and distinct now would all
// read the first one's data, as would a live tensor that held an argument's
// data then and no longer does). Or a tensor the record reads or writes
// asks for gradients unlike at capture (a layer frozen or unfrozen), which
// the traced call's backward and optimizer step depend on. Empty while an
// argument has pending IR (the caller syncs, then asks again).
std::string BindingChanged(const StepRecord& record, const std::vector<at::Tensor>& arguments);

// Gives `target` (and its storage base) the step's new value in place, as a
// sync gives a tensor its computed data: no IR, no functionalization update,
// so the tensor and its base stay in step with each other.
void SetValue(const at::Tensor& target,
              const RecordedWrite& write,
              const std::vector<torch::lazy::BackendDataPtr>& results);

// A gradient the step made anew: `result` becomes the parameter's .grad.
void SetNewGrad(const at::Tensor& parameter, const torch::lazy::BackendDataPtr& result);

// The tensors a replayed call returns, `results` read as the record says.
std::vector<at::Tensor> ReturnedTensors(const StepRecord& record,
                                        const std::vector<at::Tensor>& arguments,
                                        const std::vector<torch::lazy::BackendDataPtr>& results);

}  // namespace lazyfuse
