#include "fusion/rules.h"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_map>

namespace lazyfuse {
namespace {

enum class TypeFrom {
  kOutput,  // arithmetic: compute in the result's type
  kInputs,  // comparisons and tests: compute in the promoted input type
};

struct Entry {
  const char* expr;
  TypeFrom type_from = TypeFrom::kOutput;
  // Float-only expressions (exp, floor, pow, ...) are left to ATen when the
  // compute type is integral; ATen's integer semantics differ there.
  bool float_only = false;
  // Bit k set: input k is not an operand cast to the common dtype (a Scalar
  // argument such as alpha, read at the compute type; a mask; a condition).
  uint32_t kept = 0;
  ScalarOperands scalars = ScalarOperands::kRounded;
};

constexpr uint32_t Bit(int k) {
  return 1u << k;
}

const std::unordered_map<std::string, Entry>& PointwiseTable() {
  static const auto* table = new std::unordered_map<std::string, Entry>{
      // arithmetic
      {"aten::add.Tensor",
       {"$0 + lf_inner$S(lf_inner$S($2) * $1)",
        TypeFrom::kOutput,
        false,
        Bit(2),
        ScalarOperands::kFullPrecisionOnCuda}},
      {"aten::sub.Tensor",
       {"$0 - lf_inner$S(lf_inner$S($2) * $1)",
        TypeFrom::kOutput,
        false,
        Bit(2),
        ScalarOperands::kFullPrecisionOnCuda}},
      {"aten::mul.Tensor",
       {"$0 * $1", TypeFrom::kOutput, false, 0, ScalarOperands::kFullPrecision}},
      {"aten::div.Tensor", {"$0 / $1", TypeFrom::kOutput, true, 0, ScalarOperands::kFullPrecision}},
      {"aten::neg", {"-$0"}},
      {"aten::abs", {"lf_abs($0)"}},
      {"aten::reciprocal", {"($T)1 / $0", TypeFrom::kOutput, true}},
      {"aten::addcmul", {"$0 + $3 * $1 * $2", TypeFrom::kOutput, false, Bit(3)}},
      {"aten::addcdiv", {"$0 + $3 * ($1 / $2)", TypeFrom::kOutput, true, Bit(3)}},
      {"aten::lerp.Scalar", {"lf_lerp($0, $1, $2)", TypeFrom::kOutput, true, Bit(2)}},
      {"aten::lerp.Tensor", {"lf_lerp($0, $1, $2)", TypeFrom::kOutput, true}},
      {"aten::maximum", {"lf_maximum($0, $1)"}},
      {"aten::minimum", {"lf_minimum($0, $1)"}},
      {"aten::clamp_min", {"lf_clamp_min($0, $1)", TypeFrom::kOutput, false, Bit(1)}},
      {"aten::clamp_max", {"lf_clamp_max($0, $1)", TypeFrom::kOutput, false, Bit(1)}},
      {"aten::clamp_min.Tensor", {"lf_clamp_min($0, $1)"}},
      {"aten::clamp_max.Tensor", {"lf_clamp_max($0, $1)"}},
      {"aten::pow.Tensor_Scalar", {"lf_pow_scalar$S($0, $1)", TypeFrom::kOutput, true}},
      {"aten::pow.Tensor_Tensor", {"lf_pow($0, $1)", TypeFrom::kOutput, true}},
      {"aten::pow.Scalar", {"lf_pow($0, $1)", TypeFrom::kOutput, true}},
      {"aten::sign", {"lf_sign($0)"}},
      {"aten::sgn", {"lf_sign($0)"}},
      {"aten::fill.Scalar", {"$1", TypeFrom::kOutput, false, Bit(1)}},
      {"aten::fill.Tensor", {"$1", TypeFrom::kOutput, false, Bit(1)}},
      {"aten::zero", {"($T)0"}},
      {"aten::where.self", {"($r0 ? $1 : $2)", TypeFrom::kOutput, false, Bit(0)}},
      {"lazy_tensors::cast", {"$0", TypeFrom::kOutput, false, Bit(0)}},
      // float math
      {"aten::exp", {"lf_exp($0)", TypeFrom::kOutput, true}},
      {"aten::exp2", {"lf_exp2($0)", TypeFrom::kOutput, true}},
      {"aten::expm1", {"lf_expm1($0)", TypeFrom::kOutput, true}},
      {"aten::log", {"lf_log($0)", TypeFrom::kOutput, true}},
      {"aten::log2", {"lf_log2($0)", TypeFrom::kOutput, true}},
      {"aten::log10", {"lf_log10($0)", TypeFrom::kOutput, true}},
      {"aten::log1p", {"lf_log1p($0)", TypeFrom::kOutput, true}},
      {"aten::sqrt", {"lf_sqrt($0)", TypeFrom::kOutput, true}},
      {"aten::rsqrt", {"lf_rsqrt($0)", TypeFrom::kOutput, true}},
      {"aten::sin", {"lf_sin($0)", TypeFrom::kOutput, true}},
      {"aten::cos", {"lf_cos($0)", TypeFrom::kOutput, true}},
      {"aten::tan", {"lf_tan($0)", TypeFrom::kOutput, true}},
      {"aten::tanh", {"lf_tanh($0)", TypeFrom::kOutput, true}},
      {"aten::erf", {"lf_erf($0)", TypeFrom::kOutput, true}},
      {"aten::erfc", {"lf_erfc($0)", TypeFrom::kOutput, true}},
      {"aten::floor", {"lf_floor($0)", TypeFrom::kOutput, true}},
      {"aten::ceil", {"lf_ceil($0)", TypeFrom::kOutput, true}},
      {"aten::trunc", {"lf_trunc($0)", TypeFrom::kOutput, true}},
      {"aten::round", {"lf_rint($0)", TypeFrom::kOutput, true}},
      {"aten::frac", {"$0 - lf_trunc($0)", TypeFrom::kOutput, true}},
      // activations and their gradients
      {"aten::relu", {"lf_relu($0)"}},
      {"aten::sigmoid", {"($T)1 / (($T)1 + lf_exp(-$0))", TypeFrom::kOutput, true}},
      {"aten::silu", {"$0 / (($T)1 + lf_exp(-$0))", TypeFrom::kOutput, true}},
      {"aten::sigmoid_backward", {"$0 * (($T)1 - $1) * $1", TypeFrom::kOutput, true}},
      {"aten::tanh_backward", {"$0 * (($T)1 - $1 * $1)", TypeFrom::kOutput, true}},
      {"aten::silu_backward", {"lf_silu_backward($0, $1)", TypeFrom::kOutput, true}},
      {"aten::threshold", {"($0 <= $1 ? $2 : $0)", TypeFrom::kOutput, false, Bit(1) | Bit(2)}},
      {"aten::threshold_backward", {"($1 <= $2 ? ($T)0 : $0)", TypeFrom::kOutput, false, Bit(2)}},
      {"aten::leaky_relu", {"($0 > ($T)0 ? $0 : $0 * $1)", TypeFrom::kOutput, true, Bit(1)}},
      {"aten::leaky_relu_backward",
       {"($1 > ($T)0 ? $0 : $0 * $2)", TypeFrom::kOutput, true, Bit(2)}},
      {"aten::hardtanh",
       {"lf_clamp_max(lf_clamp_min($0, $1), $2)", TypeFrom::kOutput, true, Bit(1) | Bit(2)}},
      {"aten::softplus",
       {"($0 * $1 > $2 ? $0 : lf_log1p(lf_exp($0 * $1)) / $1)",
        TypeFrom::kOutput,
        true,
        Bit(1) | Bit(2)}},
      {"aten::native_dropout_backward",
       {"($r1 ? $0 * ($T)@scale : ($T)0)", TypeFrom::kOutput, true, Bit(1)}},
      // comparisons and tests
      {"aten::eq.Tensor", {"$0 == $1", TypeFrom::kInputs}},
      {"aten::eq.Scalar", {"$0 == $1", TypeFrom::kInputs}},
      {"aten::ne.Tensor", {"$0 != $1", TypeFrom::kInputs}},
      {"aten::ne.Scalar", {"$0 != $1", TypeFrom::kInputs}},
      {"aten::lt.Tensor", {"$0 < $1", TypeFrom::kInputs}},
      {"aten::lt.Scalar", {"$0 < $1", TypeFrom::kInputs}},
      {"aten::le.Tensor", {"$0 <= $1", TypeFrom::kInputs}},
      {"aten::le.Scalar", {"$0 <= $1", TypeFrom::kInputs}},
      {"aten::gt.Tensor", {"$0 > $1", TypeFrom::kInputs}},
      {"aten::gt.Scalar", {"$0 > $1", TypeFrom::kInputs}},
      {"aten::ge.Tensor", {"$0 >= $1", TypeFrom::kInputs}},
      {"aten::ge.Scalar", {"$0 >= $1", TypeFrom::kInputs}},
      {"aten::isnan", {"$r0 != $r0", TypeFrom::kInputs, false, ~0u}},
      {"aten::isneginf", {"$r0 == -LF_INF", TypeFrom::kInputs, false, ~0u}},
      {"aten::isposinf", {"$r0 == LF_INF", TypeFrom::kInputs, false, ~0u}},
      {"aten::logical_not", {"!$r0", TypeFrom::kInputs, false, ~0u}},
      {"aten::logical_and", {"$r0 && $r1", TypeFrom::kInputs, false, ~0u}},
      {"aten::logical_or", {"$r0 || $r1", TypeFrom::kInputs, false, ~0u}},
      {"aten::logical_xor", {"(bool)$r0 != (bool)$r1", TypeFrom::kInputs, false, ~0u}},
  };
  return *table;
}

int64_t WrapDim(int64_t dim, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  return dim < 0 ? dim + r : dim;
}

std::vector<int64_t> IntList(const c10::IValue* value) {
  if (value == nullptr || value->isNone()) {
    return {};
  }
  if (value->isInt()) {
    return {value->toInt()};
  }
  return value->toIntVector();
}

std::optional<int64_t> OptionalInt(const c10::IValue* value) {
  if (value == nullptr || value->isNone()) {
    return std::nullopt;
  }
  return value->toInt();
}

// An attribute every step of the op has; its absence is a lowering bug.
const c10::IValue& RequiredAttr(const Step& step, const char* name) {
  const c10::IValue* value = step.attr(name);
  TORCH_CHECK(value != nullptr, "lazyfuse: ", step.qualified_op(), " has no attribute ", name);
  return *value;
}

bool BoolAttr(const Step& step, const char* name, bool fallback = false) {
  const c10::IValue* value = step.attr(name);
  return value != nullptr && value->isBool() ? value->toBool() : fallback;
}

const BufferInfo& InputInfo(const Step& step, const Program& program, size_t k) {
  return program.buffers.at(step.inputs.at(k));
}

bool AllFusibleDtypes(const Step& step, const Program& program) {
  for (BufferId id : step.inputs) {
    if (!IsFusibleDtype(program.buffers[id].dtype)) {
      return false;
    }
  }
  for (BufferId id : step.outputs) {
    if (!IsFusibleDtype(program.buffers[id].dtype)) {
      return false;
    }
  }
  return true;
}

bool InRange(int64_t dim, size_t rank) {
  return dim >= 0 && dim < static_cast<int64_t>(rank);
}

// Reduced dims, ascending; an empty or absent list means every dim. Empty
// when a dim is out of range (ATen reports that error, not the codegen).
std::vector<int64_t> ReducedDims(const c10::IValue* dims, size_t rank) {
  std::vector<int64_t> out;
  for (int64_t d : IntList(dims)) {
    out.push_back(WrapDim(d, rank));
    if (!InRange(out.back(), rank)) {
      return {};
    }
  }
  if (!IntList(dims).empty()) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  if (out.empty()) {
    for (size_t d = 0; d < rank; ++d) {
      out.push_back(static_cast<int64_t>(d));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

at::ScalarType OpMathType(at::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16 ? at::kFloat : dtype;
}

bool IsFusibleDtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kBool:
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

std::optional<PointwiseRule> PointwiseRuleFor(const Step& step, const Program& program) {
  if (step.outputs.size() != 1 || !AllFusibleDtypes(step, program)) {
    return std::nullopt;
  }
  const std::string name = step.qualified_op();
  const at::ScalarType out = program.buffers[step.outputs[0]].dtype;
  if (name == "aten::gelu" || name == "aten::gelu_backward") {
    const c10::IValue* approximate = step.attr("approximate");
    const bool tanh =
        approximate != nullptr && approximate->isString() && approximate->toStringRef() == "tanh";
    const char* forward = tanh ? "lf_gelu_tanh($0)" : "lf_gelu($0)";
    const char* backward = tanh ? "lf_gelu_tanh_backward($0, $1)" : "lf_gelu_backward($0, $1)";
    if (!at::isFloatingType(out)) {
      return std::nullopt;
    }
    return PointwiseRule{name == "aten::gelu" ? forward : backward, OpMathType(out)};
  }
  if (name == "aten::clamp" || name == "aten::clamp.Tensor") {
    std::string expr = "$0";
    int next = 1;
    if (BoolAttr(step, "has_min")) {
      expr = "lf_clamp_min(" + expr + ", $" + std::to_string(next++) + ")";
    }
    if (BoolAttr(step, "has_max")) {
      expr = "lf_clamp_max(" + expr + ", $" + std::to_string(next++) + ")";
    }
    PointwiseRule rule{expr, OpMathType(out)};
    rule.operand_dtype = out;
    if (name == "aten::clamp") {
      rule.kept = ~1u;  // min and max are Scalar arguments
    }
    return rule;
  }
  if (name == "aten::div.Tensor_mode") {
    const c10::IValue* mode = step.attr("rounding_mode");
    if (mode == nullptr || mode->isNone()) {
      return PointwiseRule{"$0 / $1", OpMathType(out)};
    }
    if (!at::isFloatingType(out)) {
      return std::nullopt;
    }
    const std::string& how = mode->toStringRef();
    PointwiseRule rule{how == "floor" ? "lf_div_floor($0, $1)" : "lf_trunc(lf_inner$S($0 / $1))",
                       OpMathType(out)};
    rule.operand_dtype = out;
    rule.scalars = ScalarOperands::kFullPrecision;
    return rule;
  }
  if (name == "aten::select_backward") {
    // x.select(0, i)'s gradient: the gradient where the first index is i,
    // else 0 (an unbound q, k or v). Only dim 0, where the gradient reads as
    // a broadcast of one dim fewer.
    const std::vector<int64_t>& sizes = program.buffers[step.outputs[0]].sizes;
    const std::vector<int64_t>& grad = InputInfo(step, program, 0).sizes;
    const int64_t rank = static_cast<int64_t>(sizes.size());
    if (rank == 0 || WrapDim(RequiredAttr(step, "dim").toInt(), sizes.size()) != 0 ||
        grad != std::vector<int64_t>(sizes.begin() + 1, sizes.end())) {
      return std::nullopt;
    }
    const int64_t index = RequiredAttr(step, "index").toInt();
    const int64_t wrapped = index < 0 ? index + sizes[0] : index;
    return PointwiseRule{"($i0 == " + std::to_string(wrapped) + " ? $0 : ($T)0)", OpMathType(out)};
  }
  const auto& table = PointwiseTable();
  auto it = table.find(name);
  if (it == table.end()) {
    return std::nullopt;
  }
  const Entry& entry = it->second;
  at::ScalarType common = out;
  if (entry.type_from == TypeFrom::kInputs) {
    common = PromotedInputType(step, program).value_or(out);
  }
  const at::ScalarType compute = OpMathType(common);
  if (entry.float_only && !at::isFloatingType(compute)) {
    return std::nullopt;
  }
  PointwiseRule rule{entry.expr, compute};
  rule.operand_dtype = common;
  rule.kept = entry.kept;
  rule.scalars = entry.scalars;
  return rule;
}

std::optional<ViewRule> ViewRuleFor(const Step& step, const Program& program) {
  if (step.outputs.size() != 1 || step.inputs.empty() || !AllFusibleDtypes(step, program)) {
    return std::nullopt;
  }
  const std::string name = step.qualified_op();
  const size_t rank = InputInfo(step, program, 0).sizes.size();
  ViewRule rule;
  if (name == "aten::view_copy" || name == "aten::_unsafe_view" || name == "aten::alias_copy" ||
      name == "aten::detach_copy" || name == "aten::unsqueeze_copy" ||
      name == "aten::squeeze_copy" || name == "aten::squeeze_copy.dim" ||
      name == "aten::squeeze_copy.dims") {
    rule.kind = ViewKind::kReshape;
    return rule;
  }
  if (name == "aten::expand_copy" || name == "aten::expand") {
    rule.kind = ViewKind::kBroadcast;
    return rule;
  }
  if (name == "aten::permute_copy") {
    rule.kind = ViewKind::kPermute;
    for (int64_t d : IntList(step.attr("dims"))) {
      rule.permutation.push_back(WrapDim(d, rank));
      if (!InRange(rule.permutation.back(), rank)) {
        return std::nullopt;
      }
    }
    return rule.permutation.size() == rank ? std::optional<ViewRule>(rule) : std::nullopt;
  }
  if (name == "aten::t_copy" || name == "aten::transpose_copy.int") {
    if (rank < 2) {
      rule.kind = ViewKind::kReshape;  // transposing a 0-d or 1-d tensor moves nothing
      return rule;
    }
    rule.kind = ViewKind::kPermute;
    for (size_t d = 0; d < rank; ++d) {
      rule.permutation.push_back(static_cast<int64_t>(d));
    }
    if (name == "aten::t_copy") {
      if (rank == 2) {
        std::swap(rule.permutation[0], rule.permutation[1]);
      }
    } else {
      const int64_t a = WrapDim(RequiredAttr(step, "dim0").toInt(), rank);
      const int64_t b = WrapDim(RequiredAttr(step, "dim1").toInt(), rank);
      if (!InRange(a, rank) || !InRange(b, rank)) {
        return std::nullopt;
      }
      std::swap(rule.permutation[a], rule.permutation[b]);
    }
    return rule;
  }
  if (name == "aten::slice_copy.Tensor") {
    rule.kind = ViewKind::kSlice;
    rule.dim = WrapDim(RequiredAttr(step, "dim").toInt(), rank);
    if (!InRange(rule.dim, rank)) {
      return std::nullopt;
    }
    const int64_t size = InputInfo(step, program, 0).sizes.at(rule.dim);
    int64_t start = OptionalInt(step.attr("start")).value_or(0);
    start = start < 0 ? start + size : start;
    rule.start = std::min(std::max<int64_t>(start, 0), size);
    rule.step = RequiredAttr(step, "step").toInt();
    return rule.step > 0 ? std::optional<ViewRule>(rule) : std::nullopt;
  }
  if (name == "aten::select_copy.int") {
    rule.kind = ViewKind::kSelect;
    rule.dim = WrapDim(RequiredAttr(step, "dim").toInt(), rank);
    if (!InRange(rule.dim, rank)) {
      return std::nullopt;
    }
    const int64_t size = InputInfo(step, program, 0).sizes.at(rule.dim);
    const int64_t index = RequiredAttr(step, "index").toInt();
    rule.index = index < 0 ? index + size : index;
    return rule.index >= 0 && rule.index < size ? std::optional<ViewRule>(rule) : std::nullopt;
  }
  return std::nullopt;
}

std::optional<ReductionRule> ReductionRuleFor(const Step& step, const Program& program) {
  if (step.inputs.empty() || step.outputs.empty() || !AllFusibleDtypes(step, program)) {
    return std::nullopt;
  }
  const std::string name = step.qualified_op();
  const BufferInfo& input = InputInfo(step, program, 0);
  const size_t rank = input.sizes.size();
  const at::ScalarType out = program.buffers[step.outputs[0]].dtype;
  if (rank == 0 || !at::isFloatingType(out)) {
    // Integer sums accumulate in int64 in ATen; leave them and 0-dim inputs to it.
    return std::nullopt;
  }
  ReductionRule rule;
  if (name == "aten::sum" || name == "aten::sum.dim_IntList" || name == "aten::mean" ||
      name == "aten::mean.dim") {
    const bool mean = name.rfind("aten::mean", 0) == 0;
    rule.kind = mean ? ReductionKind::kMean : ReductionKind::kSum;
    rule.dims = ReducedDims(step.attr("dim"), rank);
    return rule.dims.empty() ? std::nullopt : std::optional<ReductionRule>(rule);
  }
  if (name == "aten::amax" || name == "aten::amin") {
    rule.kind = name == "aten::amax" ? ReductionKind::kMax : ReductionKind::kMin;
    rule.dims = ReducedDims(step.attr("dim"), rank);
    return rule.dims.empty() ? std::nullopt : std::optional<ReductionRule>(rule);
  }
  if (name == "aten::var.correction") {
    rule.kind = ReductionKind::kVar;
    rule.dims = ReducedDims(step.attr("dim"), rank);
    return rule.dims.empty() ? std::nullopt : std::optional<ReductionRule>(rule);
  }
  if (name == "aten::_softmax" || name == "aten::_log_softmax") {
    rule.kind = name == "aten::_softmax" ? ReductionKind::kSoftmax : ReductionKind::kLogSoftmax;
    rule.dims = {WrapDim(RequiredAttr(step, "dim").toInt(), rank)};
    if (!InRange(rule.dims[0], rank)) {
      return std::nullopt;
    }
    return rule;
  }
  if (name == "aten::native_layer_norm") {
    rule.kind = ReductionKind::kLayerNorm;
    const size_t normalized = IntList(step.attr("normalized_shape")).size();
    if (normalized == 0 || normalized > rank) {
      return std::nullopt;
    }
    for (size_t d = rank - normalized; d < rank; ++d) {
      rule.dims.push_back(static_cast<int64_t>(d));
    }
    rule.eps = RequiredAttr(step, "eps").toDouble();
    rule.has_weight = BoolAttr(step, "has_weight");
    rule.has_bias = BoolAttr(step, "has_bias");
    return rule;
  }
  return std::nullopt;
}

bool WritesFullShape(ReductionKind kind) {
  return kind == ReductionKind::kSoftmax || kind == ReductionKind::kLogSoftmax ||
         kind == ReductionKind::kLayerNorm;
}

const char* ReductionKindName(ReductionKind kind) {
  switch (kind) {
    case ReductionKind::kSum:
      return "sum";
    case ReductionKind::kMean:
      return "mean";
    case ReductionKind::kMax:
      return "max";
    case ReductionKind::kMin:
      return "min";
    case ReductionKind::kVar:
      return "var";
    case ReductionKind::kSoftmax:
      return "softmax";
    case ReductionKind::kLogSoftmax:
      return "log_softmax";
    case ReductionKind::kLayerNorm:
      return "layer_norm";
  }
  return "unknown";
}

}  // namespace lazyfuse
