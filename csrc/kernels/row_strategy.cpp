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
// A row cache longer than the row serves it as well, but a block's shared
// memory bounds the blocks an SM runs: taken up to this many times the
// row's own bucket.
constexpr int64_t kMostRowArrayFactor = 4;

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

int64_t PreferredRowArray(const RowStrategy* prefer, int64_t natural) {
  if (natural > 0 && Preferring(prefer) && prefer->block && prefer->row_array >= natural &&
      prefer->row_array <= natural * kMostRowArrayFactor) {
    return prefer->row_array;
  }
  return natural;
}

int RowBlockThreads(const RowStrategy* prefer, const RowBlockNeeds& needs) {
  const int64_t vectors = needs.cols / needs.vector_width;
  const int natural = RowBlockThreads(needs);
  // Under one-pass statistics every thread must load at least one vector: an
  // idle thread's identity does not merge there (online softmax's max of
  // -inf). Elsewhere it does, as in rows shorter than a block; a GPU's
  // 1024-thread limit gives long rows templates of more threads than a
  // shorter row has vectors (the loss's mean of a Transformer at length 8).
  if (Preferring(prefer) && prefer->block && prefer->threads >= 32 &&
      prefer->threads <= needs.most && (needs.idle_threads_merge || prefer->threads <= vectors) &&
      prefer->threads * kMostThreadsFactor >= natural &&
      natural * kMostThreadsFactor >= prefer->threads) {
    return prefer->threads;
  }
  return natural;
}

}  // namespace lazyfuse
