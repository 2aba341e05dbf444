#pragma once

// A finished run's results as device data. Results derived from another (a
// view's base kept as a function of the view) are made from it on demand.

#include <ATen/Tensor.h>
#include <torch/csrc/lazy/backend/backend_data.h>
#include <torch/csrc/lazy/backend/backend_device.h>

#include <vector>

#include "program/program.h"

namespace lazyfuse {

// By result, the entry that derives it, or nullptr.
std::vector<const DerivedResult*> DerivedByResult(const Program& program);

// The views a successful run returns for derived results go, one at a time,
// as the contiguous copy each base is kept as lands; results that are one
// tensor become one.
void SettleOutputs(const Program& program, std::vector<at::Tensor>& outputs);

// The results of a successful run as device data.
std::vector<torch::lazy::BackendDataPtr> ResultsOfFinishedRun(
    std::vector<at::Tensor> outputs,
    const Program& program,
    const torch::lazy::BackendDevice& device);

}  // namespace lazyfuse
