// Advanced indexing (x[idx], x[idx] = v) and index_add on the lazy device.
// index and index_put take a list of optional index tensors, which torchgen
// cannot turn into IR operands, so they build ClosureNodes here.

#include <ATen/Functions.h>
#include <torch/csrc/lazy/core/ir_builder.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/csrc/lazy/core/tensor_impl.h>

#include "generated/LazyIr.h"
#include "generated/LazyNativeFunctions.h"
#include "ops/closure_node.h"
#include "ops/device_checks.h"
#include "ops/scalar_operands.h"

namespace lazyfuse {
namespace {

at::Tensor OnMeta(const at::Tensor& tensor) {
  return at::empty_strided(tensor.sizes(), tensor.strides(), tensor.options().device(at::kMeta));
}

// The index list with every index on the lazy device as a long tensor. Boolean
// masks become long indices through nonzero: the result size depends on the
// mask's values, so the mask is synced to the host (counted as
// LazyFuseDataDependentSync).
std::vector<std::optional<at::Tensor>> LazyIndices(
    const c10::List<std::optional<at::Tensor>>& indices, const c10::Device& device) {
  std::vector<std::optional<at::Tensor>> out;
  for (const std::optional<at::Tensor>& index : indices) {
    if (!index.has_value() || !index->defined()) {
      out.emplace_back(std::nullopt);
      continue;
    }
    at::Tensor lazy_index = index->device() == device ? *index : index->to(device);
    if (lazy_index.scalar_type() == at::kBool || lazy_index.scalar_type() == at::kByte) {
      TORCH_LAZY_COUNTER("LazyFuseDataDependentSync", 1);
      at::Tensor positions = at::nonzero(lazy_index.cpu()).to(device);
      for (const at::Tensor& column : at::unbind_copy(positions, 1)) {
        out.emplace_back(column);
      }
    } else {
      out.emplace_back(std::move(lazy_index));
    }
  }
  return out;
}

// Operands: self, the present indices, then `extra`; the step rebuilds the
// optional list from which entries were present.
at::Tensor MakeIndexNode(const char* op,
                         const at::Tensor& self,
                         const std::vector<std::optional<at::Tensor>>& indices,
                         const std::vector<at::Tensor>& extra,
                         torch::lazy::Shape shape,
                         torch::lazy::hash_t attributes_hash,
                         std::function<at::Tensor(const at::Tensor&,
                                                  const c10::List<std::optional<at::Tensor>>&,
                                                  const std::vector<at::Tensor>&)> run) {
  const auto device = torch::lazy::GetBackendDevice(self);
  TORCH_CHECK(device, "lazyfuse: aten::", op, ": self must be a lazy tensor");
  std::vector<torch::lazy::Value> operands{torch::lazy::TryGetLtcTensor(self)->GetIrValue()};
  std::vector<bool> present;
  for (const auto& index : indices) {
    present.push_back(index.has_value());
    if (index) {
      operands.push_back(torch::lazy::TryGetLtcTensor(*index)->GetIrValue());
    }
  }
  for (const at::Tensor& tensor : extra) {
    operands.push_back(
        torch::lazy::GetLtcTensorOrCreateForWrappedNumber(tensor, *device)->GetIrValue());
  }
  const size_t num_extra = extra.size();
  StepFn fn =
      [present, num_extra, run = std::move(run)](KernelArgs& args) -> std::vector<at::Tensor> {
    const at::Tensor& base = args.tensor();
    c10::List<std::optional<at::Tensor>> list;
    for (bool is_present : present) {
      list.push_back(is_present ? std::optional<at::Tensor>(args.tensor()) : std::nullopt);
    }
    std::vector<at::Tensor> rest;
    for (size_t i = 0; i < num_extra; ++i) {
      rest.push_back(args.tensor());
    }
    return {run(base, list, rest)};
  };
  std::vector<torch::lazy::Shape> shapes{std::move(shape)};
  auto node = torch::lazy::MakeNode<ClosureNode>(
      torch::lazy::OpKind(c10::Symbol::aten(op)),
      operands,
      std::move(shapes),
      torch::lazy::HashCombine(torch::lazy::Hash(present), attributes_hash),
      StepKind::kOpaque,
      std::move(fn));
  return torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(torch::lazy::Value(node, 0), *device));
}

c10::List<std::optional<at::Tensor>> MetaIndices(
    const std::vector<std::optional<at::Tensor>>& indices) {
  c10::List<std::optional<at::Tensor>> out;
  for (const auto& index : indices) {
    out.push_back(index ? std::optional<at::Tensor>(OnMeta(*index)) : std::nullopt);
  }
  return out;
}

}  // namespace

at::Tensor LazyNativeFunctions::index(const at::Tensor& self,
                                      const c10::List<std::optional<at::Tensor>>& indices) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto lazy_indices = LazyIndices(indices, self.device());
  at::Tensor out = at::index(OnMeta(self), MetaIndices(lazy_indices));
  return MakeIndexNode("index",
                       self,
                       lazy_indices,
                       {},
                       torch::lazy::Shape(out.scalar_type(), out.sizes().vec()),
                       torch::lazy::MHash(),
                       [](const at::Tensor& base,
                          const c10::List<std::optional<at::Tensor>>& list,
                          const std::vector<at::Tensor>&) { return at::index(base, list); });
}

at::Tensor LazyNativeFunctions::index_put(const at::Tensor& self,
                                          const c10::List<std::optional<at::Tensor>>& indices,
                                          const at::Tensor& values,
                                          bool accumulate) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto lazy_indices = LazyIndices(indices, self.device());
  // The meta kernel checks that values broadcast to the indexed shape.
  (void)at::index_put(OnMeta(self), MetaIndices(lazy_indices), OnMeta(values), accumulate);
  return MakeIndexNode("index_put",
                       self,
                       lazy_indices,
                       {values},
                       torch::lazy::Shape(self.scalar_type(), self.sizes().vec()),
                       torch::lazy::MHash(accumulate),
                       [accumulate](const at::Tensor& base,
                                    const c10::List<std::optional<at::Tensor>>& list,
                                    const std::vector<at::Tensor>& rest) {
                         return at::index_put(base, list, rest[0], accumulate);
                       });
}

at::Tensor LazyNativeFunctions::index_add(const at::Tensor& self,
                                          int64_t dim,
                                          const at::Tensor& index,
                                          const at::Tensor& source,
                                          const at::Scalar& alpha) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::index_add", "self", self);
  CheckOnLazyDevice("aten::index_add", "index", index);
  CheckOnLazyDevice("aten::index_add", "source", source);
  // Eager's argument checks. ATen's C++ meta function selects slice 0 of the
  // source, which an empty index leaves empty, so that case checks on
  // uninitialised CPU stand-ins instead (index_select's backward is one).
  if (index.numel() == 0) {
    (void)at::index_add(CpuStandIn(self), dim, CpuStandIn(index), CpuStandIn(source), alpha);
  } else {
    (void)at::index_add(OnMeta(self), dim, OnMeta(index), OnMeta(source), alpha);
  }
  const auto device = torch::lazy::GetBackendDevice(self, index, source);
  TORCH_INTERNAL_ASSERT(device);
  const torch::lazy::Value self_value = GetLtcTensorOrWrapNumber(self, *device)->GetIrValue();
  const torch::lazy::Value index_value = GetLtcTensorOrWrapNumber(index, *device)->GetIrValue();
  const torch::lazy::Value source_value = GetLtcTensorOrWrapNumber(source, *device)->GetIrValue();
  const torch::lazy::Value alpha_value = ScalarIrValue(alpha, *device);
  torch::lazy::NodePtr node =
      torch::lazy::ReuseNode<IndexAdd>(self_value, dim, index_value, source_value, alpha_value);
  if (!node) {
    // The result has self's shape and dtype.
    std::vector<torch::lazy::Shape> shapes{
        torch::lazy::Shape(self.scalar_type(), self.sizes().vec())};
    node = torch::lazy::MakeNode<IndexAdd>(
        self_value, dim, index_value, source_value, alpha_value, std::move(shapes));
    torch::lazy::CacheNode(node);
  }
  return torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(std::move(node), *device));
}

}  // namespace lazyfuse
