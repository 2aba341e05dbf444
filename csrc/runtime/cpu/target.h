#pragma once

// The CPU kernel target: kernels the CPU dialect renders, compiled by the
// host C++ compiler at -O3 for this machine's ISA into shared libraries
// (cached like CUBINs, keyed on the ISA too), and run over CPU tensors on
// torch's intra-op thread pool.

#include <memory>

#include "runtime/target.h"

namespace lazyfuse {

std::shared_ptr<KernelTarget> MakeCpuTarget();

}  // namespace lazyfuse
