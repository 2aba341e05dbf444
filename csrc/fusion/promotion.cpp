// ATen's result type for a step's inputs, which the kernel codegen computes
// comparisons in and casts operands to.

#include <c10/core/DefaultDtype.h>

#include "fusion/rules.h"

namespace lazyfuse {
namespace {

// ATen's type promotion (c10 ResultTypeState): operands with dims promote
// among themselves, then 0-dim tensors, then wrapped numbers (Python numbers,
// Scalar arguments); a later slot counts only when its category (bool <
// integral < floating) is higher. So `half_tensor * 2.0` stays half,
// `int_tensor >= 0.5` compares in float32 (a float number promotes as the
// default dtype) and `int_tensor >= float64_0dim_tensor` in double.
at::ScalarType CombineCategories(std::optional<at::ScalarType> higher, at::ScalarType lower) {
  if (!higher) {
    return lower;
  }
  if (at::isFloatingType(*higher)) {
    return *higher;
  }
  if (*higher == at::kBool || at::isFloatingType(lower)) {
    return c10::promoteTypes(*higher, lower);
  }
  return *higher;
}

}  // namespace

std::optional<at::ScalarType> PromotedInputType(const Step& step, const Program& program) {
  std::optional<at::ScalarType> dims;
  std::optional<at::ScalarType> zero_dim;
  std::optional<at::ScalarType> wrapped;
  for (BufferId id : step.inputs) {
    const BufferInfo& info = program.buffers[id];
    at::ScalarType dtype = info.dtype;
    auto& slot = !info.sizes.empty() ? dims : info.wrapped_number ? wrapped : zero_dim;
    if (&slot == &wrapped && at::isFloatingType(dtype)) {
      dtype = c10::get_default_dtype_as_scalartype();
    }
    slot = slot ? c10::promoteTypes(*slot, dtype) : dtype;
  }
  if (!zero_dim && !wrapped) {
    return dims;
  }
  const at::ScalarType scalars = wrapped ? CombineCategories(zero_dim, *wrapped) : *zero_dim;
  return CombineCategories(dims, scalars);
}

}  // namespace lazyfuse
