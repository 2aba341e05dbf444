#include "ops/host_arguments.h"

#include <ATen/Functions.h>
#include <ATen/ops/ctc_loss_native.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "ops/functional_tensors.h"
#include "ops/kernel_override.h"

namespace lazyfuse {
namespace {

// tensor_split with a tensor of split points. Eager insists the tensor is on
// the CPU; a lazy one is read on the host first, because the split points
// decide the result's shapes (counted as LazyFuseDataDependentSync, as a
// boolean mask's nonzero is). The checks and their messages are eager's.
std::vector<at::Tensor> TensorSplitByTensor(const at::Tensor& self,
                                            const at::Tensor& indices_or_sections,
                                            int64_t dim) {
  at::Tensor host = indices_or_sections;
  if (host.device().is_lazy()) {
    TORCH_LAZY_COUNTER("LazyFuseDataDependentSync", 1);
    host = host.cpu();
  }
  TORCH_CHECK(host.device().is_cpu(),
              "tensor_split expected tensor_indices_or_sections to be on cpu, but it's on ",
              host.device());
  TORCH_CHECK(host.scalar_type() == at::kLong,
              "tensor_split expected tensor_indices_or_sections to have dtype of long, but got ",
              host.scalar_type());
  TORCH_CHECK(host.dim() <= 1,
              "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
              "one-dimensional tensor, but got a tensor with ",
              host.dim(),
              " dims");
  if (host.dim() == 0) {
    return at::tensor_split(self, host.item<int64_t>(), dim);
  }
  const at::Tensor contiguous = host.contiguous();
  const int64_t* begin = contiguous.const_data_ptr<int64_t>();
  return at::tensor_split(self, std::vector<int64_t>(begin, begin + contiguous.numel()), dim);
}

// The values of a CPU tensor of lengths, checked as eager's fast path does.
std::vector<int64_t> HostLengths(const at::Tensor& lengths, const char* name) {
  TORCH_CHECK(
      at::isIntegralType(lengths.scalar_type(), /*includeBool=*/false), name, " must be integral");
  const at::Tensor host = lengths.to(at::kCPU, at::kLong).contiguous();
  const int64_t* begin = host.const_data_ptr<int64_t>();
  return std::vector<int64_t>(begin, begin + host.numel());
}

// ctc_loss with tensor lengths. CPU lengths are read as eager reads them;
// lazy ones keep ATen's own composite, which works on them.
at::Tensor CtcLossWithTensorLengths(const at::Tensor& log_probs,
                                    const at::Tensor& targets,
                                    const at::Tensor& input_lengths,
                                    const at::Tensor& target_lengths,
                                    int64_t blank,
                                    int64_t reduction,
                                    bool zero_infinity) {
  if (input_lengths.device().is_lazy() || target_lengths.device().is_lazy()) {
    return at::native::ctc_loss(
        log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity);
  }
  return at::ctc_loss(log_probs,
                      targets,
                      HostLengths(input_lengths, "input_lengths"),
                      HostLengths(target_lengths, "target_lengths"),
                      blank,
                      reduction,
                      zero_infinity);
}

// _pack_padded_sequence's batch sizes are a CPU tensor, as in eager: the RNN
// kernels and pad_packed_sequence read them on the host. Functionalization's
// fallback wraps every result of an op on lazy tensors, these too; here only
// the lazy results stay wrapped. Other tensors are functionalized as before.
void PackPaddedSequenceFunctionalized(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  const bool lazy = AnyArgumentTensor(*stack, num_arguments, [](const at::Tensor& tensor) {
    return IsLazyTensor(at::functionalization::impl::isFunctionalTensor(tensor)
                            ? at::functionalization::impl::from_functional_tensor(tensor)
                            : tensor);
  });
  CallAsFunctionalizationFallback(op, stack);
  if (!lazy) {
    return;
  }
  const size_t num_returns = op.schema().returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    ForEachTensorIn((*stack)[i], [](const at::Tensor& tensor) {
      return at::functionalization::impl::isFunctionalTensor(tensor) &&
                     !IsLazyTensor(at::functionalization::impl::from_functional_tensor(tensor))
                 ? FromFunctional(tensor)
                 : tensor;
    });
  }
}

// Under inference mode the autograd key, and TensorSplitByTensor there, is
// skipped: this kernel, around torch's Functionalize one, reads lazy split
// points the same way.
class TensorSplitByTensorFunctionalized final : public c10::OperatorKernel {
 public:
  explicit TensorSplitByTensorFunctionalized(c10::SafeKernelFunction torch_kernel)
      : torch_kernel_(std::move(torch_kernel)) {}

  void operator()(const c10::OperatorHandle& op,
                  c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    if (!AnyArgumentTensor(*stack, op.schema().arguments().size(), IsLazyTensor)) {
      torch_kernel_.callBoxed(op, keys, stack);
      return;
    }
    const int64_t dim = torch::jit::pop(*stack).toInt();
    const at::Tensor indices = torch::jit::pop(*stack).toTensor();
    const at::Tensor self = torch::jit::pop(*stack).toTensor();
    torch::jit::push(*stack, TensorSplitByTensor(self, indices, dim));
  }

 private:
  c10::SafeKernelFunction torch_kernel_;
};

}  // namespace

void RegisterHostArgumentOverrides() {
  // At the autograd key, above the composite kernels. Leaked on purpose:
  // registrations must outlive every dispatcher call.
  static auto* library = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutogradLazy, __FILE__, __LINE__);
  library->impl("tensor_split.tensor_indices_or_sections", TORCH_FN(TensorSplitByTensor));
  library->impl("ctc_loss.Tensor", TORCH_FN(CtcLossWithTensorLengths));
  static auto* functionalize = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  functionalize->impl(
      "_pack_padded_sequence",
      torch::CppFunction::makeFromBoxedFunction<&PackPaddedSequenceFunctionalized>());
  const std::optional<c10::OperatorHandle> split =
      c10::Dispatcher::singleton().findOp({"aten::tensor_split", "tensor_indices_or_sections"});
  TORCH_INTERNAL_ASSERT(split.has_value());
  OverrideKernel(split->operator_name(),
                 c10::DispatchKey::Functionalize,
                 std::make_unique<TensorSplitByTensorFunctionalized>(
                     split->getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize)),
                 "lazyfuse: tensor_split reads lazy split points on the host");
}

}  // namespace lazyfuse
