#pragma once

// Splitting a reduction's rows into chunks, so few long rows still fill a
// GPU (x.sum() is one row; a bias gradient is few long columns; softmax over
// a few rows of logits).
//
// A row whose result is one accumulator (sum, mean, amax, amin) takes one
// launch: each block (block-per-row kernels) or thread (thread-per-row
// kernels) reduces one chunk of a row and publishes its partial with a
// counted atomic; whoever completes a row combines the partials in chunk
// order, so results do not depend on scheduling, and writes the row's
// results. The workspace (partials and per-row counters) comes with it.
//
// A row whose elements all need its statistics (softmax, layer norm) takes
// two launches of one kernel: the first publishes each chunk's statistics,
// the second merges the row's partials in every block (or thread) of the
// row, in the same order, then writes that chunk's outputs. Blocks never
// wait for each other, which a GPU does not promise to allow. Var's row
// result is written by the row's first chunk alone, so only it merges.

#include <functional>
#include <string>
#include <vector>

#include "kernels/dialect.h"
#include "kernels/signature.h"
#include "kernels/writer.h"

namespace lazyfuse {

enum class Splitting {
  kNever,
  kOneLaunch,       // the row's result is one accumulator
  kTwoLaunches,     // every element's output needs the row's statistics
  kTwoLaunchesRow,  // only the row's results do (var): its first chunk merges
};

class RowSplit {
 public:
  using Update = std::function<std::string(const std::string&, const std::string&)>;

  // `per_block`: a block reduces a chunk (else a thread does). `acc` is the
  // accumulator's C type. Rows are split only when there are few of them.
  RowSplit(KernelWriter& writer,
           const KernelDialect& dialect,
           std::string index_type,
           std::string acc,
           int64_t rows,
           int64_t cols,
           bool per_block,
           Splitting how,
           int block_threads);

  int64_t chunks() const {
    return chunks_;
  }
  bool active() const {
    return chunks_ > 1;
  }
  bool two_launches() const {
    return active() && (how_ == Splitting::kTwoLaunches || how_ == Splitting::kTwoLaunchesRow);
  }
  // Opens the loop over (row, chunk) items, defining `row`, `lf_chunk`,
  // `lf_begin` and `lf_end`, and records the launch and workspace in `out`:
  // `stats` partials per item for two launches.
  void OpenLoop(KernelSource& out, int stats = 1);
  // The loop over the current chunk's columns, as `c`.
  std::string ColumnLoop() const;
  // After the chunk's accumulation into `acc` (block-reduced already when
  // per block): publishes it, and opens `if (lf_last)`, where `acc` holds
  // the whole row's combined result.
  void Combine(const std::string& acc,
               const std::string& init,
               const Update& update,
               const char* combine);
  // Closes `if (lf_last)` (one launch); the caller closes the item loop.
  void CloseRow();

  // Two launches (else these do nothing). The chunk's statistics are
  // gathered inside Open/CloseFirstLaunch, which publishes `stats` and skips
  // to the next item. What follows runs in the second launch: MergePartials
  // merges the row's partials into `stats` with `merge(stats..., partials...)`.
  void OpenFirstLaunch();
  void CloseFirstLaunch(const std::vector<std::string>& stats);
  void MergePartials(const std::vector<std::string>& stats, const std::string& merge);

 private:
  std::string Count(int64_t value) const;
  std::string PartialIndex(const std::string& chunk) const;
  std::string StatPartial(size_t j, const std::string& chunk) const;

  KernelWriter& w_;
  const KernelDialect& dialect_;
  std::string idx_;
  std::string acc_;
  int64_t rows_;
  int64_t cols_;
  bool per_block_;
  Splitting how_;
  int block_threads_;  // per block: the launch's, written into the loops
  int64_t chunks_ = 1;
  int64_t chunk_cols_ = 0;
};

}  // namespace lazyfuse
