#include "kernels/row_loops.h"

namespace lazyfuse {

void SplitDims(const std::vector<int64_t>& domain,
               const std::vector<int64_t>& dims,
               std::vector<int64_t>& kept,
               std::vector<int64_t>& reduced) {
  std::vector<bool> is_reduced(domain.size(), false);
  for (int64_t d : dims) {
    is_reduced[d] = true;
  }
  for (size_t d = 0; d < domain.size(); ++d) {
    (is_reduced[d] ? reduced : kept).push_back(domain[d]);
  }
}

namespace {
// A thread's share of a row under which the row's block reductions (shuffles
// and barriers) cost more than its loads: on an H100, softmax over rows of
// 1024 with one 16-byte load a thread kept the SMs 75% busy and DRAM 56%;
// with four loads a thread (64 threads), 48% and 72%, in 25% less time.
constexpr int64_t kMinElementsPerThread = 16;
// About as many threads as a GPU holds (an H100: 132 x 2048). Fewer threads
// per row pay only while the rows alone keep it full.
constexpr int64_t kThreadsThatFillAGpu = int64_t{1} << 18;
// An SM holds at most 32 blocks (sm_80, sm_90): smaller ones leave it part empty.
constexpr int kFewestThreadsThatFillAnSm = 64;
// A block of one warp reduces by shuffles alone, with no barrier. Rows that
// reduce more than once pay for the emptier SMs: on an H200 at 2^24 floats,
// softmax and layer norm over rows of 64 and 96 ran 14-35% faster in 32
// threads than in 64; a sum, one reduction a row, ran 28% slower at 64.
constexpr int kFewestThreadsReducingOften = 32;
// A block-per-row kernel runs at most 32 blocks an SM, and an A100's SM
// holds 164 KiB of shared memory: 4 KiB a block never limits occupancy.
constexpr int64_t kFewestRowArrayBytes = 4096;
// Static shared memory is at most 48 KiB a block; the row cache takes 32.
constexpr int64_t kRowCacheBytes = 32 * 1024;
}  // namespace

int RowBlockThreads(const RowBlockNeeds& needs) {
  const int64_t vectors = needs.cols / needs.vector_width;
  const int fewest = needs.reduces_often ? kFewestThreadsReducingOften : kFewestThreadsThatFillAnSm;
  int threads = 32;
  while (threads < 512 && threads * 2 <= vectors && threads * 2 <= needs.most) {
    threads *= 2;
  }
  while (threads > fewest && (vectors / threads) * needs.vector_width < kMinElementsPerThread &&
         needs.rows * (threads / 2) >= kThreadsThatFillAGpu) {
    threads /= 2;
  }
  return threads;
}

void OpenRows(KernelWriter& writer,
              const KernelDialect& dialect,
              const std::string& index_type,
              int64_t rows,
              bool per_block) {
  const std::string& idx = index_type;
  const std::string count = std::to_string(rows);
  if (per_block) {
    writer.Open("for (" + idx + " row = " + dialect.block_index + "; row < " + count +
                "; row += " + dialect.grid_size + ")");
    writer.DeclareIndexRange("row", rows);
    return;
  }
  if (!dialect.serial_blocks) {
    writer.Open("for (" + idx + " row = (" + idx + ")" + dialect.block_index + " * " +
                dialect.block_size + " + " + dialect.thread_index + "; row < " + count +
                "; row += (" + idx + ")" + dialect.grid_size + " * " + dialect.block_size + ")");
    writer.DeclareIndexRange("row", rows);
    return;
  }
  // Adjacent rows share cache lines when the reduced dims are not innermost.
  DeclareBlockRows(writer, dialect, idx, rows);
  writer.Open("for (" + idx + " row = lf_first; row < lf_stop; ++row)");
  writer.DeclareIndexRange("row", rows);
}

void DeclareBlockRows(KernelWriter& writer,
                      const KernelDialect& dialect,
                      const std::string& index_type,
                      int64_t rows) {
  const std::string& idx = index_type;
  const std::string count = std::to_string(rows);
  const std::string grid = "(" + idx + ")" + dialect.grid_size;
  writer.Line("const " + idx + " lf_rows = (" + count + " + " + grid + " - 1) / " + grid + ";");
  writer.Line("const " + idx + " lf_first = (" + idx + ")" + dialect.block_index + " * lf_rows;");
  writer.Line("const " + idx + " lf_stop = lf_first + lf_rows < " + count +
              " ? lf_first + lf_rows : " + count + ";");
}

KernelIndex RowElementIndex(KernelWriter& writer,
                            const std::vector<int64_t>& domain,
                            const std::vector<int64_t>& dims,
                            const std::vector<int64_t>& reduced_shape,
                            const std::vector<std::string>& row_dims,
                            const std::string& col) {
  // A column of the row, whichever loop or lane names it.
  if (!writer.AffineOf(col)) {
    int64_t cols = 1;
    for (int64_t size : reduced_shape) {
      cols *= size;
    }
    writer.DeclareIndexRange(col, cols);
  }
  KernelIndex within{reduced_shape, col, {}};
  const auto col_dims = writer.Dims(within);
  KernelIndex index{domain, "", {}};
  size_t next_kept = 0;
  size_t next_reduced = 0;
  std::vector<bool> reduced(domain.size(), false);
  for (int64_t d : dims) {
    reduced[d] = true;
  }
  for (size_t d = 0; d < domain.size(); ++d) {
    index.dims.push_back(reduced[d] ? col_dims[next_reduced++] : row_dims[next_kept++]);
  }
  return index;
}

KernelIndex InnerRowElementIndex(KernelWriter& writer,
                                 const std::vector<int64_t>& domain,
                                 int64_t cols,
                                 const std::string& col) {
  const std::string linear = writer.NewVar("p");
  writer.Line("const " + writer.index_type() + " " + linear + " = row * " + std::to_string(cols) +
              " + " + col + ";");
  if (!writer.AffineOf(col)) {
    writer.DeclareIndexRange(col, cols);
  }
  const auto row = writer.AffineOf("row");
  const auto column = writer.AffineOf(col);
  if (row && column) {
    writer.DefineIndex(linear, row->Scaled(cols).Plus(*column));
  }
  return KernelIndex{domain, linear, {}};
}

std::string OpenSerialLanes(KernelWriter& writer, const std::string& acc, const char* combine) {
  if (combine == nullptr) {
    return "";
  }
  const std::string op = combine;
  if (op == "lf_sum_op") {
    writer.Line("#pragma omp simd reduction(+:" + acc + ")");
    return "";
  }
  const std::string nan = writer.NewVar("nan");
  writer.Line("int " + nan + " = 0;");
  writer.Line("#pragma omp simd reduction(" + std::string(op == "lf_max_op" ? "max" : "min") + ":" +
              acc + ") reduction(|:" + nan + ")");
  return nan;
}

void AccumulateInLanes(KernelWriter& writer,
                       const std::string& lanes,
                       const std::string& acc,
                       const char* combine,
                       const std::string& x) {
  writer.Line(lanes + " |= " + x + " != " + x + ";");
  writer.Line(acc + " = " + x + (std::string(combine) == "lf_max_op" ? " > " : " < ") + acc +
              " ? " + x + " : " + acc + ";");
}

int64_t RowArrayLength(int64_t cols, int64_t element_bytes) {
  if (cols * element_bytes > kRowCacheBytes) {
    return 0;
  }
  int64_t length = kFewestRowArrayBytes / element_bytes;
  while (length < cols) {
    length *= 2;
  }
  return length;
}

bool KeepRowExps(KernelWriter& writer,
                 const KernelDialect& dialect,
                 const std::string& acc_type,
                 int64_t cols) {
  constexpr int64_t kMostColumns = 8192;
  if (!dialect.serial_blocks || cols > kMostColumns) {
    return false;
  }
  // Declared at its most, not at the row's length: rows of every length
  // then render one skeleton (a shape-generic kernel serves them all).
  writer.Line(acc_type + " lf_e[" + std::to_string(kMostColumns) + "];");
  return true;
}

void CloseSerialLanes(KernelWriter& writer,
                      const std::string& lanes,
                      const std::string& acc,
                      const std::string& acc_type,
                      const std::function<std::string()>& open,
                      const std::function<void()>& close) {
  if (lanes.empty()) {
    return;
  }
  writer.Line("if (" + lanes + ") " + acc + " = (" + acc_type + ")(LF_DINF - LF_DINF);");
  writer.Open("if (" + acc + " == 0)");
  const std::string x = open();
  writer.Line("if (" + x + " == 0) { " + acc + " = " + x + "; break; }");
  close();
  writer.Close();
}

}  // namespace lazyfuse
