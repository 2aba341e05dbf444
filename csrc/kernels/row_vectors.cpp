#include "kernels/row_vectors.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <utility>

#include "kernels/strategy_constants.h"
#include "kernels/vector_registers.h"

namespace lazyfuse {

int RowVectorWidth(const Program& program,
                   const FusionGroup& group,
                   const KernelSignature& signature,
                   int64_t cols) {
  size_t widest = 1;
  for (size_t k = 0; k < group.inputs.size(); ++k) {
    if (signature.inputs[k].kind == InputBinding::Kind::kTensor) {
      if (!signature.inputs[k].aligned) {
        return 1;
      }
      widest = std::max(widest, c10::elementSize(program.buffers[group.inputs[k]].dtype));
    }
  }
  for (BufferId id : group.outputs) {
    widest = std::max(widest, c10::elementSize(program.buffers[id].dtype));
  }
  const int width = static_cast<int>(16 / widest);
  return width > 1 && cols % width == 0 && cols >= 32 * width ? width : 1;
}

RowVectorLoop::RowVectorLoop(KernelWriter& writer,
                             const FusionGroup& group,
                             const KernelDialect& dialect,
                             std::string index_type,
                             int64_t cols,
                             int width)
    : w_(writer),
      group_(group),
      dialect_(dialect),
      idx_(std::move(index_type)),
      cols_(cols),
      width_(width) {}

void RowVectorLoop::Open() {
  const std::string width = kVectorWidthName;
  w_.ClearVectorUse();
  w_.Open("LF_UNROLL for (" + idx_ + " lf_cv = " + dialect_.thread_index + "; lf_cv < " +
          std::to_string(cols_ / width_) + "; lf_cv += " + kBlockThreadsName + ")");
  w_.Line(StrategyConstant(kVectorWidthName, width_));
  w_.Line("const " + idx_ + " lf_vbase = row * " + std::to_string(cols_) + " + lf_cv * " + width +
          ";");
  loads_at_ = w_.Mark();
  w_.Line("#pragma unroll");
  w_.Open(std::string("for (int ") + lane() + " = 0; " + lane() + " < " + width + "; ++" + lane() +
          ")");
  w_.Line("const " + idx_ + " c = lf_cv * " + width + " + " + lane() + ";");
}

void RowVectorLoop::Close() {
  w_.Close();
  const std::string indent(static_cast<size_t>(w_.indent()) * 2, ' ');
  w_.InsertAt(w_.Mark(), VectorStores(w_, "lf_vbase", indent));
  w_.InsertAt(loads_at_, VectorLoads(w_, group_, width_, "lf_vbase", indent));
  w_.SetVectorLane("", "");
  w_.Close();
}

}  // namespace lazyfuse
