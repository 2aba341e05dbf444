#pragma once

// Scalar operands of lazy ops (Python numbers, 0-dim CPU tensors, Scalar
// arguments such as alpha) as IR values. The generated kernels call these in
// place of LTC's GetLtcTensorOrCreateForWrappedNumber and
// GetIrValueForScalarFromCodegen: with LTC's device-data cache off (see
// lazyfuse_init.cpp), LTC still hashes every scalar for that cache and copies
// it twice, which made a scalar operand cost more than the op itself.

#include <ATen/Tensor.h>
#include <c10/core/Scalar.h>
#include <torch/csrc/lazy/core/ir.h>
#include <torch/csrc/lazy/core/tensor.h>

#include <optional>

namespace lazyfuse {

// A Scalar argument: 0 and 1 become graph constants, as they are almost
// always fixed (alpha=1); any other value is a host-scalar graph parameter,
// so a new value never changes the graph hash.
torch::lazy::Value ScalarIrValue(const at::Scalar& value, const torch::lazy::BackendDevice& device);

// A tensor operand that may be a Python number or a 0-dim CPU tensor. A
// lazy tensor is returned as is; a number or 0-dim CPU tensor becomes a lazy
// tensor over a copy of its value. Python numbers 0 and 1 become constants.
torch::lazy::LazyTensorPtr GetLtcTensorOrWrapNumber(const at::Tensor& tensor,
                                                    const torch::lazy::BackendDevice& device);

// An optional tensor operand (clamp's min and max, a loss's weight): null
// when absent, else as GetLtcTensorOrWrapNumber. LTC's codegen reads one
// with TryGetLtcTensor, which found no lazy tensor in a 0-dim CPU tensor
// and so dropped it: `x.clamp(min=torch.tensor(0.))` clamped nothing.
torch::lazy::LazyTensorPtr OptionalLtcTensorOrWrapNumber(const std::optional<at::Tensor>& tensor,
                                                         const torch::lazy::BackendDevice& device);

}  // namespace lazyfuse
