#pragma once

// What the fusion planner and the kernel codegen know about each ATen op:
// whether it is pointwise (and its C expression), a view (and how it maps
// indices), or a reduction the codegen can emit. An op missing here stays an
// ATen call. Backend-independent: nothing here knows about CUDA.

#include <optional>
#include <string>
#include <vector>

#include "program/program.h"

namespace lazyfuse {

// The type a pointwise step computes in: half and bfloat16 compute in float.
at::ScalarType OpMathType(at::ScalarType dtype);
// Whether the codegen can load, store and compute this dtype.
bool IsFusibleDtype(at::ScalarType dtype);
// ATen's result type of a step's inputs (promotion.cpp), as TensorIterator
// computes it: wrapped numbers and 0-dim tensors count only when they raise
// the category. nullopt for a step without inputs.
std::optional<at::ScalarType> PromotedInputType(const Step& step, const Program& program);

// How an op reads an operand that is a CPU scalar (a Python number, Scalar
// argument or 0-dim CPU tensor) of another dtype than the common one.
enum class ScalarOperands {
  kRounded,              // cast to the common dtype, as TensorIterator casts
  kFullPrecision,        // read at the compute type (mul, div)
  kFullPrecisionOnCuda,  // CUDA reads it at full precision, CPU eager casts (add, sub)
};

struct PointwiseRule {
  // C expression over the step's inputs. $0..$9: input k converted to the
  // compute type; $r0..$r9: input k as loaded; $T: the compute type;
  // @name: the step attribute `name` as a literal.
  std::string expr;
  at::ScalarType compute = at::kFloat;
  // ATen's common dtype: each operand of another dtype is cast to it first,
  // as eager does, so an int32 2049 meeting a half tensor is 2048, and a
  // number compared with a half tensor is rounded to half.
  std::optional<at::ScalarType> operand_dtype;
  // Bit k set: input k is no operand (a Scalar argument such as alpha, read
  // at the compute type; a mask; a condition) and is never cast.
  uint32_t kept = 0;
  ScalarOperands scalars = ScalarOperands::kRounded;
};

// The rule for a pointwise step, or nullopt when the codegen cannot fuse it
// (unknown op, unsupported dtype or attribute).
std::optional<PointwiseRule> PointwiseRuleFor(const Step& step, const Program& program);

enum class ViewKind { kReshape, kBroadcast, kPermute, kSlice, kSelect };

struct ViewRule {
  ViewKind kind = ViewKind::kReshape;
  std::vector<int64_t> permutation;  // kPermute: output dim d reads input dim permutation[d]
  int64_t dim = 0;                   // kSlice, kSelect
  int64_t start = 0;                 // kSlice
  int64_t step = 1;                  // kSlice
  int64_t index = 0;                 // kSelect
};

std::optional<ViewRule> ViewRuleFor(const Step& step, const Program& program);

enum class ReductionKind { kSum, kMean, kMax, kMin, kVar, kSoftmax, kLogSoftmax, kLayerNorm };

struct ReductionRule {
  ReductionKind kind = ReductionKind::kSum;
  // Reduced dims of the input, ascending.
  std::vector<int64_t> dims;
  double correction = 1.0;  // kVar
  double eps = 0.0;         // kLayerNorm
  bool has_weight = false;  // kLayerNorm
  bool has_bias = false;    // kLayerNorm
};

std::optional<ReductionRule> ReductionRuleFor(const Step& step, const Program& program);

// Softmax, log-softmax and layer norm write a result the shape of their input;
// the other reductions write one value per reduced row.
bool WritesFullShape(ReductionKind kind);
const char* ReductionKindName(ReductionKind kind);

}  // namespace lazyfuse
