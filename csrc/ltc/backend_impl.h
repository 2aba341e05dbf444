#pragma once

// lazyfuse's implementation of LTC's BackendImplInterface.

#include <torch/csrc/lazy/backend/backend_interface.h>

#include <memory>

#include "program/program.h"
#include "runtime/fused_kernel.h"

namespace lazyfuse {

torch::lazy::BackendImplInterface* GetLazyFuseBackendImpl();

// The Program of the most recent uncached compile, for lazyfuse.debug.
std::shared_ptr<const Program> LastCompiledProgram();
// The fusion plan of that Program, as text.
std::string LastFusionPlan();
// The fused kernels that Program has launched so far on the CUDA device.
std::vector<KernelRecord> LastKernels();

}  // namespace lazyfuse
