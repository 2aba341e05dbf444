// A replayed step on static memory (see static_step.h).

#include "ltc/static_step.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/metrics.h>

#include "ltc/backend_data.h"
#include "ltc/config.h"
#include "ltc/replay_binding.h"

namespace lazyfuse {
namespace {

const LazyFuseBackendData& Ours(const torch::lazy::BackendDataPtr& data) {
  return static_cast<const LazyFuseBackendData&>(*data);
}

// The lazy tensor whose memory a write goes to on every run, or null (freed,
// a gradient the step makes anew, as a traced call gives the parameter a new
// one, or a tensor argument, which may be another tensor each call).
torch::lazy::LazyTensorPtr StaticTarget(const RecordedWrite& write) {
  if (write.argument) {
    return nullptr;
  }
  at::Tensor target;
  if (IsSet(write.grad_of)) {
    at::Tensor current = GradOf(write.grad_of);
    if (!write.made_in_call && current.defined() &&
        current.unsafeGetTensorImpl() == write.target._unsafe_get_target()) {
      target = std::move(current);
    }
  } else {
    target = at::Tensor(write.target.lock());
  }
  return target.defined() ? torch::lazy::TryGetLtcTensor(target) : nullptr;
}

torch::lazy::LazyTensorPtr BaseOfTarget(const RecordedWrite& write) {
  return LazyStorageBase(IsSet(write.grad_of) ? GradOf(write.grad_of)
                                              : at::Tensor(write.target.lock()));
}

bool Holds(const c10::weak_intrusive_ptr<torch::lazy::LazyTensor>& holder,
           const torch::lazy::LazyTensorPtr& tensor) {
  return tensor != nullptr && holder._unsafe_get_target() == tensor.get() && !holder.expired();
}

torch::lazy::BackendDataPtr CopyOf(const torch::lazy::BackendDataPtr& result) {
  return std::make_shared<LazyFuseBackendData>(
      result->device(), result->shape(), Ours(result).tensor().clone());
}

}  // namespace

std::shared_ptr<StaticStep> StaticStep::Plan(std::shared_ptr<const StepRecord> record,
                                             const std::vector<at::Tensor>& arguments,
                                             std::string* why) {
  if (!record->not_replayable.empty()) {
    *why = record->not_replayable;
    return nullptr;
  }
  if (record->seeds > 0) {
    *why = "it draws random numbers, whose seeds a graph would freeze";
    return nullptr;
  }
  if (arguments.size() != record->arguments.size()) {
    *why = "the call passed another number of tensors";
    return nullptr;
  }
  auto step = std::shared_ptr<StaticStep>(new StaticStep());
  step->record_ = record;
  step->inputs_.resize(record->inputs.size());
  bool pending = false;
  for (size_t j = 0; j < record->inputs.size(); ++j) {
    const RecordedInput& input = record->inputs[j];
    torch::lazy::BackendDataPtr& data = step->inputs_[j];
    switch (input.source) {
      case InputSource::kArgument:
      case InputSource::kTransfer:
      case InputSource::kHostTensor: {
        const bool host_tensor = input.source == InputSource::kHostTensor;
        if (!host_tensor &&
            !ArgumentMatches(record->arguments.at(input.index), arguments.at(input.index))) {
          *why = "tensor argument " + std::to_string(input.index) + " changed its metadata";
          return nullptr;
        }
        if (input.shape.dim() == 0 && !BackingDevice().is_cpu()) {
          // Bound as a host scalar, a kernel would take its value at capture.
          *why = "a 0-dim tensor is read on the host, which a graph would freeze";
          return nullptr;
        }
        at::Tensor buffer =
            at::empty(input.shape.sizes(),
                      at::TensorOptions().dtype(input.shape.scalar_type()).device(BackingDevice()));
        data = std::make_shared<LazyFuseBackendData>(*record->device, input.shape, buffer);
        step->arguments_.push_back(
            {j, input.index, input.source == InputSource::kTransfer, std::move(buffer)});
        break;
      }
      case InputSource::kLive: {
        at::Tensor tensor = BoundTensor(input);
        if (!tensor.defined()) {
          *why = "a tensor the step reads was freed";
          return nullptr;
        }
        data = DataOf(tensor, &pending, input.via_base);
        break;
      }
      case InputSource::kSeed:
        break;
      case InputSource::kFrozen:
      case InputSource::kUnspecified:
        data = input.frozen;
        break;
    }
    if (pending) {
      *why = "a tensor the step reads has pending IR";
      return nullptr;
    }
    if (data == nullptr || !SameShape(data, input.shape)) {
      *why = "a tensor the step reads changed its dtype or shape, or left the lazy device";
      return nullptr;
    }
  }
  step->write_homes_.resize(record->writes.size());
  for (size_t w = 0; w < record->writes.size(); ++w) {
    const RecordedWrite& write = record->writes[w];
    torch::lazy::LazyTensorPtr target = StaticTarget(write);
    if (target == nullptr) {
      continue;  // copied out (a new gradient), or nothing can read it
    }
    WriteHomes& homes = step->write_homes_[w];
    if (!step->AddHome(target, write.result, &homes.target, why)) {
      return nullptr;
    }
    homes.target_holder = target;
    if (write.base_result) {
      torch::lazy::LazyTensorPtr base = BaseOfTarget(write);
      if (base != nullptr && !step->AddHome(base, *write.base_result, &homes.base, why)) {
        return nullptr;
      }
      homes.base_holder = base;
    }
  }
  // Nothing but a home's holders may hold its memory: anything else (a
  // kept detach(), a tensor the step only reads) would see a launch write
  // over it.
  for (Home& home : step->homes_) {
    long ours = 0;
    for (const auto& data : step->inputs_) {
      ours += data == home.data;
    }
    for (const Home& other : step->homes_) {
      ours += other.data == home.data;
    }
    const long holders = static_cast<long>(home.holders.size());
    if (home.data.use_count() != holders + ours) {
      *why =
          "memory the step updates is also held by a tensor it does not write (a kept "
          "detach()?)";
      return nullptr;
    }
    home.use_count = home.data.use_count();
  }
  return step;
}

// `holder` keeps its memory and takes `result` into it. A datum with another
// home for another result cannot: the two would write over each other.
bool StaticStep::AddHome(const torch::lazy::LazyTensorPtr& holder,
                         size_t result,
                         long* home,
                         std::string* why) {
  if (holder->CurrentIrValue()) {
    *why = "a tensor the step writes has pending IR";
    return false;
  }
  torch::lazy::BackendDataPtr data = holder->CurrentDataHandle();
  if (data == nullptr) {
    *why = "a tensor the step writes holds no value";
    return false;
  }
  if (Ours(data).pending()) {
    // A view's base or a transposed result is made on its first read: made
    // now, it has memory a launch can write.
    try {
      Ours(data).tensor();
    } catch (const std::exception& error) {
      *why = std::string("a tensor the step writes has no value: ") + error.what();
      return false;
    }
  }
  if (Ours(data).is_host_scalar() && !BackingDevice().is_cpu()) {
    *why = "it updates a 0-dim value kept on the host, which a graph would freeze";
    return false;
  }
  for (size_t k = 0; k < homes_.size(); ++k) {
    if (homes_[k].data == data) {
      if (homes_[k].result != result) {
        *why = "two results of the step go to one tensor's memory";
        return false;
      }
      homes_[k].holders.emplace_back(holder);
      *home = static_cast<long>(k);
      return true;
    }
  }
  Home added;
  added.data = std::move(data);
  added.result = result;
  added.holders.emplace_back(holder);
  homes_.push_back(std::move(added));
  *home = static_cast<long>(homes_.size() - 1);
  return true;
}

bool StaticStep::Bind(const std::vector<at::Tensor>& arguments, std::string* why) {
  if (arguments.size() != record_->arguments.size()) {
    *why = "the call passed another number of tensors";
    return false;
  }
  for (size_t k = 0; k < arguments.size(); ++k) {
    if (!ArgumentMatches(record_->arguments[k], arguments[k])) {
      *why = "tensor argument " + std::to_string(k) + " changed its metadata";
      return false;
    }
  }
  if (std::string changed = BindingChanged(*record_, arguments); !changed.empty()) {
    *why = std::move(changed);
    return false;
  }
  for (size_t j = 0; j < record_->inputs.size(); ++j) {
    const RecordedInput& input = record_->inputs[j];
    if (input.source != InputSource::kLive) {
      continue;
    }
    at::Tensor tensor = BoundTensor(input);
    bool pending = false;
    if (!tensor.defined() || DataOf(tensor, &pending, input.via_base) != inputs_[j]) {
      *why = pending ? "a tensor the step reads has pending IR"
                     : "a tensor the step reads was freed or given new memory";
      return false;
    }
  }
  for (size_t w = 0; w < write_homes_.size(); ++w) {
    const WriteHomes& homes = write_homes_[w];
    if ((homes.target >= 0 && !Holds(homes.target_holder, StaticTarget(record_->writes[w]))) ||
        (homes.base >= 0 && !Holds(homes.base_holder, BaseOfTarget(record_->writes[w])))) {
      *why = "a tensor the step writes now holds another value (a new .grad, an in-place op)";
      return false;
    }
  }
  for (const Home& home : homes_) {
    for (const auto& weak : home.holders) {
      torch::lazy::LazyTensorPtr holder = weak.lock();
      if (holder == nullptr || holder->CurrentIrValue() ||
          holder->CurrentDataHandle() != home.data) {
        *why = "a tensor the step writes was freed or given new memory";
        return false;
      }
    }
    if (home.data.use_count() != home.use_count) {
      *why = "memory the step updates is now also held elsewhere (a kept detach()?)";
      return false;
    }
  }
  for (StaticArgument& argument : arguments_) {
    const RecordedInput& input = record_->inputs[argument.input];
    if (input.source == InputSource::kHostTensor) {
      const at::Tensor host = HostTensorNow(input.host);
      if (!host.defined()) {
        *why = kHostTensorGone;
        return false;
      }
      argument.buffer.copy_(host);
      continue;
    }
    const at::Tensor& given = arguments[argument.argument];
    if (argument.transfer) {
      argument.buffer.copy_(given);
    } else {
      bool pending = false;
      torch::lazy::BackendDataPtr data = DataOf(given, &pending);
      if (data == nullptr) {
        *why = "a tensor argument has pending IR";
        return false;
      }
      argument.buffer.copy_(Ours(data).tensor());
    }
  }
  return true;
}

bool StaticStep::Run() {
  std::vector<torch::lazy::BackendDataPtr> data = inputs_;
  results_ =
      torch::lazy::getBackend()->ExecuteComputation(record_->computation, data, *record_->device);
  if (!checked_) {
    if (!CheckResults()) {
      results_.clear();
      return false;
    }
    checked_ = true;
  }
  for (Home& home : homes_) {
    const at::Tensor& result = Ours(results_[home.result]).tensor();
    const at::Tensor& memory = Ours(home.data).tensor();
    if (!result.is_same(memory)) {
      memory.copy_(result);
    }
  }
  TORCH_LAZY_COUNTER("LazyFuseStaticStepRuns", 1);
  return true;
}

// Before anything is written: every result is made (a view's base made
// later would be made outside a graph), lives where its home does, and
// shares no memory with another home, which the copies could overwrite
// before it is read.
bool StaticStep::CheckResults() {
  for (const auto& result : results_) {
    Ours(result).tensor();
  }
  for (const Home& home : homes_) {
    const at::Tensor& result = Ours(results_[home.result]).tensor();
    const at::Tensor& memory = Ours(home.data).tensor();
    if (result.device() != memory.device() || result.sizes() != memory.sizes() ||
        result.scalar_type() != memory.scalar_type()) {
      why_ = "a result's memory differs from its tensor's (device, shape or dtype)";
      return false;
    }
    for (const Home& other : homes_) {
      if (&other != &home && result.is_alias_of(Ours(other.data).tensor())) {
        why_ = "a result shares memory with another tensor the step updates";
        return false;
      }
    }
  }
  return true;
}

std::vector<at::Tensor> StaticStep::Finish(const std::vector<at::Tensor>& arguments) {
  for (size_t w = 0; w < record_->writes.size(); ++w) {
    const RecordedWrite& write = record_->writes[w];
    if (write_homes_[w].target >= 0) {
      continue;  // its memory took the result in Run()
    }
    if (IsSet(write.grad_of)) {
      at::Tensor parameter(write.grad_of.lock());
      if (parameter.defined()) {
        SetNewGrad(parameter, CopyOf(results_.at(write.result)));
      }
      continue;
    }
    const at::Tensor target = WriteTarget(write, arguments);
    if (target.defined()) {
      std::vector<torch::lazy::BackendDataPtr> copies(results_.size());
      copies[write.result] = CopyOf(results_.at(write.result));
      if (write.base_result) {
        copies[*write.base_result] = CopyOf(results_.at(*write.base_result));
      }
      SetValue(target, write, copies);
    }
  }
  std::vector<torch::lazy::BackendDataPtr> returned(results_.size());
  for (const RecordedReturn& entry : record_->returns) {
    if (entry.kind == RecordedReturn::Kind::kResult) {
      returned[entry.index] = CopyOf(results_.at(entry.index));
    }
  }
  TORCH_LAZY_COUNTER("LazyFuseStepsReplayed", 1);
  return ReturnedTensors(*record_, arguments, returned);
}

}  // namespace lazyfuse
