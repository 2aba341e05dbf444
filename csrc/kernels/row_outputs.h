#pragma once

// A reduction kernel's outputs: those of reductions that write their input's
// shape (softmax, log_softmax, layer norm), rendered at any index from the
// row's statistics (the element loop stores them, and epilogue views read
// them at other indices); which outputs are a row's; and their stores.

#include <functional>
#include <string>

#include "fusion/rules.h"
#include "kernels/writer.h"

namespace lazyfuse {

// `expr` rounded to `dtype`, in a new register named from `prefix`.
std::string Rounded(KernelWriter& writer,
                    at::ScalarType dtype,
                    const std::string& expr,
                    const char* prefix = "v");

// The reduction's input at an index, as the reduction kernel reads it (from
// its row cache when it holds that element).
using RowInput = std::function<std::string(KernelIndex)>;

// exp(x - top) at an index where the kernel keeps it, else "".
using RowExp = std::function<std::string(const KernelIndex&)>;

// exp(x - top) / total, or for log_softmax x - top - log(total).
void BindSoftmaxOutput(KernelWriter& writer,
                       const Step& step,
                       bool log,
                       const std::string& top,
                       const std::string& total,
                       RowInput input,
                       RowExp kept = nullptr);

// (x - mean) * rstd, times the weight and plus the bias when given; `acc` is
// the accumulator's C type.
void BindLayerNormOutput(KernelWriter& writer,
                         const Step& step,
                         const ReductionRule& rule,
                         const std::string& acc,
                         const std::string& mean,
                         const std::string& rstd,
                         RowInput input);

// Whether output `id` of a reduction group (its reduction at step
// `reduction_step`) is one value per row, not per element: the reduction's
// own result or layer norm's mean and rstd, and the epilogue after them.
bool IsRowLevelOutput(const Program& program,
                      const FusionGroup& group,
                      size_t reduction_step,
                      ReductionKind kind,
                      BufferId id);

// Stores the group's per-row (`row_level`) or per-element outputs at
// `index`. Every output of a batch is computed before the first is stored,
// so any output an input reaches may take its memory.
void StoreGroupOutputs(KernelWriter& writer,
                       const FusionGroup& group,
                       size_t reduction_step,
                       ReductionKind kind,
                       const KernelIndex& index,
                       bool row_level);

// Stores the current row's results (the reduction's own output, or layer
// norm's mean and rstd, and their epilogue) at index `row`, where
// `writes` holds ("": everywhere).
void StoreRowResults(KernelWriter& writer,
                     const FusionGroup& group,
                     size_t reduction_step,
                     ReductionKind kind,
                     const std::string& writes);

}  // namespace lazyfuse
