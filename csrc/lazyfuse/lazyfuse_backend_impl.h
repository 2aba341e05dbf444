#pragma once

// lazyfuse's implementation of LTC's BackendImplInterface.

#include <torch/csrc/lazy/backend/backend_interface.h>

#include <memory>

#include "lazyfuse/lazyfuse_program.h"

namespace lazyfuse {

torch::lazy::BackendImplInterface* GetLazyFuseBackendImpl();

// The Program of the most recent uncached compile, for lazyfuse.debug.
std::shared_ptr<const Program> LastCompiledProgram();

}  // namespace lazyfuse
