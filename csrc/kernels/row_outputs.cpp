#include "kernels/row_outputs.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <utility>

namespace lazyfuse {

std::string Rounded(KernelWriter& w,
                    at::ScalarType dtype,
                    const std::string& expr,
                    const char* prefix) {
  const std::string type = RegisterTypeName(dtype);
  const std::string var = w.NewVar(prefix);
  w.Line("const " + type + " " + var + " = " + RoundToDtype(dtype, "(" + type + ")(" + expr + ")") +
         ";");
  return var;
}

void BindSoftmaxOutput(KernelWriter& writer,
                       const Step& step,
                       bool log,
                       const std::string& top,
                       const std::string& total,
                       RowInput input,
                       RowExp kept) {
  const at::ScalarType dtype = writer.program().buffers[step.outputs[0]].dtype;
  writer.BindCustom(step.outputs[0], [=](KernelWriter& w, KernelIndex index) {
    const std::string exp = kept && !log ? kept(index) : std::string();
    if (!exp.empty()) {
      return Rounded(w, dtype, exp + " / " + total);
    }
    const std::string x = input(std::move(index));
    return Rounded(w,
                   dtype,
                   log ? x + " - " + top + " - lf_log(" + total + ")"
                       : "lf_exp(" + x + " - " + top + ") / " + total);
  });
}

void BindLayerNormOutput(KernelWriter& writer,
                         const Step& step,
                         const ReductionRule& rule,
                         const std::string& acc,
                         const std::string& mean,
                         const std::string& rstd,
                         RowInput input) {
  const Program& program = writer.program();
  const at::ScalarType dtype = program.buffers[step.outputs[0]].dtype;
  size_t next = 1;
  TORCH_CHECK(step.inputs.size() >= 1 + rule.has_weight + rule.has_bias,
              "lazyfuse: kernel codegen: ",
              step.qualified_op(),
              " lacks the weight or bias input its attributes name");
  const std::optional<BufferId> weight =
      rule.has_weight ? std::optional<BufferId>(step.inputs[next++]) : std::nullopt;
  const std::optional<BufferId> bias =
      rule.has_bias ? std::optional<BufferId>(step.inputs[next++]) : std::nullopt;
  writer.BindCustom(step.outputs[0], [=, &program](KernelWriter& w, KernelIndex index) {
    // The statistics may be wider (double); the outputs are computed in acc.
    std::string expr = "(" + input(index) + " - (" + acc + ")" + mean + ") * (" + acc + ")" + rstd;
    const auto& dims = w.Dims(index);
    // Weight and bias have the normalized (trailing) dims.
    auto affine = [&](BufferId id) {
      const auto& shape = program.buffers[id].sizes;
      TORCH_CHECK(shape.size() <= dims.size(),
                  "lazyfuse: kernel codegen: a layer norm weight of rank ",
                  shape.size(),
                  " for an input of rank ",
                  dims.size());
      KernelIndex at{shape, "", {}};
      at.dims.assign(dims.end() - static_cast<std::ptrdiff_t>(shape.size()), dims.end());
      return "(" + acc + ")" + w.Value(id, at);
    };
    if (weight) {
      expr = "(" + expr + ") * " + affine(*weight);
    }
    if (bias) {
      expr = "(" + expr + ") + " + affine(*bias);
    }
    return Rounded(w, dtype, expr);
  });
}

bool IsRowLevelOutput(const Program& program,
                      const FusionGroup& group,
                      size_t reduction_step,
                      ReductionKind kind,
                      BufferId id) {
  for (size_t s : group.steps) {
    const Step& step = program.steps[s];
    if (std::find(step.outputs.begin(), step.outputs.end(), id) == step.outputs.end()) {
      continue;
    }
    if (s < reduction_step) {
      return false;  // prologue
    }
    if (s == reduction_step) {
      return !(WritesFullShape(kind) && id == step.outputs[0]);
    }
    return !WritesFullShape(kind);
  }
  return false;
}

void StoreGroupOutputs(KernelWriter& writer,
                       const FusionGroup& group,
                       size_t reduction_step,
                       ReductionKind kind,
                       const KernelIndex& index,
                       bool row_level) {
  for (int store = 0; store < 2; ++store) {
    for (size_t k = 0; k < group.outputs.size(); ++k) {
      if (IsRowLevelOutput(writer.program(), group, reduction_step, kind, group.outputs[k]) ==
          row_level) {
        store ? writer.Store(k, index) : writer.ComputeOutput(k, index);
      }
    }
  }
}

void StoreRowResults(KernelWriter& writer,
                     const FusionGroup& group,
                     size_t reduction_step,
                     ReductionKind kind,
                     const std::string& writes) {
  const Program& program = writer.program();
  const bool any = std::any_of(group.outputs.begin(), group.outputs.end(), [&](BufferId id) {
    return IsRowLevelOutput(program, group, reduction_step, kind, id);
  });
  if (!any) {
    return;
  }
  const Step& step = program.steps[reduction_step];
  const size_t row_output = WritesFullShape(kind) ? 1 : 0;
  TORCH_CHECK(row_output < step.outputs.size(),
              "lazyfuse: ",
              step.qualified_op(),
              " has no per-row output");
  const std::vector<int64_t>& shape = program.buffers[step.outputs[row_output]].sizes;
  writer.Open("if (" + (writes.empty() ? std::string("true") : writes) + ")");
  StoreGroupOutputs(
      writer, group, reduction_step, kind, KernelIndex{shape, "row", {}}, /*row_level=*/true);
  writer.Close();
}

}  // namespace lazyfuse
