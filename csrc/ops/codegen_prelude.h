#pragma once

// Included by the torchgen output (LazyIr.h, LazyNonNativeIr.h). torchgen
// writes LTC names such as OpList, kNullValue, MHash and compute_shape_*
// unqualified, as if the nodes lived in torch::lazy; lazyfuse keeps its
// generated nodes in its own namespace and makes those names visible here.

#include <ATen/Operators.h>
#include <torch/csrc/lazy/core/internal_ops/ltc_ops.h>
#include <torch/csrc/lazy/core/ir_builder.h>
#include <torch/csrc/lazy/core/shape_inference.h>

#include "ltc/config.h"
#include "ltc/eager_fallback.h"
#include "ltc/ir_reuse.h"
#include "ltc/node.h"
#include "ops/argument_checks.h"
#include "ops/batch_norm_step.h"
#include "ops/device_checks.h"
#include "ops/inference_mode.h"
#include "ops/max_pool_step.h"
#include "ops/partial_writes.h"
#include "ops/scalar_operands.h"
#include "ops/shape_inference.h"
#include "ops/storage_view_steps.h"
#include "program/lowering_context.h"
#include "program/program.h"

namespace lazyfuse {
using namespace torch::lazy;  // NOLINT(google-build-using-namespace)
}  // namespace lazyfuse
