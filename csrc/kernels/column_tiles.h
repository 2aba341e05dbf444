#pragma once

// Reductions over outer dims on serial blocks (the CPU): a bias gradient's
// column sums. Where the domain's innermost dim is kept, a reduction's rows
// are adjacent in memory and each row's columns are far apart, so a loop
// over one row's columns gathers: those sums ran at 4-5 GB/s. Instead, a
// tile of adjacent rows accumulates together, the loop over columns outside
// and the loop over the tile's rows inside, where loads are contiguous and
// vectorize. Each row still takes its columns in order, as eager's outer
// reductions do; a sum adds a chunk of columns at a time into its total, so
// its rounding grows with the chunk, not with the column count.

#include <cstdint>
#include <string>
#include <vector>

#include "fusion/rules.h"
#include "kernels/dialect.h"
#include "kernels/writer.h"

namespace lazyfuse {

// Whether a reduction of `kind` over `dims` of `domain`, its rows not split
// into chunks, renders as column tiles.
bool RendersColumnTiles(const KernelDialect& dialect,
                        const std::vector<int64_t>& domain,
                        const std::vector<int64_t>& dims,
                        ReductionKind kind,
                        bool split);

class ColumnTiles {
 public:
  ColumnTiles(KernelWriter& writer,
              const KernelDialect& dialect,
              std::string index_type,
              std::vector<int64_t> kept_shape,
              std::vector<int64_t> reduced_shape);

  // Work items for the launch's grid: a block takes at least a cache line's
  // worth of rows, as blocks with fewer read every column's line again.
  int64_t work_items() const;
  // Opens the loop over this block's rows, a tile at a time (in place of
  // row_loops.h's OpenRows).
  void OpenTiles();
  // The kept dims of the current row, inside the loops over a tile's rows.
  std::vector<std::string> RowDims() const;
  // Declares the tile's accumulators `acc`, each `init`, and opens the loop
  // over the columns and, inside it, over the tile's rows, defining `row`
  // and column `c`. Returns the accumulator the element updates. With
  // `chunked`, columns go a chunk at a time into a partial, added to `acc`.
  std::string OpenColumns(const std::string& type,
                          const std::string& acc,
                          const std::string& init,
                          bool chunked);
  // Closes what OpenColumns opened; returns the tile row's accumulator.
  std::string CloseColumns();
  // Opens the loop over the tile's rows that writes their results, defining
  // `row`; the kernel closes it, then the tile loop.
  void OpenResults();

 private:
  void OpenTileRows(bool vectorize);

  KernelWriter& w_;
  const KernelDialect& dialect_;
  std::string idx_;
  std::vector<int64_t> kept_shape_;
  std::vector<int64_t> reduced_shape_;
  int64_t rows_;
  int64_t cols_;
  std::string acc_;
  std::string partial_;                 // "" when columns are not chunked
  std::vector<std::string> tile_dims_;  // the kept dims of the tile's first row
};

}  // namespace lazyfuse
