#include "kernels/codegen.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "fusion/rules.h"
#include "kernels/strategy_constants.h"
#include "kernels/vector_registers.h"
#include "kernels/writer.h"

namespace lazyfuse {
namespace {

constexpr int64_t k32BitLimit = int64_t{1} << 30;

std::string ShortOpName(const std::string& qualified) {
  std::string name = qualified.substr(qualified.rfind(':') + 1);
  name = name.substr(0, name.find('.'));
  name.erase(std::remove_if(name.begin(), name.end(), [](char c) { return !isalnum(c); }),
             name.end());
  return name;
}

std::string KernelName(const Program& program, const FusionGroup& group) {
  std::string name = std::string("lf_") + GroupKindName(group.kind);
  size_t shown = 0;
  for (size_t s : group.steps) {
    if (shown++ == 4) {
      name += "_etc" + std::to_string(group.steps.size());
      break;
    }
    name += "_" + ShortOpName(program.steps[s].qualified_op());
  }
  return name;
}

// 32-bit index arithmetic when every index the kernel computes leaves
// headroom for the grid-stride increment; 64-bit otherwise. The kernel
// indexes every buffer its steps touch, stored or not: a group shrunk by a
// slice computes its producer at indices of the full, never stored value.
bool NeedsIndex64(const Program& program,
                  const FusionGroup& group,
                  const KernelSignature& signature) {
  int64_t largest = ShapeNumel(group.domain);
  for (size_t s : group.steps) {
    for (const auto* buffers : {&program.steps[s].inputs, &program.steps[s].outputs}) {
      for (BufferId id : *buffers) {
        largest = std::max(largest, ShapeNumel(program.buffers[id].sizes));
      }
    }
  }
  for (size_t k = 0; k < group.inputs.size(); ++k) {
    const auto& sizes = program.buffers[group.inputs[k]].sizes;
    if (signature.inputs[k].kind == InputBinding::Kind::kTensor) {
      TORCH_CHECK(signature.inputs[k].strides.size() == sizes.size(),
                  "lazyfuse: kernel codegen: input ",
                  k,
                  " is bound with ",
                  signature.inputs[k].strides.size(),
                  " strides for ",
                  sizes.size(),
                  " dims");
      int64_t extent = 0;
      for (size_t d = 0; d < sizes.size(); ++d) {
        extent += (std::max<int64_t>(sizes[d], 1) - 1) * std::abs(signature.inputs[k].strides[d]);
      }
      largest = std::max(largest, extent + 1);
    }
  }
  return largest > k32BitLimit;
}

std::string Parameters(const Program& program,
                       const FusionGroup& group,
                       const KernelSignature& signature,
                       const KernelDialect& dialect,
                       std::vector<std::string>& types) {
  std::vector<std::string> params;
  // An output that may be written over an input's memory (buffer donation)
  // aliases it, so neither pointer may be declared restrict: that would also
  // allow reads through the incoherent read-only cache after the write.
  std::vector<bool> may_alias(group.inputs.size(), false);
  for (const auto& inputs : group.in_place) {
    for (size_t k : inputs) {
      TORCH_CHECK(k < may_alias.size(),
                  "lazyfuse: kernel codegen: an in-place plan names input ",
                  k,
                  " of ",
                  may_alias.size());
      may_alias[k] = true;
    }
  }
  auto restrict_ = [&](bool aliased) {
    return aliased ? std::string(" ") : " " + std::string(dialect.restrict_qualifier) + " ";
  };
  for (size_t k = 0; k < group.inputs.size(); ++k) {
    const at::ScalarType dtype = program.buffers[group.inputs[k]].dtype;
    switch (signature.inputs[k].kind) {
      case InputBinding::Kind::kTensor:
        types.push_back("const " + std::string(StorageTypeName(dtype)) + "*");
        params.push_back(types.back() + restrict_(may_alias[k]) + "in" + std::to_string(k));
        break;
      case InputBinding::Kind::kHostScalar:
        types.push_back(RegisterTypeName(dtype));
        params.push_back(types.back() + " s" + std::to_string(k));
        break;
      case InputBinding::Kind::kConstant:
        break;
    }
  }
  for (size_t k = 0; k < group.outputs.size(); ++k) {
    const at::ScalarType dtype = program.buffers[group.outputs[k]].dtype;
    types.push_back(std::string(StorageTypeName(dtype)) + "*");
    params.push_back(types.back() + restrict_(!group.in_place[k].empty()) + "out" +
                     std::to_string(k));
  }
  std::string joined;
  for (size_t i = 0; i < params.size(); ++i) {
    joined += (i ? ", " : "") + params[i];
  }
  return joined;
}

// A split reduction's partials and per-row counters, after the outputs, and
// the phase of a kernel launched more than once.
std::string WorkspaceParameters(KernelSource& out, const KernelDialect& dialect) {
  std::string params;
  const std::string restrict_ = dialect.restrict_qualifier;
  if (out.partials > 0) {
    out.parameter_types.push_back(out.partial_bytes == 8 ? "double*" : "float*");
    params += ", " + out.parameter_types.back() + " " + restrict_ + " lf_partials";
  }
  if (out.counters > 0) {
    out.parameter_types.push_back("unsigned int*");
    params += ", unsigned int* " + restrict_ + " lf_counters";
  }
  if (out.launches > 1) {
    out.parameter_types.push_back("int");
    params += ", int lf_phase";
  }
  return params;
}

constexpr const char* kVectorTypes =
    "struct alignas(16) lf_v16 { unsigned int w[4]; };\n"
    "struct alignas(8) lf_v8 { unsigned int w[2]; };\n";

class PointwiseKernel {
 public:
  PointwiseKernel(const Program& program,
                  const FusionGroup& group,
                  const KernelSignature& signature,
                  const KernelDialect& dialect,
                  KernelSource& out)
      : program_(program), group_(group), signature_(signature), dialect_(dialect), out_(out) {}

  std::string Body() {
    const int64_t numel = ShapeNumel(group_.domain);
    const std::string idx = out_.index64 ? "long long" : "int";
    if (dialect_.serial_blocks) {
      return ChunkLoop(numel, idx);
    }
    out_.vector_width = VectorWidth(numel);
    out_.work_items = out_.vector_width > 1 ? numel / out_.vector_width : numel;
    std::string text;
    text += "  const " + idx + " n = " + std::to_string(numel) + ";\n";
    text += "  const " + idx + " stride = (" + idx + ")" + dialect_.grid_size + " * " +
            dialect_.block_size + ";\n";
    text += "  const " + idx + " tid = (" + idx + ")" + dialect_.block_index + " * " +
            dialect_.block_size + " + " + dialect_.thread_index + ";\n";
    std::string tail_start = "tid";
    if (out_.vector_width > 1) {
      text += VectorLoop(idx);
      tail_start = std::string("n / ") + kVectorWidthName + " * " + kVectorWidthName + " + tid";
    }
    KernelWriter tail(program_, group_, signature_, dialect_, idx, out_.simplified_indices);
    tail.Open("for (" + idx + " i = " + tail_start + "; i < n; i += stride)");
    tail.DeclareIndexRange("i", numel);
    StoreAll(tail, KernelIndex{group_.domain, "i", {}});
    tail.Close();
    return text + tail.text();
  }

 private:
  // A block's contiguous chunk of the domain (a multiple of 16 elements, so
  // chunks start aligned), in one loop the host compiler vectorizes. A
  // kernel that reads through views or broadcasts splits each element's
  // index into dims; rendered for its own sizes, it walks its chunk row by
  // row of the domain's last dim instead, so the outer dims' arithmetic
  // cancels down to once a row and a row's reads are runs the compiler
  // vectorizes.
  std::string ChunkLoop(int64_t numel, const std::string& idx) {
    out_.work_items = numel;
    const std::string grid = "(" + idx + ")" + dialect_.grid_size;
    std::string text = "  const " + idx + " n = " + std::to_string(numel) + ";\n";
    text += "  const " + idx + " chunk = ((n + " + grid + " - 1) / " + grid + " + 15) / 16 * 16;\n";
    text += "  const " + idx + " first = (" + idx + ")" + dialect_.block_index + " * chunk;\n";
    text += "  const " + idx + " stop = first + chunk < n ? first + chunk : n;\n";
    KernelWriter loop(program_, group_, signature_, dialect_, idx, out_.simplified_indices);
    // An output in an input's memory is written at the element it read.
    loop.Line("#pragma GCC ivdep");
    loop.Open("for (" + idx + " i = first; i < stop; ++i)");
    loop.DeclareIndexRange("i", numel);
    StoreAll(loop, KernelIndex{group_.domain, "i", {}});
    loop.Close();
    if (!out_.simplified_indices || !loop.split_an_index() || group_.domain.size() < 2) {
      return text + loop.text();
    }
    return text + RowLoops(numel, idx);
  }

  std::string RowLoops(int64_t numel, const std::string& idx) {
    const int64_t row = std::max<int64_t>(group_.domain.back(), 1);
    KernelWriter loop(program_, group_, signature_, dialect_, idx, /*simplify_indices=*/true);
    loop.Line("const " + idx + " lf_row_length = " + std::to_string(row) + ";");
    loop.Open("for (" + idx + " io = first / lf_row_length; io * lf_row_length < stop; ++io)");
    loop.DeclareIndexRange("io", numel / row);
    loop.Line("const " + idx + " lf_at = io * lf_row_length;");
    loop.Line("const " + idx + " lf_begin = lf_at < first ? first - lf_at : 0;");
    loop.Line("const " + idx +
              " lf_end = stop - lf_at < lf_row_length ? stop - lf_at : lf_row_length;");
    loop.Line("#pragma GCC ivdep");
    loop.Open("for (" + idx + " ii = lf_begin; ii < lf_end; ++ii)");
    loop.DeclareIndexRange("ii", row);
    loop.Line("const " + idx + " i = lf_at + ii;");
    loop.DefineIndex("i", loop.AffineOf("io")->Scaled(row).Plus(*loop.AffineOf("ii")));
    StoreAll(loop, KernelIndex{group_.domain, "i", {}});
    loop.Close();
    loop.Close();
    return loop.text();
  }

  // Elements per thread so that the widest buffer moves 16 bytes at a time;
  // 1 when an input is not aligned for it.
  int VectorWidth(int64_t numel) const {
    size_t widest = 1;
    for (size_t k = 0; k < group_.inputs.size(); ++k) {
      const InputBinding& binding = signature_.inputs[k];
      if (binding.kind == InputBinding::Kind::kTensor) {
        if (!binding.aligned) {
          return 1;
        }
        widest = std::max(widest, c10::elementSize(program_.buffers[group_.inputs[k]].dtype));
      }
    }
    for (BufferId id : group_.outputs) {
      widest = std::max(widest, c10::elementSize(program_.buffers[id].dtype));
    }
    const int width = static_cast<int>(16 / widest);
    return numel >= width * 2 ? width : 1;
  }

  // Every value first, then the stores: any output the planner lets take an
  // input's memory (InPlaceInputs) is stored after the element's last load.
  void StoreAll(KernelWriter& writer, const KernelIndex& index) {
    for (size_t k = 0; k < group_.outputs.size(); ++k) {
      writer.ComputeOutput(k, index);
    }
    for (size_t k = 0; k < group_.outputs.size(); ++k) {
      writer.Store(k, index);
    }
  }

  std::string VectorLoop(const std::string& idx) {
    const int width = out_.vector_width;
    KernelWriter lane(program_, group_, signature_, dialect_, idx, out_.simplified_indices);
    lane.SetVectorLane("ij", "j");
    lane.Open(std::string("for (int j = 0; j < ") + kVectorWidthName + "; ++j)");
    lane.Line("const " + idx + " ij = base + j;");
    lane.DeclareIndexRange("ij", ShapeNumel(group_.domain));
    StoreAll(lane, KernelIndex{group_.domain, "ij", {}});
    lane.Close();
    std::string text = "  " + StrategyConstant(kVectorWidthName, width) + "\n";
    text += "  for (" + idx + " b = tid; b < n / " + kVectorWidthName +
            "; b += stride) {\n    const " + idx + " base = b * " + kVectorWidthName + ";\n";
    text += VectorLoads(lane, group_, width, "base", "    ");
    text += "#pragma unroll\n" + lane.text();
    text += VectorStores(lane, "base", "    ");
    return text + "  }\n";
  }

  const Program& program_;
  const FusionGroup& group_;
  const KernelSignature& signature_;
  const KernelDialect& dialect_;
  KernelSource& out_;
};

// Malformed input to the generator is an error naming what is wrong, never
// undefined behaviour in the renderer, which relies on these.
void CheckGroup(const Program& program,
                const FusionGroup& group,
                const KernelSignature& signature) {
  TORCH_CHECK(group.in_place.size() == group.outputs.size(),
              "lazyfuse: kernel codegen: a group without its in-place plan");
  TORCH_CHECK(signature.block_limit == 0 || signature.block_limit == 1 ||
                  (signature.block_limit >= 32 && signature.block_limit % 32 == 0),
              "lazyfuse: kernel codegen: a block limit of ",
              signature.block_limit,
              " threads is not a whole number of warps");
  for (size_t s : group.steps) {
    TORCH_CHECK(s < program.steps.size(), "lazyfuse: kernel codegen: a group names step ", s);
    for (const auto* buffers : {&program.steps[s].inputs, &program.steps[s].outputs}) {
      for (BufferId id : *buffers) {
        TORCH_CHECK(id >= 0 && static_cast<size_t>(id) < program.buffers.size(),
                    "lazyfuse: kernel codegen: step ",
                    s,
                    " names buffer %",
                    id);
        for (int64_t size : program.buffers[id].sizes) {
          TORCH_CHECK(size >= 0, "lazyfuse: kernel codegen: buffer %", id, " has a negative size");
        }
      }
    }
  }
  if (group.kind != GroupKind::kReduction) {
    return;
  }
  TORCH_CHECK(group.reduction && *group.reduction < program.steps.size(),
              "lazyfuse: kernel codegen: a reduction group without its reduction step");
  const Step& step = program.steps[*group.reduction];
  const auto rule = ReductionRuleFor(step, program);
  TORCH_CHECK(rule, "lazyfuse: kernel codegen cannot render ", step.qualified_op());
  const auto& input = program.buffers[step.inputs[0]].sizes;
  TORCH_CHECK(group.domain == input,
              "lazyfuse: kernel codegen: a ",
              step.qualified_op(),
              " group runs over ",
              c10::IntArrayRef(group.domain),
              ", not over its input's shape ",
              c10::IntArrayRef(input));
  for (int64_t d : rule->dims) {
    TORCH_CHECK(d >= 0 && d < static_cast<int64_t>(input.size()),
                "lazyfuse: kernel codegen: ",
                step.qualified_op(),
                " reduces dim ",
                d,
                " of a rank-",
                input.size(),
                " input");
  }
  const c10::IValue* correction = step.attr("has_correction");
  TORCH_CHECK(correction == nullptr || !correction->toBool() || step.inputs.size() > 1,
              "lazyfuse: kernel codegen: ",
              step.qualified_op(),
              " has a correction but no correction input");
  TORCH_CHECK(rule->kind != ReductionKind::kLayerNorm || step.outputs.size() == 3,
              "lazyfuse: kernel codegen: ",
              step.qualified_op(),
              " has ",
              step.outputs.size(),
              " outputs, not layer norm's 3");
}

}  // namespace

// Defined in reduction.cpp.
std::string ReductionKernelBody(const Program& program,
                                const FusionGroup& group,
                                const KernelSignature& signature,
                                const KernelDialect& dialect,
                                KernelSource& out,
                                const RowStrategy* prefer);

KernelSignature PredictedSignature(const Program& program,
                                   const FusionGroup& group,
                                   const std::vector<bool>& host_scalar_parameters) {
  KernelSignature signature;
  for (BufferId id : group.inputs) {
    InputBinding binding;
    const BufferInfo& info = program.buffers[id];
    binding.strides = ContiguousStrides(info.sizes);
    for (const auto& constant : program.constants) {
      if (constant.first == id && constant.second.dim() == 0) {
        binding.kind = InputBinding::Kind::kConstant;
        binding.literal = ConstantLiteral(constant.second);
        binding.strides.clear();
      }
    }
    for (size_t k = 0; k < program.parameters.size(); ++k) {
      if (program.parameters[k] == id && k < host_scalar_parameters.size() &&
          host_scalar_parameters[k]) {
        binding.kind = InputBinding::Kind::kHostScalar;
        binding.strides.clear();
      }
    }
    signature.inputs.push_back(std::move(binding));
  }
  return signature;
}

KernelSource GenerateKernel(const Program& program,
                            const FusionGroup& group,
                            const KernelSignature& signature,
                            const KernelDialect& dialect,
                            const RowStrategy* prefer,
                            bool simplify_indices) {
  TORCH_CHECK(LaunchesKernel(group.kind),
              "lazyfuse: a ",
              GroupKindName(group.kind),
              " group has no kernel");
  TORCH_CHECK(signature.inputs.size() == group.inputs.size(),
              "lazyfuse: kernel signature binds ",
              signature.inputs.size(),
              " inputs, the group has ",
              group.inputs.size());
  CheckGroup(program, group, signature);
  KernelSource out;
  out.name = KernelName(program, group);
  for (size_t s : group.steps) {
    out.ops.push_back(program.steps[s].qualified_op());
  }
  // Serial blocks index in 64 bits: under -fwrapv a 32-bit index may wrap
  // before it widens to an address, so loops would gather, not load.
  out.index64 = dialect.serial_blocks || NeedsIndex64(program, group, signature);
  out.simplified_indices = simplify_indices;
  const std::string body =
      group.kind == GroupKind::kPointwise
          ? PointwiseKernel(program, group, signature, dialect, out).Body()
          : ReductionKernelBody(program, group, signature, dialect, out, prefer);
  // Parameter types are recorded in order: the tensors', then the workspace's.
  const std::string params = Parameters(program, group, signature, dialect, out.parameter_types);
  const std::string workspace = WorkspaceParameters(out, dialect);
  out.source = std::string("// lazyfuse ") + dialect.name + " kernel: ";
  for (size_t i = 0; i < out.ops.size(); ++i) {
    out.source += (i ? ", " : "") + out.ops[i];
  }
  out.source += "\n" + std::string(dialect.prelude) + kVectorTypes + "\n" + dialect.kernel_prefix +
                "void " + out.name + "(" + params + workspace + ") {\n" + body + "}\n";
  return out;
}

}  // namespace lazyfuse
