#include "kernels/row_split.h"

#include <algorithm>

#include "kernels/strategy_constants.h"

namespace lazyfuse {
namespace {

// Splitting aims at this many blocks: at least 2 per SM on GPUs of up to 512
// SMs. A block's chunk is never shorter than kMinBlockChunk columns, a
// thread's never shorter than kMinThreadChunk.
constexpr int64_t kTargetBlocks = 1024;
// Two launches read the row twice (no row cache) and launch twice, so they
// aim lower: 2 blocks per SM on GPUs of up to 256 SMs. Where every thread of
// a row merges all its chunks' partials, chunks are fewer, so merging costs
// less than reading the chunk.
constexpr int64_t kTwoLaunchTargetBlocks = 512;
constexpr int64_t kMostThreadChunksMerged = 64;
constexpr int64_t kMinBlockChunk = 2048;
constexpr int64_t kMinThreadChunk = 32;
constexpr int kThreadBlockSize = 128;
// Serial blocks (the CPU): enough items for 64 cores, of at least 16K columns.
constexpr int64_t kSerialTargetItems = 64;
constexpr int64_t kMinSerialChunk = 16384;

}  // namespace

RowSplit::RowSplit(KernelWriter& writer,
                   const KernelDialect& dialect,
                   std::string index_type,
                   std::string acc,
                   int64_t rows,
                   int64_t cols,
                   bool per_block,
                   Splitting how,
                   int block_threads)
    : w_(writer),
      dialect_(dialect),
      idx_(std::move(index_type)),
      acc_(std::move(acc)),
      rows_(rows),
      cols_(cols),
      per_block_(per_block),
      how_(how),
      block_threads_(block_threads) {
  if (how_ != Splitting::kNever && rows_ > 0 && dialect_.serial_blocks) {
    // A chunk per core and some to balance, each long enough to pay for its
    // partial.
    const int64_t wanted = (kSerialTargetItems + rows_ - 1) / rows_;
    chunks_ = std::max<int64_t>(1, std::min(wanted, cols_ / kMinSerialChunk));
  } else if (how_ != Splitting::kNever && rows_ > 0) {
    // Per thread, the target is as many threads as that many blocks hold.
    const int64_t blocks = how_ == Splitting::kOneLaunch ? kTargetBlocks : kTwoLaunchTargetBlocks;
    const int64_t target = per_block_ ? blocks : blocks * kThreadBlockSize;
    const int64_t wanted = (target + rows_ - 1) / rows_;
    int64_t most = cols_ / (per_block_ ? kMinBlockChunk : kMinThreadChunk);
    if (!per_block_ && how_ == Splitting::kTwoLaunches) {
      most = std::min(most, kMostThreadChunksMerged);
    }
    chunks_ = std::max<int64_t>(1, std::min(wanted, most));
  }
  chunk_cols_ = (cols_ + chunks_ - 1) / chunks_;
}

// A count that follows from the split (chunks, their length, items): written
// unsigned, and cast to the index type, so that a shape-generic template
// always takes it as a parameter (source_literals.h). It may stay put between
// two shapes and change at a third, where a constant would compile again.
std::string RowSplit::Count(int64_t value) const {
  return "(" + idx_ + ")" + std::to_string(value) + (idx_ == "int" ? "u" : "ull");
}

// Where a (row, chunk) partial lives: a block's chunks of one row are
// adjacent; per thread, the rows of one chunk are, as the threads are.
std::string RowSplit::PartialIndex(const std::string& chunk) const {
  return per_block_ ? "row * " + Count(chunks_) + " + " + chunk
                    : chunk + " * " + std::to_string(rows_) + " + row";
}

void RowSplit::OpenLoop(KernelSource& out, int stats) {
  const int64_t items = rows_ * chunks_;
  out.work_items = items;
  out.partial_bytes = acc_ == "double" ? 8 : 4;
  if (how_ != Splitting::kOneLaunch) {
    out.partials = items * stats;
    out.launches = 2;
  } else {
    out.partials = items;
    out.counters = rows_;
  }
  std::string chunk;
  if (per_block_) {
    out.block_size = block_threads_;
    w_.Line(StrategyConstant(kBlockThreadsName, block_threads_));
    w_.Line("__shared__ " + acc_ + " lf_smem[32];");
    if (how_ == Splitting::kOneLaunch) {
      w_.Line("__shared__ bool lf_last;");
    }
    w_.Open("for (" + idx_ + " lf_item = " + dialect_.block_index + "; lf_item < " + Count(items) +
            "; lf_item += " + dialect_.grid_size + ")");
    w_.Line("const " + idx_ + " row = lf_item / " + Count(chunks_) + ";");
    w_.DeclareIndexRange("row", rows_);
    chunk = "lf_item % " + Count(chunks_);
  } else {
    out.block_size = kThreadBlockSize;
    w_.Open("for (" + idx_ + " lf_item = (" + idx_ + ")" + dialect_.block_index + " * " +
            dialect_.block_size + " + " + dialect_.thread_index + "; lf_item < " + Count(items) +
            "; lf_item += (" + idx_ + ")" + dialect_.grid_size + " * " + dialect_.block_size + ")");
    w_.Line("const " + idx_ + " row = lf_item % " + std::to_string(rows_) + ";");
    w_.DeclareIndexRange("row", rows_);
    chunk = "lf_item / " + std::to_string(rows_);
  }
  const std::string size = Count(chunk_cols_);
  if (two_launches()) {
    w_.Line("const " + idx_ + " lf_chunk = " + chunk + ";");
    chunk = "lf_chunk";
  }
  w_.Line("const " + idx_ + " lf_begin = (" + chunk + ") * " + size + ";");
  w_.Line("const " + idx_ + " lf_end = lf_begin + " + size + " < " + std::to_string(cols_) +
          " ? lf_begin + " + size + " : " + std::to_string(cols_) + ";");
}

std::string RowSplit::ColumnLoop() const {
  if (!per_block_) {
    return "for (" + idx_ + " c = lf_begin; c < lf_end; ++c)";
  }
  return "LF_UNROLL for (" + idx_ + " c = lf_begin + " + dialect_.thread_index +
         "; c < lf_end; c += " + kBlockThreadsName + ")";
}

void RowSplit::Combine(const std::string& acc,
                       const std::string& init,
                       const Update& update,
                       const char* combine) {
  const std::string last = std::to_string(chunks_ - 1) + "u";
  const std::string partial = "lf_ld_published(lf_partials, " + PartialIndex("k") + ")";
  if (!per_block_) {
    w_.Line("const bool lf_last = lf_publish(lf_partials, lf_item, " + acc +
            ", lf_counters + row) == " + last + ";");
    w_.Open("if (lf_last)");
    w_.Line(acc + " = " + init + ";");
    w_.Open("for (" + idx_ + " k = 0; k < " + Count(chunks_) + "; ++k)");
    w_.Line(acc + " = " + update(acc, partial) + ";");
    w_.Close();
    return;
  }
  w_.Open(std::string("if (") + dialect_.thread_index + " == 0)");
  w_.Line("lf_last = lf_publish(lf_partials, lf_item, " + acc + ", lf_counters + row) == " + last +
          ";");
  w_.Close();
  w_.Line(std::string(dialect_.barrier) + ";");
  w_.Open("if (lf_last)");
  w_.Line(acc + " = " + init + ";");
  w_.Open("for (" + idx_ + " k = " + dialect_.thread_index + "; k < " + Count(chunks_) +
          "; k += " + kBlockThreadsName + ")");
  w_.Line(acc + " = " + update(acc, partial) + ";");
  w_.Close();
  w_.Line(acc + " = lf_block_reduce(" + acc + ", " + combine + "(), lf_smem);");
}

void RowSplit::CloseRow() {
  if (two_launches()) {
    return;
  }
  w_.Close();  // if (lf_last)
  if (per_block_) {
    w_.Line(std::string(dialect_.barrier) + ";");  // lf_last is rewritten next chunk
  }
}

void RowSplit::OpenFirstLaunch() {
  if (two_launches()) {
    w_.Open("if (lf_phase == 0)");
  }
}

// Partial j of chunk `chunk`: each statistic's partials are contiguous.
std::string RowSplit::StatPartial(size_t j, const std::string& chunk) const {
  const std::string base = j == 0 ? "" : Count(j * rows_ * chunks_) + " + ";
  return "lf_partials[" + base + chunk + "]";
}

void RowSplit::CloseFirstLaunch(const std::vector<std::string>& stats) {
  if (!two_launches()) {
    return;
  }
  w_.Open(per_block_ ? std::string("if (") + dialect_.thread_index + " == 0)" : "if (true)");
  for (size_t j = 0; j < stats.size(); ++j) {
    w_.Line(StatPartial(j, PartialIndex("lf_chunk")) + " = " + stats[j] + ";");
  }
  w_.Close();
  w_.Line("continue;");
  w_.Close();
  if (how_ == Splitting::kTwoLaunchesRow) {
    w_.Open("if (lf_chunk != 0)");
    w_.Line("continue;");
    w_.Close();
  }
}

void RowSplit::MergePartials(const std::vector<std::string>& stats, const std::string& merge) {
  if (!two_launches()) {
    return;
  }
  if (per_block_) {
    w_.Open("for (" + idx_ + " k = " + dialect_.thread_index + "; k < " + Count(chunks_) +
            "; k += " + kBlockThreadsName + ")");
  } else {
    w_.Open("for (" + idx_ + " k = 0; k < " + Count(chunks_) + "; ++k)");
  }
  std::string call = merge + "(";
  for (const std::string& stat : stats) {
    call += stat + ", ";
  }
  for (size_t j = 0; j < stats.size(); ++j) {
    call += (j ? ", " : "") + StatPartial(j, PartialIndex("k"));
  }
  w_.Line(call + ");");
  w_.Close();
}

}  // namespace lazyfuse
