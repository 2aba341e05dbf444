#include "kernels/column_tiles.h"

#include <utility>

#include "kernels/row_loops.h"
#include "kernels/strategy_constants.h"

namespace lazyfuse {
namespace {
// Rows a tile: their accumulators (1 KiB of floats) stay in L1, and each
// column's loads are 16 cache lines in a row, which the prefetcher follows.
constexpr int kTileRows = 256;
// Columns a sum adds into a partial before its total: rounding grows with
// about the chunk plus the chunks, not with the columns (eager's cascade
// sum adds in chunks of 16, on more levels).
constexpr int kChunkColumns = 32;
// A 64-byte line of floats: the fewest rows a block takes.
constexpr int64_t kRowsPerBlock = 16;
constexpr const char* kTileRowsName = "lf_tile";
constexpr const char* kChunkColumnsName = "lf_chunk";
}  // namespace

bool RendersColumnTiles(const KernelDialect& dialect,
                        const std::vector<int64_t>& domain,
                        const std::vector<int64_t>& dims,
                        ReductionKind kind,
                        bool split) {
  const bool one_accumulator = kind == ReductionKind::kSum || kind == ReductionKind::kMean ||
                               kind == ReductionKind::kMax || kind == ReductionKind::kMin;
  const bool innermost_kept =
      !domain.empty() && (dims.empty() || dims.back() != static_cast<int64_t>(domain.size()) - 1);
  return dialect.serial_blocks && one_accumulator && !split && !dims.empty() && innermost_kept;
}

ColumnTiles::ColumnTiles(KernelWriter& writer,
                         const KernelDialect& dialect,
                         std::string index_type,
                         std::vector<int64_t> kept_shape,
                         std::vector<int64_t> reduced_shape)
    : w_(writer),
      dialect_(dialect),
      idx_(std::move(index_type)),
      kept_shape_(std::move(kept_shape)),
      reduced_shape_(std::move(reduced_shape)),
      rows_(ShapeNumel(kept_shape_)),
      cols_(ShapeNumel(reduced_shape_)) {}

int64_t ColumnTiles::work_items() const {
  return (rows_ + kRowsPerBlock - 1) / kRowsPerBlock;
}

void ColumnTiles::OpenTiles() {
  const std::string run = std::to_string(kept_shape_.back());
  w_.Line(StrategyConstant(kTileRowsName, kTileRows));
  DeclareBlockRows(w_, dialect_, idx_, rows_);
  // A tile stays within one run of the innermost kept dim, so its rows'
  // dims are the first row's, plus the row's place in the tile.
  w_.Open("for (" + idx_ + " lf_t0 = lf_first, lf_n = 0; lf_t0 < lf_stop; lf_t0 += lf_n)");
  w_.DeclareIndexRange("lf_t0", rows_);
  w_.Line("const " + idx_ + " lf_left = " + run + " - lf_t0 % " + run + ";");
  w_.Line("lf_n = lf_stop - lf_t0 < " + std::string(kTileRowsName) +
          " ? lf_stop - lf_t0 : " + kTileRowsName + ";");
  w_.Line("lf_n = lf_n < lf_left ? lf_n : lf_left;");
  KernelIndex first{kept_shape_, "lf_t0", {}};
  tile_dims_ = w_.Dims(first);
}

std::vector<std::string> ColumnTiles::RowDims() const {
  std::vector<std::string> dims = tile_dims_;
  dims.back() = "(" + dims.back() + " + lf_r)";
  return dims;
}

void ColumnTiles::OpenTileRows(bool vectorize) {
  if (vectorize) {
    w_.Line("#pragma omp simd");
  }
  w_.Open("for (" + idx_ + " lf_r = 0; lf_r < lf_n; ++lf_r)");
  w_.Line("const " + idx_ + " row = lf_t0 + lf_r;");
  w_.DeclareIndexRange("row", rows_);
}

std::string ColumnTiles::OpenColumns(const std::string& type,
                                     const std::string& acc,
                                     const std::string& init,
                                     bool chunked) {
  acc_ = acc;
  partial_ = chunked ? acc + "_part" : "";
  auto declare = [&](const std::string& name) {
    w_.Line(type + " " + name + "[" + kTileRowsName + "];");
    w_.Line("for (" + idx_ + " lf_r = 0; lf_r < lf_n; ++lf_r) " + name + "[lf_r] = " + init + ";");
  };
  declare(acc_);
  const std::string cols = std::to_string(cols_);
  if (chunked) {
    w_.Line(StrategyConstant(kChunkColumnsName, kChunkColumns));
    w_.Open("for (" + idx_ + " lf_c0 = 0; lf_c0 < " + cols + "; lf_c0 += " + kChunkColumnsName +
            ")");
    declare(partial_);
    w_.Line("const " + idx_ + " lf_c1 = lf_c0 + " + kChunkColumnsName + " < " + cols +
            " ? lf_c0 + " + kChunkColumnsName + " : " + cols + ";");
    w_.Open("for (" + idx_ + " c = lf_c0; c < lf_c1; ++c)");
  } else {
    w_.Open("for (" + idx_ + " c = 0; c < " + cols + "; ++c)");
  }
  w_.DeclareIndexRange("c", cols_);
  // The column's dims, once a column: the loop over the tile's rows finds them.
  KernelIndex column{reduced_shape_, "c", {}};
  w_.Dims(column);
  OpenTileRows(/*vectorize=*/true);
  return (chunked ? partial_ : acc_) + "[lf_r]";
}

std::string ColumnTiles::CloseColumns() {
  w_.Close();  // the tile's rows
  w_.Close();  // the columns
  if (!partial_.empty()) {
    w_.Line("#pragma omp simd");
    w_.Line("for (" + idx_ + " lf_r = 0; lf_r < lf_n; ++lf_r) " + acc_ + "[lf_r] = " + acc_ +
            "[lf_r] + " + partial_ + "[lf_r];");
    w_.Close();  // the chunks
  }
  return acc_ + "[lf_r]";
}

void ColumnTiles::OpenResults() {
  OpenTileRows(/*vectorize=*/false);
}

}  // namespace lazyfuse
