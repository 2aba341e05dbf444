#pragma once

// Host scalars: 0-dim CPU tensors a fused kernel takes by value, in an
// argument slot, instead of as a pointer.

#include <ATen/Tensor.h>

#include "runtime/target.h"

namespace lazyfuse {

bool IsHostScalar(const at::Tensor& tensor);

// Reads the 0-dim CPU value straight from its data: item() would go through
// the dispatcher once per scalar per launch (Adam's step has seven).
ArgSlot HostScalarSlot(const at::Tensor& value);

}  // namespace lazyfuse
