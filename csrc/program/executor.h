#pragma once

// Runs a Program on the backing device: every step is one ATen call.

#include <ATen/Tensor.h>

#include <vector>

#include "program/program.h"

namespace lazyfuse {

std::vector<at::Tensor> RunProgram(const Program& program, std::vector<at::Tensor> parameters);

}  // namespace lazyfuse
