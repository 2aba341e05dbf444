#include "kernels/row_strategy.h"

#include "kernels/row_loops.h"

namespace lazyfuse {
namespace {

// A thread reads its row serially, so a thread per row is slower where rows
// are long: taken for rows of up to this many columns.
constexpr int64_t kMostColumnsPerThread = 64;
// Rows this long call for a block each (reduction.cpp).
constexpr int64_t kFewestColumnsPerBlock = 32;
// A few long rows kept whole run on fewer blocks: taken where splitting
// would have made at most this many chunks.
constexpr int64_t kMostChunksKeptWhole = 4;
// Fewer threads per block run more loop iterations each: taken down to a
// quarter of the natural count.
constexpr int kMostThreadsFactor = 4;

bool Preferring(const RowStrategy* prefer) {
  return prefer != nullptr && prefer->known;
}

}  // namespace

bool BlockPerRow(const RowStrategy* prefer, int64_t cols) {
  if (cols >= kFewestColumnsPerBlock) {
    return !(Preferring(prefer) && !prefer->block && cols <= kMostColumnsPerThread);
  }
  // A block is valid at any length: its threads past the row's end hold
  // their accumulators' identities, and rows this short take the paths that
  // merge them (no one-pass statistics, no split).
  return Preferring(prefer) && prefer->block;
}

bool PrefersWholeRows(const RowStrategy* prefer, int64_t chunks) {
  return Preferring(prefer) && !prefer->split && chunks <= kMostChunksKeptWhole;
}

int PreferredVectorWidth(const RowStrategy* prefer, int widest) {
  // Widths are powers of two, so a narrower one divides the row as well.
  if (Preferring(prefer) && prefer->block && prefer->vector_width >= 1 &&
      prefer->vector_width < widest && widest % prefer->vector_width == 0) {
    return prefer->vector_width;
  }
  return widest;
}

int RowBlockThreads(
    const RowStrategy* prefer, int64_t rows, int64_t vectors, int vector_width, int most) {
  const int natural = RowBlockThreads(rows, vectors, vector_width, most);
  // Every thread must load at least one vector: an idle thread's identity
  // does not merge into every statistic (online softmax's max of -inf).
  if (Preferring(prefer) && prefer->block && prefer->threads >= 32 && prefer->threads <= most &&
      prefer->threads <= vectors && prefer->threads * kMostThreadsFactor >= natural &&
      natural * kMostThreadsFactor >= prefer->threads) {
    return prefer->threads;
  }
  return natural;
}

}  // namespace lazyfuse
