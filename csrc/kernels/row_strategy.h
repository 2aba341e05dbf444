#pragma once

// A reduction renders the strategy its sizes call for (a block or a thread
// per row, the block's threads, its vector width, split rows), and each
// other one is another skeleton: a shape-generic kernel serves only its own
// (runtime/generic_kernels.h). So a structure whose sizes move across a
// strategy's threshold would compile again. Instead, a render may be asked
// to prefer the strategy of a template its structure already has. Each
// choice is taken only where it is valid at these sizes and costs little
// against the render's own; otherwise the render keeps its own and compiles.

#include <cstdint>

#include "kernels/row_loops.h"
#include "kernels/signature.h"

namespace lazyfuse {

// Whether contiguous rows of `cols` take a block each (else a thread each):
// from 32 columns on, unless `prefer` says otherwise where it may.
bool BlockPerRow(const RowStrategy* prefer, int64_t cols);
// Whether rows that call for `chunks` chunks each stay whole.
bool PrefersWholeRows(const RowStrategy* prefer, int64_t chunks);
// The vector width of a block-per-row kernel that allows `widest`.
int PreferredVectorWidth(const RowStrategy* prefer, int widest);
// The elements of a row cache for rows that need `natural` (row_loops.h's
// RowArrayLength; 0: none).
int64_t PreferredRowArray(const RowStrategy* prefer, int64_t natural);
// The threads of a block-per-row kernel (row_loops.h's RowBlockThreads for
// the sizes' own).
int RowBlockThreads(const RowStrategy* prefer, const RowBlockNeeds& needs);

}  // namespace lazyfuse
