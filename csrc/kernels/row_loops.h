#pragma once

// How a reduction kernel that does not split its rows loops over them: a
// block per row, a thread per row, or, when blocks are serial host threads
// (KernelDialect::serial_blocks, the CPU), adjacent whole rows per block,
// each row accumulated in vector lanes.

#include <functional>
#include <string>
#include <vector>

#include "kernels/dialect.h"
#include "kernels/writer.h"

namespace lazyfuse {

// Splits `domain`'s dims into the kept ones and the reduced `dims`.
void SplitDims(const std::vector<int64_t>& domain,
               const std::vector<int64_t>& dims,
               std::vector<int64_t>& kept,
               std::vector<int64_t>& reduced);

// What a block-per-row kernel's rows ask of its block.
struct RowBlockNeeds {
  int64_t rows = 0;
  int64_t cols = 0;
  int vector_width = 1;  // columns a load
  int most = 1024;       // the target's most threads a block
  // More than one block reduction a row (softmax, layer norm, var).
  bool reduces_often = false;
  // A thread that loads nothing may take part, holding its accumulators'
  // identities (not under one-pass statistics).
  bool idle_threads_merge = false;
};

// The threads of a block-per-row kernel: a power of two from 32 to `most`.
int RowBlockThreads(const RowBlockNeeds& needs);

// The length an array holding a row of `cols` elements of `element_bytes`
// is declared with: the next power of two, and at least 4 KiB, so rows of
// nearby lengths, and all short ones, render the same array and share a
// shape-generic kernel (array sizes stay constants in it). 0: rows longer
// than 32 KiB, which no row cache holds.
int64_t RowArrayLength(int64_t cols, int64_t element_bytes);

// Opens the loop over this block's (or thread's) rows, as `row`.
void OpenRows(KernelWriter& writer,
              const KernelDialect& dialect,
              const std::string& index_type,
              int64_t rows,
              bool per_block);

// A serial block's adjacent share of `rows` rows, [lf_first, lf_stop).
void DeclareBlockRows(KernelWriter& writer,
                      const KernelDialect& dialect,
                      const std::string& index_type,
                      int64_t rows);

// The index into `domain` of column `col` of the current row, whose kept
// dims are `row_dims`; `dims` are the reduced ones, of `reduced_shape`.
KernelIndex RowElementIndex(KernelWriter& writer,
                            const std::vector<int64_t>& domain,
                            const std::vector<int64_t>& dims,
                            const std::vector<int64_t>& reduced_shape,
                            const std::vector<std::string>& row_dims,
                            const std::string& col);

// The same where the reduced dims are the innermost: a row is contiguous.
KernelIndex InnerRowElementIndex(KernelWriter& writer,
                                 const std::vector<int64_t>& domain,
                                 int64_t cols,
                                 const std::string& col);

// Before a column loop accumulating `acc` with `combine` (lf_sum_op,
// lf_max_op, lf_min_op): a sum adds in lanes, in another order, as eager's
// vectorized sums do; a max or min keeps a NaN flag beside it, whose name
// is returned ("" for a sum, or no combine).
std::string OpenSerialLanes(KernelWriter& writer, const std::string& acc, const char* combine);
// In the loop: folds `x` into `acc` (lanes from OpenSerialLanes).
void AccumulateInLanes(KernelWriter& writer,
                       const std::string& lanes,
                       const std::string& acc,
                       const char* combine,
                       const std::string& x);
// Whether a serial block keeps a softmax row's exponentials for its element
// loop, in `lf_e` (declared here, on the stack): one exp per element, not two.
bool KeepRowExps(KernelWriter& writer,
                 const KernelDialect& dialect,
                 const std::string& acc_type,
                 int64_t cols);

// After the loop: a NaN seen in any lane is the result; a zero result is
// the row's first zero, as eager's loop keeps it (lanes lost the order of a
// tie of +0 and -0). `open` opens a loop over the row and gives its element,
// `close` closes it.
void CloseSerialLanes(KernelWriter& writer,
                      const std::string& lanes,
                      const std::string& acc,
                      const std::string& acc_type,
                      const std::function<std::string()>& open,
                      const std::function<void()>& close);

}  // namespace lazyfuse
