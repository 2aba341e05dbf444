#include "kernels/writer.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>

#include "fusion/rules.h"

namespace lazyfuse {
namespace {

std::string JoinDims(const std::vector<std::string>& dims) {
  std::string out;
  for (const auto& d : dims) {
    out += d + ",";
  }
  return out;
}

std::string IndexKey(const KernelIndex& index) {
  return index.linear.empty() ? "D" + JoinDims(index.dims) : "L" + index.linear;
}

std::string AttrLiteral(const Step& step, const std::string& name) {
  const c10::IValue* value = step.attr(name);
  TORCH_CHECK(value != nullptr, "lazyfuse: ", step.qualified_op(), " has no attribute ", name);
  if (value->isDouble()) {
    return ConstantLiteral(at::scalar_tensor(value->toDouble(), at::kDouble));
  }
  if (value->isInt()) {
    return std::to_string(value->toInt()) + "LL";
  }
  if (value->isBool()) {
    return value->toBool() ? "true" : "false";
  }
  TORCH_CHECK(false, "lazyfuse: attribute ", name, " of ", step.qualified_op(), " is not a number");
}

// Substitutes $k, $rk, $T, $S (the output's StorageSuffix), $i0 (the
// element's index in the output's first dim) and @name in a pointwise
// rule's expression.
std::string RenderExpression(const std::string& expr,
                             const std::vector<std::string>& raw,
                             const std::string& compute_type,
                             at::ScalarType out_dtype,
                             const std::string& first_dim,
                             const Step& step) {
  std::string out;
  for (size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    if (c == '$' && i + 1 < expr.size()) {
      const char next = expr[i + 1];
      if (next == 'T' || next == 'S') {
        out += next == 'T' ? compute_type : StorageSuffix(out_dtype);
        ++i;
        continue;
      }
      if (next == 'i') {
        TORCH_CHECK(
            expr.compare(i, 3, "$i0") == 0 && !first_dim.empty(), "lazyfuse: bad rule ", expr);
        out += "(" + first_dim + ")";
        i += 2;
        continue;
      }
      const bool as_loaded = next == 'r';
      const size_t digit_at = i + (as_loaded ? 2 : 1);
      TORCH_CHECK(digit_at < expr.size() && isdigit(expr[digit_at]), "lazyfuse: bad rule ", expr);
      const size_t k = static_cast<size_t>(expr[digit_at] - '0');
      TORCH_CHECK(k < raw.size(),
                  "lazyfuse: ",
                  step.qualified_op(),
                  " rule reads input ",
                  k,
                  " of ",
                  raw.size());
      out += as_loaded ? raw[k] : "((" + compute_type + ")" + raw[k] + ")";
      i = digit_at;
      continue;
    }
    if (c == '@') {
      size_t end = i + 1;
      while (end < expr.size() && (isalnum(expr[end]) || expr[end] == '_')) {
        ++end;
      }
      out += AttrLiteral(step, expr.substr(i + 1, end - i - 1));
      i = end - 1;
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * std::max<int64_t>(shape[d + 1], 1);
  }
  return strides;
}

KernelWriter::KernelWriter(const Program& program,
                           const FusionGroup& group,
                           const KernelSignature& signature,
                           const KernelDialect& dialect,
                           std::string index_type,
                           bool simplify_indices)
    : program_(program),
      group_(group),
      signature_(signature),
      dialect_(dialect),
      index_type_(std::move(index_type)),
      simplify_indices_(simplify_indices),
      scopes_(1) {
  for (size_t k = 0; k < group.inputs.size(); ++k) {
    input_slot_[group.inputs[k]] = k;
  }
  for (size_t s : group.steps) {
    for (BufferId id : program.steps[s].outputs) {
      producer_step_[id] = s;
    }
  }
}

void KernelWriter::Line(const std::string& text) {
  text_.append(static_cast<size_t>(indent_) * 2, ' ');
  text_ += text;
  text_ += "\n";
}

void KernelWriter::Open(const std::string& header) {
  Line(header + " {");
  ++indent_;
  scopes_.emplace_back();
}

void KernelWriter::Close() {
  --indent_;
  scopes_.pop_back();
  Line("}");
}

std::string KernelWriter::NewVar(const char* prefix) {
  // Kernel parameters are in<k>, s<k> (host scalars) and out<k>: a local
  // named like one would shadow it.
  const std::string name = prefix;
  TORCH_CHECK(name != "s" && name != "in" && name != "out",
              "lazyfuse: kernel variable prefix '",
              name,
              "' would shadow a kernel parameter");
  return name + std::to_string(next_var_++);
}

std::string KernelWriter::Lookup(const std::string& key) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(key);
    if (found != it->end()) {
      return found->second;
    }
  }
  return {};
}

void KernelWriter::Remember(const std::string& key, const std::string& value) {
  scopes_.back()[key] = value;
}

void KernelWriter::BindRegister(BufferId id, std::string name) {
  registers_[id] = std::move(name);
}

void KernelWriter::BindCustom(BufferId id,
                              std::function<std::string(KernelWriter&, KernelIndex)> render) {
  custom_[id] = std::move(render);
}

void KernelWriter::SetVectorLane(std::string linear_var, std::string lane) {
  vector_linear_ = std::move(linear_var);
  vector_lane_ = std::move(lane);
}

bool KernelWriter::IsContiguousInput(size_t slot) const {
  const BufferInfo& info = program_.buffers[group_.inputs[slot]];
  const auto expected = ContiguousStrides(info.sizes);
  const auto& strides = signature_.inputs[slot].strides;
  for (size_t d = 0; d < info.sizes.size(); ++d) {
    if (info.sizes[d] != 1 && strides.at(d) != expected[d]) {
      return false;
    }
  }
  return true;
}

std::string KernelWriter::Load(size_t slot, KernelIndex index) {
  const InputBinding& binding = signature_.inputs.at(slot);
  const BufferInfo& info = program_.buffers[group_.inputs[slot]];
  if (binding.kind == InputBinding::Kind::kConstant) {
    return binding.literal;
  }
  if (binding.kind == InputBinding::Kind::kHostScalar) {
    return "s" + std::to_string(slot);
  }
  const std::string reg = RegisterTypeName(info.dtype);
  if (IsContiguousInput(slot) && !vector_linear_.empty() && index.linear == vector_linear_) {
    vector_inputs_.insert(slot);
    return LoadConversion(info.dtype, "vi" + std::to_string(slot) + ".e[" + vector_lane_ + "]");
  }
  std::string offset;
  if (IsContiguousInput(slot)) {
    offset = Linear(index);
  } else {
    const auto& dims = Dims(index);
    for (size_t d = 0; d < info.sizes.size(); ++d) {
      const int64_t stride = binding.strides[d];
      if (info.sizes[d] == 1 || stride == 0 || dims[d] == "0") {
        continue;
      }
      const std::string term = stride == 1 ? dims[d] : dims[d] + " * " + std::to_string(stride);
      offset += (offset.empty() ? "" : " + ") + term;
    }
    offset = offset.empty() ? "0" : offset;
  }
  const std::string var = NewVar("v");
  Line("const " + reg + " " + var + " = " +
       LoadConversion(info.dtype, "lf_ld(in" + std::to_string(slot) + ", " + offset + ")") + ";");
  return var;
}

std::string KernelWriter::Value(BufferId id, KernelIndex index) {
  TORCH_CHECK(index.shape.size() == program_.buffers[id].sizes.size(),
              "lazyfuse: kernel codegen: buffer %",
              id,
              " of rank ",
              program_.buffers[id].sizes.size(),
              " is read at an index of rank ",
              index.shape.size());
  auto reg = registers_.find(id);
  if (reg != registers_.end()) {
    return reg->second;
  }
  const std::string key = std::to_string(id) + "@" + IndexKey(index);
  std::string known = Lookup(key);
  if (!known.empty()) {
    return known;
  }
  std::string value;
  auto custom = custom_.find(id);
  auto slot = input_slot_.find(id);
  if (custom != custom_.end()) {
    value = custom->second(*this, index);
  } else if (slot != input_slot_.end()) {
    value = Load(slot->second, index);
  } else {
    auto producer = producer_step_.find(id);
    TORCH_CHECK(producer != producer_step_.end(),
                "lazyfuse: kernel codegen: buffer %",
                id,
                " is neither an input nor produced in the group");
    const Step& step = program_.steps[producer->second];
    value = ViewRuleFor(step, program_) ? ViewValue(step, index) : Compute(step, id, index);
  }
  Remember(key, value);
  return value;
}

std::string KernelWriter::ViewValue(const Step& step, KernelIndex index) {
  const ViewRule rule = *ViewRuleFor(step, program_);
  const BufferId input = step.inputs[0];
  const std::vector<int64_t>& in_shape = program_.buffers[input].sizes;
  KernelIndex mapped{in_shape, "", {}, input};
  switch (rule.kind) {
    case ViewKind::kReshape:
      mapped.linear = Linear(index);
      break;
    case ViewKind::kBroadcast:
      mapped = Broadcast(index, input);
      break;
    case ViewKind::kPermute: {
      const auto& dims = Dims(index);
      mapped.dims.assign(in_shape.size(), "0");
      for (size_t d = 0; d < rule.permutation.size(); ++d) {
        mapped.dims[rule.permutation[d]] = dims[d];
      }
      break;
    }
    case ViewKind::kSlice: {
      mapped.dims = Dims(index);
      std::string& d = mapped.dims[rule.dim];
      const std::optional<AffineIndex> from = AffineOf(d);
      d = "(" + std::to_string(rule.start) + " + " + d + " * " + std::to_string(rule.step) + ")";
      if (from) {
        affine_.insert_or_assign(d,
                                 from->Scaled(rule.step).Plus(AffineIndex::Constant(rule.start)));
      }
      break;
    }
    case ViewKind::kSelect: {
      mapped.dims = Dims(index);
      mapped.dims.insert(mapped.dims.begin() + rule.dim, std::to_string(rule.index));
      break;
    }
  }
  return Value(input, mapped);
}

std::string KernelWriter::Compute(const Step& step, BufferId id, KernelIndex index) {
  const auto rule = PointwiseRuleFor(step, program_);
  TORCH_CHECK(rule, "lazyfuse: kernel codegen cannot render ", step.qualified_op());
  // Inputs the expression never names (zero's, fill's) are not loaded.
  std::vector<std::string> inputs;
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    const std::string digit = std::to_string(k);
    const bool used = k < 10 && (rule->expr.find("$" + digit) != std::string::npos ||
                                 rule->expr.find("$r" + digit) != std::string::npos);
    const BufferId input = step.inputs[k];
    std::string value = used ? Value(input, Broadcast(index, input)) : std::string();
    if (used && (k >= 32 || !(rule->kept & (1u << k)))) {
      value = AsCommonDtype(*rule, input, std::move(value));
    }
    if (used && at::isFloatingType(program_.buffers[input].dtype) &&
        at::isIntegralType(rule->compute, false)) {
      value = FromFloat(rule->compute, value);
    }
    inputs.push_back(std::move(value));
  }
  std::string first_dim;
  if (rule->expr.find("$i0") != std::string::npos) {
    first_dim = index.shape.empty() ? "0" : Dims(index).front();
  }
  const at::ScalarType out = program_.buffers[id].dtype;
  const std::string out_type = RegisterTypeName(out);
  const std::string expr =
      RenderExpression(rule->expr, inputs, RegisterTypeName(rule->compute), out, first_dim, step);
  const std::string var = NewVar("v");
  const std::string converted =
      at::isFloatingType(rule->compute) ? FromFloat(out, expr) : "(" + out_type + ")(" + expr + ")";
  Line("const " + out_type + " " + var + " = " + RoundToDtype(out, converted) + ";  // " +
       step.qualified_op());
  return var;
}

std::string KernelWriter::AsCommonDtype(const PointwiseRule& rule,
                                        BufferId input,
                                        std::string value) const {
  // Registers of half and bfloat16 are float: an operand of another dtype
  // is rounded to the common one, as eager casts it. Other common dtypes
  // are the compute type, whose cast in the expression does it.
  const auto common = rule.operand_dtype;
  if (!common || program_.buffers[input].dtype == *common ||
      (*common != at::kHalf && *common != at::kBFloat16)) {
    return value;
  }
  const auto slot = input_slot_.find(input);
  const bool host_scalar = slot != input_slot_.end() &&
                           signature_.inputs.at(slot->second).kind != InputBinding::Kind::kTensor;
  if (host_scalar && rule.scalars == ScalarOperands::kFullPrecision) {
    return value;
  }
  if (host_scalar && rule.scalars == ScalarOperands::kFullPrecisionOnCuda) {
    // Each target's eager: the prelude's macro rounds on the CPU only.
    return std::string(*common == at::kHalf ? "LF_HOST_SCALAR_HALF" : "LF_HOST_SCALAR_BF16") +
           "((float)(" + value + "))";
  }
  return RoundToDtype(*common, "(float)(" + value + ")");
}

void KernelWriter::ComputeOutput(size_t output_slot, const KernelIndex& domain_index) {
  const BufferId id = group_.outputs[output_slot];
  Value(id, Broadcast(domain_index, id));
}

void KernelWriter::Store(size_t output_slot, const KernelIndex& domain_index) {
  const BufferId id = group_.outputs[output_slot];
  const BufferInfo& info = program_.buffers[id];
  KernelIndex domain = domain_index;
  const std::string name = "out" + std::to_string(output_slot);
  if (ShapeNumel(info.sizes) == ShapeNumel(domain.shape)) {
    const std::string value = Value(id, Broadcast(domain, id));
    if (!vector_linear_.empty() && domain.linear == vector_linear_) {
      vector_outputs_.insert(output_slot);
      Line("vo" + std::to_string(output_slot) + ".e[" + vector_lane_ +
           "] = " + StoreConversion(info.dtype, value) + ";");
      return;
    }
    Line("lf_st(" + name + ", " + Linear(domain) + ", " + StoreConversion(info.dtype, value) +
         ");");
    return;
  }
  // A broadcast buffer: the domain visits each of its elements many times;
  // only the visit with zeros in the broadcast dims writes it.
  TORCH_CHECK(info.sizes.size() <= domain.shape.size(),
              "lazyfuse: kernel codegen: output %",
              id,
              " of rank ",
              info.sizes.size(),
              " is stored from a domain of rank ",
              domain.shape.size());
  const auto& dims = Dims(domain);
  const size_t offset = domain.shape.size() - info.sizes.size();
  std::string guard;
  for (size_t d = 0; d < domain.shape.size(); ++d) {
    const bool broadcast = d < offset || info.sizes[d - offset] == 1;
    if (broadcast && domain.shape[d] != 1) {
      guard += (guard.empty() ? "" : " && ") + dims[d] + " == 0";
    }
  }
  KernelIndex own = Broadcast(domain, id);
  const std::string value = Value(id, own);
  const std::string store =
      "lf_st(" + name + ", " + Linear(own) + ", " + StoreConversion(info.dtype, value) + ");";
  Line(guard.empty() ? store : "if (" + guard + ") " + store);
}

}  // namespace lazyfuse
