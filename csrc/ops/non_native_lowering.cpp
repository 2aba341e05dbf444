// Lowerings of the non-native IR nodes LTC core creates itself (see the
// non_native section of codegen/lazyfuse_ops.yaml).

#include <ATen/Functions.h>

#include "generated/LazyNonNativeIr.h"

namespace lazyfuse {

void Scalar::Lower(LazyFuseLoweringContext& ctx) const {
  // A host scalar: ATen mixes 0-dim CPU tensors with device tensors freely.
  at::Tensor constant = at::scalar_tensor(value, at::TensorOptions().dtype(type));
  constant.unsafeGetTensorImpl()->set_wrapped_number(true);
  ctx.EmitConstant(this, std::move(constant));
}

void Expand::Lower(LazyFuseLoweringContext& ctx) const {
  const std::vector<int64_t> target = size;
  ctx.EmitStep(this,
               StepKind::kView,
               [target](KernelArgs& args) -> std::vector<at::Tensor> {
                 return {at::expand_copy(args.tensor(), target)};
               },
               {{"size", ToAttr(target)}});
}

void Cast::Lower(LazyFuseLoweringContext& ctx) const {
  const at::ScalarType target = dtype;
  ctx.EmitStep(this, StepKind::kPointwise, [target](KernelArgs& args) -> std::vector<at::Tensor> {
    return {args.tensor().to(target)};
  });
}

}  // namespace lazyfuse
