#pragma once

// Renders one fused group of a FusionPlan as kernel source (C-style, with a
// per-target KernelDialect). What the source depends on beyond the Program is
// the KernelSignature: how each input is bound at launch (strides, host
// scalar, alignment). The launcher computes it from the real tensors and keeps
// one compiled kernel per signature.

#include <string>
#include <vector>

#include "fusion/planner.h"
#include "kernels/dialect.h"
#include "kernels/signature.h"
#include "program/program.h"

namespace lazyfuse {

// The signature the group gets when every input is a contiguous device tensor,
// 0-dim CPU parameters are host scalars and 0-dim constants are literals.
// compile_cuda uses it to compile ahead of time.
KernelSignature PredictedSignature(const Program& program,
                                   const FusionGroup& group,
                                   const std::vector<bool>& host_scalar_parameters);

// `prefer`: a reduction's strategy to take where it may (row_strategy.h).
// `simplify_indices`: cancel index arithmetic through views, for a kernel
// that runs at these sizes only (KernelSource::simplified_indices).
KernelSource GenerateKernel(const Program& program,
                            const FusionGroup& group,
                            const KernelSignature& signature,
                            const KernelDialect& dialect,
                            const RowStrategy* prefer = nullptr,
                            bool simplify_indices = false);

}  // namespace lazyfuse
