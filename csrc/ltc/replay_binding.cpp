// What replays share (see replay_binding.h).

#include "ltc/replay_binding.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <torch/csrc/lazy/core/tensor.h>

#include <optional>
#include <unordered_map>

namespace lazyfuse {
namespace {

at::Tensor LazyTensorOf(const torch::lazy::BackendDataPtr& data) {
  return torch::lazy::CreateAtenFromLtcTensor(torch::lazy::LazyTensor::Create(data));
}

}  // namespace

bool ArgumentMatches(const RecordedArgument& recorded, const at::Tensor& argument) {
  if (!argument.defined() || argument.scalar_type() != recorded.dtype ||
      argument.sizes() != c10::IntArrayRef(recorded.sizes) ||
      argument.requires_grad() != recorded.requires_grad) {
    return false;
  }
  if (recorded.lazy) {
    return torch::lazy::TryGetLtcTensor(argument) != nullptr;
  }
  return argument.device() == recorded.device &&
         argument.strides() == c10::IntArrayRef(recorded.strides);
}

namespace {

HostLayout LayoutOf(const at::Tensor& tensor) {
  return {
      tensor.scalar_type(), tensor.storage_offset(), tensor.sizes().vec(), tensor.strides().vec()};
}

}  // namespace

HostView HostViewOf(const at::Tensor& host) {
  const at::Tensor owner = host.is_view() ? at::Tensor(host._base()) : host;
  HostView view;
  view.tensor = WeakTensor(host.getIntrusivePtr());
  view.owner = WeakTensor(owner.getIntrusivePtr());
  view.storage = host.storage().getWeakStorageImpl();
  view.layout = LayoutOf(host);
  view.owner_layout = LayoutOf(owner);
  return view;
}

std::optional<bool> ReadThroughOwner(const HostView& a, const HostView& b) {
  if (a.storage._unsafe_get_target() != b.storage._unsafe_get_target() || !(a.layout == b.layout)) {
    return std::nullopt;
  }
  if (a.tensor._unsafe_get_target() == b.tensor._unsafe_get_target()) {
    return false;
  }
  if (a.owner._unsafe_get_target() == b.owner._unsafe_get_target() &&
      a.owner_layout == b.owner_layout) {
    return true;
  }
  return std::nullopt;
}

at::Tensor HostTensorNow(const HostView& view) {
  const at::Tensor bound(view.through_owner ? view.owner.lock() : view.tensor.lock());
  if (!bound.defined() || !bound.has_storage() ||
      bound.storage().unsafeGetStorageImpl() != view.storage._unsafe_get_target() ||
      !(LayoutOf(bound) == (view.through_owner ? view.owner_layout : view.layout))) {
    return at::Tensor();
  }
  if (!view.through_owner) {
    return bound;
  }
  const HostLayout& layout = view.layout;
  return at::empty({0}, at::TensorOptions().dtype(layout.dtype).device(bound.device()))
      .set_(bound.storage(), layout.offset, layout.sizes, layout.strides);
}

bool SameValues(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
    return false;
  }
  const at::Tensor b_there = b.to(a.device());
  return at::equal(a, b_there) ||
         (at::isFloatingType(a.scalar_type()) &&
          at::allclose(a, b_there, /*rtol=*/0, /*atol=*/0, /*equal_nan=*/true));
}

bool OwnsItsMemory(const at::Tensor& tensor) {
  // Each view holds its base's functional storage.
  return at::functionalization::impl::isFunctionalTensor(tensor) &&
         at::functionalization::impl::isBaseTensor(tensor) && tensor.storage().use_count() == 1;
}

at::Tensor WriteTarget(const RecordedWrite& write, const std::vector<at::Tensor>& arguments) {
  return write.argument ? arguments.at(*write.argument) : at::Tensor(write.target.lock());
}

namespace {

bool ArgumentsBindAsRecorded(const StepRecord& record, const std::vector<at::Tensor>& arguments) {
  std::unordered_map<const torch::lazy::BackendData*, size_t> first;
  for (size_t k = 0; k < arguments.size(); ++k) {
    if (record.arguments[k].pinned && arguments[k].unsafeGetTensorImpl() !=
                                          record.arguments[k].captured_as._unsafe_get_target()) {
      return false;
    }
    torch::lazy::LazyTensorPtr lazy = torch::lazy::TryGetLtcTensor(arguments[k]);
    torch::lazy::BackendDataPtr data = lazy ? lazy->CurrentDataHandle() : nullptr;
    if (lazy != nullptr && data == nullptr && lazy->CurrentIrValue()) {
      return true;
    }
    std::optional<size_t> same_data_as;
    if (data != nullptr) {
      if (auto [earlier, fresh] = first.emplace(data.get(), k); !fresh) {
        same_data_as = earlier->second;
      }
    }
    if (same_data_as != record.arguments[k].same_data_as) {
      return false;
    }
    if (const at::Tensor other(record.arguments[k].shared_with.lock()); other.defined()) {
      torch::lazy::LazyTensorPtr other_lazy = torch::lazy::TryGetLtcTensor(other);
      if (other_lazy == nullptr || other_lazy->CurrentDataHandle() != data) {
        return false;
      }
    }
  }
  return true;
}

bool RequiresGradChanged(const StepRecord& record) {
  for (const RecordedInput& input : record.inputs) {
    if (input.source == InputSource::kLive) {
      const at::Tensor tensor = BoundTensor(input);
      if (tensor.defined() && tensor.requires_grad() != input.requires_grad) {
        return true;
      }
    }
  }
  for (const RecordedWrite& write : record.writes) {
    const at::Tensor target(write.target.lock());
    if (!IsSet(write.grad_of) && !write.argument && target.defined() &&
        target.requires_grad() != write.requires_grad) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string BindingChanged(const StepRecord& record, const std::vector<at::Tensor>& arguments) {
  if (!ArgumentsBindAsRecorded(record, arguments)) {
    return "the tensor arguments are bound unlike the captured calls' (another tensor where both "
           "captures were passed the same one, or one tensor passed for two arguments, or two "
           "for one)";
  }
  for (size_t k = 0; k < arguments.size(); ++k) {
    const at::Tensor& value = record.arguments[k].host_value;
    if (value.defined() && !SameValues(arguments[k], value)) {
      return "tensor argument " + std::to_string(k) +
             ", a host tensor the step does not move to the lazy device, changed value: what "
             "the step's Python read from it (range(int(n)), a branch) would be frozen";
    }
  }
  for (const RecordedWrite& write : record.writes) {
    if (write.argument && !OwnsItsMemory(arguments[*write.argument])) {
      return "tensor argument " + std::to_string(*write.argument) +
             ", which the step writes in place, is a view or has a view alive, which a "
             "replay's write would not reach";
    }
  }
  if (RequiresGradChanged(record)) {
    return "a tensor the step reads or writes changed requires_grad (a layer frozen or "
           "unfrozen), which changes what the step's backward and optimizer do";
  }
  return "";
}

torch::lazy::BackendDataPtr DataOf(const at::Tensor& tensor, bool* pending, bool via_base) {
  if (at::functionalization::impl::isFunctionalTensor(tensor)) {
    at::functionalization::impl::sync(tensor);
  }
  torch::lazy::LazyTensorPtr lazy =
      via_base ? LazyStorageBase(tensor) : torch::lazy::TryGetLtcTensor(tensor);
  if (lazy == nullptr) {
    return nullptr;
  }
  if (lazy->CurrentIrValue()) {
    *pending = true;
    return nullptr;
  }
  return lazy->CurrentDataHandle();
}

bool SameShape(const torch::lazy::BackendDataPtr& data, const torch::lazy::Shape& shape) {
  return data->shape().scalar_type() == shape.scalar_type() &&
         data->shape().sizes() == shape.sizes();
}

at::Tensor GradOf(const WeakTensor& parameter) {
  at::Tensor owner(parameter.lock());
  return owner.defined() ? owner.grad() : at::Tensor();
}

void SetValue(const at::Tensor& target,
              const RecordedWrite& write,
              const std::vector<torch::lazy::BackendDataPtr>& results) {
  torch::lazy::TryGetLtcTensor(target)->SetDataHandle(results.at(write.result));
  if (write.base_result) {
    if (torch::lazy::LazyTensorPtr base = LazyStorageBase(target)) {
      base->SetDataHandle(results.at(*write.base_result));
    }
  }
}

at::Tensor BoundTensor(const RecordedInput& input) {
  return IsSet(input.grad_of) ? GradOf(input.grad_of) : at::Tensor(input.live.lock());
}

void SetNewGrad(const at::Tensor& parameter, const torch::lazy::BackendDataPtr& result) {
  at::Tensor grad = parameter;
  grad.mutable_grad() = at::functionalization::impl::to_functional_tensor(LazyTensorOf(result));
}

std::vector<at::Tensor> ReturnedTensors(const StepRecord& record,
                                        const std::vector<at::Tensor>& arguments,
                                        const std::vector<torch::lazy::BackendDataPtr>& results) {
  std::vector<at::Tensor> returned;
  for (const RecordedReturn& entry : record.returns) {
    if (entry.same_as) {
      returned.push_back(returned.at(*entry.same_as));
      continue;
    }
    switch (entry.kind) {
      case RecordedReturn::Kind::kResult:
        returned.push_back(at::functionalization::impl::to_functional_tensor(
            LazyTensorOf(results.at(entry.index))));
        break;
      case RecordedReturn::Kind::kArgument:
        returned.push_back(arguments[entry.index]);
        break;
      case RecordedReturn::Kind::kAsIs:
        returned.push_back(entry.as_is);
        break;
    }
  }
  return returned;
}

}  // namespace lazyfuse
