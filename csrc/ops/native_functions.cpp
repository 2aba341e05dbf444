// Lazy kernels written by hand: the ops that move data between the lazy
// device and eager devices, create storage, or only rewrap a value. Listed
// under "supported" in codegen/lazyfuse_ops.yaml.

#include <ATen/ExpandUtils.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/ir_builder.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/csrc/lazy/core/tensor_impl.h>

#include "generated/LazyIr.h"
#include "generated/LazyNativeFunctions.h"
#include "ltc/config.h"
#include "ltc/graph_executor.h"
#include "ltc/step_replay.h"
#include "ops/argument_checks.h"
#include "ops/collectives.h"
#include "ops/device_checks.h"
#include "ops/functional_tensors.h"
#include "ops/functionalized_composite.h"
#include "ops/inference_mode.h"
#include "ops/meta_tensors.h"

namespace lazyfuse {
namespace {

// A new lazy tensor holding a copy of host data, on the given lazy device.
// It is device data at once: LTC's LazyTensor::Create(at::Tensor) keeps the
// host tensor and no handle, so the first mark_step after it took the
// tensor for pending work and made it an extra graph result.
at::Tensor LazyFromHost(const at::Tensor& host, std::optional<at::Device> device) {
  // Ops defined since the last lazy data was made, before they see it.
  RegisterNewFunctionalizedComposites();
  const c10::Device lazy_device = device.value_or(c10::Device(c10::kLazy, 0));
  const torch::lazy::BackendDevice backend_device =
      torch::lazy::atenDeviceToBackendDevice(lazy_device);
  torch::lazy::BackendDataPtr data = torch::lazy::getBackend()->MakeComputationDataFromTensor(
      host, torch::lazy::Shape(host.scalar_type(), host.sizes().vec()), backend_device);
  return WrapFunctional(
      torch::lazy::CreateAtenFromLtcTensor(torch::lazy::LazyTensor::Create(std::move(data))));
}

torch::lazy::LazyTensorPtr LazyOrNull(const at::Tensor& tensor) {
  return torch::lazy::TryGetLtcTensor(tensor);
}

}  // namespace

at::Tensor LazyNativeFunctions::_to_copy(const at::Tensor& self,
                                         std::optional<at::ScalarType> dtype,
                                         std::optional<at::Layout> layout,
                                         std::optional<at::Device> device,
                                         std::optional<bool> pin_memory,
                                         bool non_blocking,
                                         std::optional<at::MemoryFormat> memory_format) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto options = self.options();
  if (dtype) {
    options = options.dtype(dtype);
  }
  if (layout) {
    options = options.layout(layout);
  }
  if (memory_format) {
    options = options.memory_format(memory_format);
  }
  auto lazy_self = LazyOrNull(self);
  if (!lazy_self) {
    // eager -> lazy: a new graph parameter.
    TORCH_CHECK(device && device->type() == c10::kLazy,
                "lazyfuse: _to_copy reached the lazy device for a non-lazy tensor headed to ",
                device ? device->str() : std::string("<no device>"));
    // The backend copies the data; only a dtype or layout change happens here.
    at::Tensor lazy = LazyFromHost(self.to(options.device(self.device()), non_blocking), device);
    if (Capturing()) {
      NoteTransfer(torch::lazy::TryGetLtcTensor(lazy)->CurrentDataHandle(), self);
    }
    return lazy;
  }
  if (device && device->type() != c10::kLazy) {
    // lazy -> eager: runs the pending graph of this tensor.
    SyncCollectivesBeforeRead();
    at::Tensor eager = ReadValue(lazy_self, /*detached=*/true);
    DropIrOfComputedTensor(lazy_self);
    return eager.to(options.device(device), non_blocking, /*copy=*/true);
  }
  // lazy -> lazy: a dtype cast stays in the graph.
  at::ScalarType target = dtype.value_or(self.scalar_type());
  torch::lazy::Value value = lazy_self->GetIrValue();
  if (target != self.scalar_type()) {
    value = torch::lazy::Value(torch::lazy::MakeCast(value, target, std::nullopt), 0);
  }
  return torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(std::move(value), lazy_self->GetDevice()));
}

at::Tensor LazyNativeFunctions::_copy_from(const at::Tensor& self,
                                           const at::Tensor& dst,
                                           bool non_blocking) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto lazy_dst = LazyOrNull(dst);
  auto lazy_self = LazyOrNull(self);
  if (!lazy_self) {
    // eager value into an existing lazy tensor
    TORCH_CHECK(lazy_dst, "lazyfuse: copy_ between two non-lazy tensors reached the lazy device");
    lazy_dst->UpdateFromTensor(self.to(dst.scalar_type()).expand(dst.sizes()), /*sync=*/true);
  } else if (!lazy_dst) {
    // lazy value into an eager tensor: materialise it
    SyncCollectivesBeforeRead();
    at::Tensor value = ReadValue(lazy_self, /*detached=*/false);
    DropIrOfComputedTensor(lazy_self);
    dst.copy_(value, non_blocking);
  } else {
    torch::lazy::Value value = lazy_self->GetIrValue();
    if (self.sizes() != dst.sizes()) {
      value = torch::lazy::Value(
          torch::lazy::MakeExpand(value, dst.sizes().vec(), /*is_scalar_expand=*/false), 0);
    }
    lazy_dst->SetInPlaceIrValue(std::move(value));
  }
  return dst;
}

at::Tensor LazyNativeFunctions::_copy_from_and_resize(const at::Tensor& self,
                                                      const at::Tensor& dst) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto lazy_dst = LazyOrNull(dst);
  auto lazy_self = LazyOrNull(self);
  if (!lazy_self) {
    TORCH_CHECK(lazy_dst, "lazyfuse: _copy_from_and_resize between two non-lazy tensors");
    lazy_dst->UpdateFromTensorOut(self);
  } else if (!lazy_dst) {
    SyncCollectivesBeforeRead();
    at::Tensor value = ReadValue(lazy_self, /*detached=*/true);
    dst.resize_as_(value).copy_(value);
  } else {
    lazy_dst->UpdateFromTensorOut(lazy_self);
    auto* impl = dynamic_cast<torch::lazy::LTCTensorImpl*>(dst.unsafeGetTensorImpl());
    TORCH_CHECK(impl != nullptr, "lazyfuse: _copy_from_and_resize into a wrapped lazy tensor");
    impl->force_refresh_sizes();
  }
  return dst;
}

at::Scalar LazyNativeFunctions::_local_scalar_dense(const at::Tensor& self) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto lazy_self = LazyOrNull(self);
  TORCH_CHECK(lazy_self, "lazyfuse: item() on a tensor that is not lazy");
  SyncCollectivesBeforeRead();
  at::Tensor value = ReadValue(lazy_self, /*detached=*/false);
  DropIrOfComputedTensor(lazy_self);
  return at::_local_scalar_dense(value.cpu());
}

at::Tensor LazyNativeFunctions::_unsafe_view(const at::Tensor& self, at::IntArrayRef size) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return LazyNativeFunctions::view_copy(self, size);
}

at::Tensor LazyNativeFunctions::clone(const at::Tensor& self,
                                      std::optional<at::MemoryFormat> /*memory_format*/) {
  // Lazy values are immutable, so a clone can share the IR value.
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto lazy_self = LazyOrNull(self);
  TORCH_CHECK(lazy_self, "lazyfuse: clone of a tensor that is not lazy");
  return torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(lazy_self->GetIrValue(), lazy_self->GetDevice()));
}

at::Tensor LazyNativeFunctions::empty(at::IntArrayRef size,
                                      std::optional<at::ScalarType> dtype,
                                      std::optional<at::Layout> layout,
                                      std::optional<at::Device> device,
                                      std::optional<bool> pin_memory,
                                      std::optional<at::MemoryFormat> memory_format) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  // Storage is created on the host and becomes a graph parameter; its
  // contents are unspecified, as for eager empty().
  at::Tensor host =
      at::empty(size,
                at::TensorOptions().dtype(dtype).layout(layout).pinned_memory(pin_memory),
                memory_format);
  at::Tensor lazy = LazyFromHost(host, device);
  if (Capturing()) {
    NoteUnspecified(torch::lazy::TryGetLtcTensor(lazy)->CurrentDataHandle());
  }
  return lazy;
}

at::Tensor LazyNativeFunctions::empty_strided(at::IntArrayRef size,
                                              at::IntArrayRef stride,
                                              std::optional<at::ScalarType> dtype,
                                              std::optional<at::Layout> layout,
                                              std::optional<at::Device> device,
                                              std::optional<bool> pin_memory) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  // Lazy tensors have no strides of their own: every value is contiguous.
  (void)stride;
  return empty(size, dtype, layout, device, pin_memory, std::nullopt);
}

at::Tensor LazyNativeFunctions::new_empty_strided(const at::Tensor& self,
                                                  at::IntArrayRef size,
                                                  at::IntArrayRef /*stride*/,
                                                  std::optional<at::ScalarType> dtype,
                                                  std::optional<at::Layout> layout,
                                                  std::optional<at::Device> device,
                                                  std::optional<bool> pin_memory) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return empty(size,
               dtype.value_or(self.scalar_type()),
               layout,
               device.value_or(self.device()),
               pin_memory,
               std::nullopt);
}

at::Tensor LazyNativeFunctions::_efficientzerotensor(at::IntArrayRef size,
                                                     std::optional<at::ScalarType> dtype,
                                                     std::optional<at::Layout> layout,
                                                     std::optional<at::Device> device,
                                                     std::optional<bool> pin_memory) {
  // Autograd's "known zero" gradient; lazy has no zero-tensor flag, so it is
  // an ordinary tensor of zeros.
  TORCH_LAZY_FN_COUNTER("lazy::");
  at::Tensor host =
      at::zeros(size, at::TensorOptions().dtype(dtype).layout(layout).pinned_memory(pin_memory));
  return LazyFromHost(host, device);
}

at::Tensor LazyNativeFunctions::masked_fill(const at::Tensor& self,
                                            const at::Tensor& mask,
                                            const at::Scalar& value) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckScalarFits("aten::masked_fill", "value", value, self.scalar_type());
  // A host scalar operand, as for any Python number in a lazy op.
  at::Tensor fill = at::scalar_tensor(value, at::TensorOptions().dtype(self.scalar_type()));
  return at::where(mask, fill, self);
}

at::Tensor LazyNativeFunctions::masked_fill(const at::Tensor& self,
                                            const at::Tensor& mask,
                                            const at::Tensor& value) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  TORCH_CHECK(value.dim() == 0,
              "masked_fill only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(),
              " dimension(s).");
  return at::where(mask, value.to(self.scalar_type()), self);
}

at::Tensor LazyNativeFunctions::std(const at::Tensor& self,
                                    at::OptionalIntArrayRef dim,
                                    const std::optional<at::Scalar>& correction,
                                    bool keepdim) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return at::sqrt(at::var(self, dim, correction, keepdim));
}

namespace {

// alias_copy and detach_copy: the same values. A tensor that already holds
// device data shares it, so reading `t.detach()` after a step runs no graph
// and compiles nothing; pending work gets the view's IR node.
template <typename Node>
at::Tensor IdentityView(const at::Tensor& self, const char* op) {
  CheckOnLazyDevice(op, "self", self);
  const NormalViewGuard normal_view(self);
  torch::lazy::LazyTensorPtr lazy_self = LazyOrNull(self);
  TORCH_INTERNAL_ASSERT(lazy_self);
  if (torch::lazy::BackendDataPtr data = lazy_self->CurrentDataHandle()) {
    return torch::lazy::CreateAtenFromLtcTensor(torch::lazy::LazyTensor::Create(std::move(data)));
  }
  const torch::lazy::Value value = lazy_self->GetIrValue();
  torch::lazy::NodePtr node = torch::lazy::ReuseNode<Node>(value);
  if (!node) {
    std::vector<torch::lazy::Shape> shapes{
        torch::lazy::Shape(self.scalar_type(), self.sizes().vec())};
    node = torch::lazy::MakeNode<Node>(value, std::move(shapes));
    torch::lazy::CacheNode(node);
  }
  return torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(std::move(node), lazy_self->GetDevice()));
}

}  // namespace

at::Tensor LazyNativeFunctions::alias_copy(const at::Tensor& self) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return IdentityView<AliasCopy>(self, "aten::alias_copy");
}

at::Tensor LazyNativeFunctions::detach_copy(const at::Tensor& self) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  return IdentityView<DetachCopy>(self, "aten::detach_copy");
}

at::Tensor LazyNativeFunctions::stack(at::TensorList tensors, int64_t dim) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::stack", "tensors", tensors);
  // torch's compute_shape_stack takes the first tensor's dtype, where eager
  // promotes (stack([int64, float32]) is float32). The lazy graph is a cat of
  // unsqueezed inputs, and cat promotes as eager does. Eager's checks are
  // made here, in its words: stack's meta kernel is Python (test_trace_cost).
  TORCH_CHECK(!tensors.empty(), "stack expects a non-empty TensorList");
  for (size_t i = 1; i < tensors.size(); ++i) {
    TORCH_CHECK(tensors[i].sizes() == tensors[0].sizes(),
                "stack expects each tensor to be equal size, but got ",
                tensors[0].sizes(),
                " at entry 0 and ",
                tensors[i].sizes(),
                " at entry ",
                i);
  }
  const int64_t wrapped = at::maybe_wrap_dim(dim, tensors[0].dim() + 1);
  std::vector<at::Tensor> pieces;
  pieces.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    pieces.push_back(at::unsqueeze_copy(tensor, wrapped));
  }
  return at::cat(pieces, wrapped);
}

at::Tensor LazyNativeFunctions::index_select(const at::Tensor& self,
                                             int64_t dim,
                                             const at::Tensor& index) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::index_select", "self", self);
  CheckOnLazyDevice("aten::index_select", "index", index);
  const auto device = torch::lazy::GetBackendDevice(self, index);
  TORCH_INTERNAL_ASSERT(device);
  const torch::lazy::Value self_value =
      torch::lazy::GetLtcTensorOrCreateForWrappedNumber(self, *device)->GetIrValue();
  const torch::lazy::Value index_value =
      torch::lazy::GetLtcTensorOrCreateForWrappedNumber(index, *device)->GetIrValue();
  torch::lazy::NodePtr node = torch::lazy::ReuseNode<IndexSelect>(self_value, dim, index_value);
  if (!node) {
    std::vector<torch::lazy::Shape> shapes;
    const bool int_index = index.scalar_type() == at::kLong || index.scalar_type() == at::kInt;
    if (self.dim() > 0 && index.dim() <= 1 && int_index) {
      // The usual call, shaped here: the meta kernel is Python (test_trace_cost).
      std::vector<int64_t> sizes = self.sizes().vec();
      sizes[at::maybe_wrap_dim(dim, self.dim())] = index.numel();
      shapes.emplace_back(self.scalar_type(), std::move(sizes));
    } else {  // the meta kernel's rules, and its errors
      at::Tensor out = at::index_select(OnMeta(self), dim, OnMeta(index));
      shapes.emplace_back(out.scalar_type(), out.sizes().vec());
    }
    node = torch::lazy::MakeNode<IndexSelect>(self_value, dim, index_value, std::move(shapes));
    torch::lazy::CacheNode(node);
  }
  return torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(std::move(node), *device));
}

at::Tensor LazyNativeFunctions::copy(const at::Tensor& self,
                                     const at::Tensor& src,
                                     bool non_blocking) {
  // The functional form of copy_: src's values, broadcast to self's shape
  // and cast to self's dtype. Like eager copy_, src may live on any device.
  TORCH_LAZY_FN_COUNTER("lazy::");
  TORCH_CHECK(at::is_expandable_to(src.sizes(), self.sizes()),
              "copy_: the source of shape ",
              src.sizes(),
              " cannot be broadcast to the destination of shape ",
              self.sizes());
  at::Tensor value = src.device().type() == c10::kLazy
                         ? src
                         : src.to(self.device(), self.scalar_type(), non_blocking, /*copy=*/true);
  if (value.scalar_type() != self.scalar_type()) {
    value = value.to(self.scalar_type());
  }
  if (value.sizes() != self.sizes()) {
    value = at::expand_copy(value, self.sizes());
  }
  return value.is_same(src) ? LazyNativeFunctions::clone(value, std::nullopt) : value;
}

at::Tensor LazyNativeFunctions::lift(const at::Tensor& self) {
  TORCH_INTERNAL_ASSERT(!at::functionalization::impl::isFunctionalTensor(self));
  return at::functionalization::impl::to_functional_tensor(self);
}

at::Tensor LazyNativeFunctions::lift_fresh(const at::Tensor& self) {
  TORCH_INTERNAL_ASSERT(!at::functionalization::impl::isFunctionalTensor(self));
  return at::functionalization::impl::to_functional_tensor(self);
}

}  // namespace lazyfuse
