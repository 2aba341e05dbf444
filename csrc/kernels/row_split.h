#pragma once

// Splitting a reduction's rows into chunks, so few long rows still fill a
// GPU (x.sum() is one row; a bias gradient is few long columns). Each block
// (block-per-row kernels) or thread (thread-per-row kernels) reduces one
// chunk of a row and publishes its partial with a counted atomic; whoever
// completes a row combines the partials in chunk order, so results do not
// depend on scheduling, and writes the row's results. One launch: the
// workspace (partials and per-row counters) comes with it.

#include <functional>
#include <string>

#include "kernels/dialect.h"
#include "kernels/signature.h"
#include "kernels/writer.h"

namespace lazyfuse {

class RowSplit {
 public:
  using Update = std::function<std::string(const std::string&, const std::string&)>;

  // `per_block`: a block reduces a chunk (else a thread does). `acc` is the
  // accumulator's C type. Rows are split only when `combinable` (the row's
  // result is one accumulator) and there are few of them.
  RowSplit(KernelWriter& writer,
           const KernelDialect& dialect,
           std::string index_type,
           std::string acc,
           int64_t rows,
           int64_t cols,
           bool per_block,
           bool combinable,
           int block_threads);

  bool active() const {
    return chunks_ > 1;
  }
  // Opens the loop over (row, chunk) items, defining `row`, `lf_begin` and
  // `lf_end`, and records the launch and workspace in `out`.
  void OpenLoop(KernelSource& out);
  // The loop over the current chunk's columns, as `c`.
  std::string ColumnLoop() const;
  // After the chunk's accumulation into `acc` (block-reduced already when
  // per block): publishes it, and opens `if (lf_last)`, where `acc` holds
  // the whole row's combined result.
  void Combine(const std::string& acc,
               const std::string& init,
               const Update& update,
               const char* combine);
  // Closes `if (lf_last)`; the caller closes the item loop.
  void CloseRow();

 private:
  std::string PartialIndex(const std::string& chunk) const;

  KernelWriter& w_;
  const KernelDialect& dialect_;
  std::string idx_;
  std::string acc_;
  int64_t rows_;
  int64_t cols_;
  bool per_block_;
  int block_threads_;  // per block: the launch's, written into the loops
  int64_t chunks_ = 1;
  int64_t chunk_cols_ = 0;
};

}  // namespace lazyfuse
