#include "kernels/row_statistics.h"

namespace lazyfuse {

void DeclareRowStatistics(KernelWriter& writer, const std::string& acc, RowStatistics kind) {
  writer.Line("__shared__ " + acc + " lf_smem2[32];");
  if (kind == RowStatistics::kWelford) {
    writer.Line("__shared__ " + acc + " lf_smem3[32];");
  }
}

void MergeRowStatistics(KernelWriter& writer,
                        RowSplit& split,
                        bool per_block,
                        RowStatistics kind,
                        const std::vector<std::string>& stats) {
  const bool welford = kind == RowStatistics::kWelford;
  std::string block_merge = welford ? "lf_block_welford(" : "lf_block_softmax_stats(";
  for (const std::string& stat : stats) {
    block_merge += stat + ", ";
  }
  block_merge += welford ? "lf_smem, lf_smem2, lf_smem3);" : "lf_smem, lf_smem2);";
  if (per_block) {
    writer.Line(block_merge);
  }
  if (split.two_launches()) {
    split.CloseFirstLaunch(stats);
    split.MergePartials(stats, welford ? "lf_welford_merge" : "lf_softmax_merge");
    if (per_block) {
      writer.Line(block_merge);
    }
  }
}

}  // namespace lazyfuse
