#pragma once

// The step of a training batch norm with running statistics
// (_native_batch_norm_legit_functional, which native_batch_norm's lazy
// kernel records): the normalised input, the batch's statistics, and the
// updated running statistics. Where the run owns a running statistic's
// memory, the update is written there, as eager's in-place update is: a
// replayed step keeps its buffers where they are (a CUDA graph reads them
// there) and the step allocates nothing for them. Elsewhere, a copy.

#include <ATen/Tensor.h>

#include <optional>
#include <tuple>

#include "program/program.h"

namespace lazyfuse {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> BatchNormTrainingStep(
    KernelArgs& args,
    const at::Tensor& input,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias,
    const at::Tensor& running_mean,
    const at::Tensor& running_var,
    bool training,
    double momentum,
    double eps);

}  // namespace lazyfuse
