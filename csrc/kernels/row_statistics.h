#pragma once

// One-pass statistics of a row read once for several results: online
// softmax's (max, sum of exponentials) and Welford's (count, shifted mean,
// sum of squared deviations). Each thread gathers its own; they are merged
// across the block, and across the row's chunks when it is split in two
// launches (row_split.h).

#include <string>
#include <vector>

#include "kernels/row_split.h"
#include "kernels/writer.h"

namespace lazyfuse {

enum class RowStatistics {
  kSoftmax,  // lf_softmax_merge, lf_block_softmax_stats
  kWelford,  // lf_welford_merge, lf_block_welford
};

// The shared memory a block merge needs beyond lf_smem.
void DeclareRowStatistics(KernelWriter& writer, const std::string& acc, RowStatistics kind);

// Merges `stats` across the block (when `per_block`); with two launches,
// the first publishes them and the second merges the row's partials, then
// merges across the block again.
void MergeRowStatistics(KernelWriter& writer,
                        RowSplit& split,
                        bool per_block,
                        RowStatistics kind,
                        const std::vector<std::string>& stats);

}  // namespace lazyfuse
