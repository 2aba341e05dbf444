#pragma once

// Renders one fused group of a FusionPlan as kernel source (C-style, with a
// per-target KernelDialect). What the source depends on beyond the Program is
// the KernelSignature: how each input is bound at launch (strides, host
// scalar, alignment). The launcher computes it from the real tensors and keeps
// one compiled kernel per signature.

#include <string>
#include <vector>

#include "lazyfuse/lazyfuse_fusion_planner.h"
#include "lazyfuse/lazyfuse_kernel_dialect.h"
#include "lazyfuse/lazyfuse_program.h"

namespace lazyfuse {

struct InputBinding {
  enum class Kind {
    kTensor,      // a device pointer, read at `strides`
    kHostScalar,  // a 0-dim CPU value passed by value
    kConstant,    // a program constant, written into the source
  };
  Kind kind = Kind::kTensor;
  std::vector<int64_t> strides;  // kTensor
  std::string literal;           // kConstant
  bool aligned = true;           // kTensor: data pointer is 16-byte aligned

  bool operator==(const InputBinding& other) const {
    return kind == other.kind && strides == other.strides && literal == other.literal &&
           aligned == other.aligned;
  }
};

struct KernelSignature {
  std::vector<InputBinding> inputs;  // one per FusionGroup::inputs entry

  bool operator==(const KernelSignature& other) const {
    return inputs == other.inputs;
  }
};

enum class LaunchShape {
  kElementwise,   // grid-stride over `work_items` elements (vectors when vector_width > 1)
  kBlockPerRow,   // one block per reduced row, `block_size` threads
  kThreadPerRow,  // one thread per reduced row
};

struct KernelSource {
  std::string name;
  std::string source;
  std::vector<std::string> ops;  // qualified ATen ops fused into it, in order
  LaunchShape launch = LaunchShape::kElementwise;
  int64_t work_items = 0;
  int vector_width = 1;
  int block_size = 256;
  bool index64 = false;
};

// The signature the group gets when every input is a contiguous device tensor,
// 0-dim CPU parameters are host scalars and 0-dim constants are literals.
// compile_cuda uses it to compile ahead of time.
KernelSignature PredictedSignature(const Program& program,
                                   const FusionGroup& group,
                                   const std::vector<bool>& host_scalar_parameters);

// The literal C++ spelling of a 0-dim constant (1.5, 2LL, true, inf, nan).
std::string ConstantLiteral(const at::Tensor& value);

KernelSource GenerateKernel(const Program& program,
                            const FusionGroup& group,
                            const KernelSignature& signature,
                            const KernelDialect& dialect);

}  // namespace lazyfuse
