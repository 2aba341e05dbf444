// Advanced indexing (x[idx], x[idx] = v) and index_add on the lazy device.
// index and index_put take a list of optional index tensors, which torchgen
// cannot turn into IR operands, so they build ClosureNodes here.

#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <torch/csrc/lazy/core/ir_builder.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/csrc/lazy/core/tensor_impl.h>

#include <algorithm>
#include <string>

#include "generated/LazyIr.h"
#include "generated/LazyNativeFunctions.h"
#include "ops/closure_node.h"
#include "ops/device_checks.h"
#include "ops/meta_tensors.h"
#include "ops/partial_writes.h"
#include "ops/scalar_operands.h"

namespace lazyfuse {
namespace {

// The index list with every index on the lazy device as a long tensor. Boolean
// masks become long indices through nonzero: the result size depends on the
// mask's values, so the mask is synced to the host (counted as
// LazyFuseDataDependentSync). Eager's index checks come first: through its
// nonzero positions, a mask shorter than the dims it covers selected rows.
std::vector<std::optional<at::Tensor>> LazyIndices(
    const char* op, const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  std::vector<std::optional<at::Tensor>> out;
  for (const std::optional<at::Tensor>& index : indices) {
    if (!index.has_value() || !index->defined()) {
      out.emplace_back(std::nullopt);
      continue;
    }
    const at::ScalarType type = index->scalar_type();
    TORCH_CHECK_INDEX(
        type == at::kLong || type == at::kInt || type == at::kByte || type == at::kBool,
        op,
        ": tensors used as indices must be long, int, byte or bool tensors");
    at::Tensor lazy_index = index->device() == self.device() ? *index : index->to(self.device());
    if (type == at::kBool || type == at::kByte) {
      for (int64_t j = 0; j < lazy_index.dim(); ++j) {
        const int64_t dim = static_cast<int64_t>(out.size()) + j;
        TORCH_CHECK_INDEX(dim < self.dim() && lazy_index.size(j) == self.size(dim),
                          op,
                          ": the shape of the mask ",
                          lazy_index.sizes(),
                          " at index ",
                          j,
                          " does not match the shape of the indexed tensor ",
                          self.sizes(),
                          " at index ",
                          dim);
      }
      TORCH_LAZY_COUNTER("LazyFuseDataDependentSync", 1);
      at::Tensor positions = at::nonzero(lazy_index.cpu()).to(self.device());
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
                         std::function<at::Tensor(KernelArgs&,
                                                  const at::Tensor&,
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
    return {run(args, base, list, rest)};
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

// The shape x[indices] has, by numpy's rule: the indices broadcast together;
// where they are adjacent their shape takes their dims' place, else it comes
// first. Only for integer indices; others take the meta kernel, a Python one
// some 10 us a call (test_trace_cost.py). Errors are eager's.
std::optional<std::vector<int64_t>> IndexedSizes(
    const at::Tensor& self, const std::vector<std::optional<at::Tensor>>& indices) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()),
                    "too many indices for tensor of dimension ",
                    self.dim(),
                    " (got ",
                    indices.size(),
                    ")");
  std::vector<int64_t> broadcast;
  int64_t first = -1;
  int64_t last = -1;
  bool adjacent = true;
  for (size_t d = 0; d < indices.size(); ++d) {
    const std::optional<at::Tensor>& index = indices[d];
    if (!index) {
      continue;
    }
    const at::ScalarType type = index->scalar_type();
    if (type != at::kLong && type != at::kInt) {
      return std::nullopt;
    }
    adjacent = adjacent && (last < 0 || last == static_cast<int64_t>(d) - 1);
    first = first < 0 ? static_cast<int64_t>(d) : first;
    last = static_cast<int64_t>(d);
    const at::IntArrayRef sizes = index->sizes();
    std::vector<int64_t> merged(std::max(broadcast.size(), sizes.size()), 1);
    for (size_t k = 0; k < merged.size(); ++k) {
      const int64_t a = k < broadcast.size() ? broadcast[broadcast.size() - 1 - k] : 1;
      const int64_t b = k < sizes.size() ? sizes[sizes.size() - 1 - k] : 1;
      if (a != b && a != 1 && b != 1) {
        std::vector<std::string> shapes;
        for (const auto& each : indices) {
          if (each) {
            shapes.push_back(c10::str(each->sizes()));
          }
        }
        TORCH_CHECK_INDEX(false,
                          "shape mismatch: indexing tensors could not be broadcast together "
                          "with shapes ",
                          c10::Join(", ", shapes));
      }
      merged[merged.size() - 1 - k] = a == 1 ? b : a;
    }
    broadcast = std::move(merged);
  }
  if (first < 0) {
    return std::nullopt;
  }
  std::vector<int64_t> sizes;
  const auto rest = [&](int64_t from, int64_t to) {
    for (int64_t d = from; d < to; ++d) {
      if (d >= static_cast<int64_t>(indices.size()) || !indices[d]) {
        sizes.push_back(self.size(d));
      }
    }
  };
  if (adjacent) {
    rest(0, first);
    sizes.insert(sizes.end(), broadcast.begin(), broadcast.end());
    rest(last + 1, self.dim());
  } else {
    sizes = broadcast;
    rest(0, self.dim());
  }
  return sizes;
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
  auto lazy_indices = LazyIndices("aten::index", self, indices);
  std::optional<std::vector<int64_t>> sizes = IndexedSizes(self, lazy_indices);
  if (!sizes) {
    sizes = at::index(OnMeta(self), MetaIndices(lazy_indices)).sizes().vec();
  }
  return MakeIndexNode("index",
                       self,
                       lazy_indices,
                       {},
                       torch::lazy::Shape(self.scalar_type(), std::move(*sizes)),
                       torch::lazy::MHash(),
                       [](KernelArgs&,
                          const at::Tensor& base,
                          const c10::List<std::optional<at::Tensor>>& list,
                          const std::vector<at::Tensor>&) { return at::index(base, list); });
}

at::Tensor LazyNativeFunctions::index_put(const at::Tensor& self,
                                          const c10::List<std::optional<at::Tensor>>& indices,
                                          const at::Tensor& values,
                                          bool accumulate) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto lazy_indices = LazyIndices("aten::index_put", self, indices);
  // Eager checks that values broadcast to the indexed shape when it runs;
  // here it is checked as the op is traced, in eager's words.
  const std::optional<std::vector<int64_t>> indexed = IndexedSizes(self, lazy_indices);
  if (indexed) {
    TORCH_CHECK(at::is_expandable_to(values.sizes(), *indexed),
                "shape mismatch: value tensor of shape ",
                values.sizes(),
                " cannot be broadcast to indexing result of shape ",
                c10::IntArrayRef(*indexed));
  }
  if (!indexed || values.scalar_type() != self.scalar_type()) {
    (void)at::index_put(OnMeta(self), MetaIndices(lazy_indices), OnMeta(values), accumulate);
  }
  return MakeIndexNode("index_put",
                       self,
                       lazy_indices,
                       {values},
                       torch::lazy::Shape(self.scalar_type(), self.sizes().vec()),
                       torch::lazy::MHash(accumulate),
                       [accumulate](KernelArgs& args,
                                    const at::Tensor& base,
                                    const c10::List<std::optional<at::Tensor>>& list,
                                    const std::vector<at::Tensor>& rest) {
                         if (at::Tensor into = BaseToIndexPut(args, list, rest[0]);
                             into.defined()) {
                           into.index_put_(list, rest[0], accumulate);
                           return into;
                         }
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
