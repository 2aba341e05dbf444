#pragma once

// Block-per-row column loops that move 16 bytes per access: a thread takes
// `width` adjacent columns at a time, so every contiguous input read at the
// element's own index comes from one vector load, and every output stored
// there goes out in one vector store. Rows must start aligned (the column
// count a multiple of `width`, every tensor 16-byte aligned).

#include <string>

#include "kernels/dialect.h"
#include "kernels/writer.h"

namespace lazyfuse {

// Columns per vector for a group's rows of `cols` columns: 16 bytes of its
// widest buffer when every tensor input is aligned and rows start aligned,
// else 1 (scalar loops).
int RowVectorWidth(const Program& program,
                   const FusionGroup& group,
                   const KernelSignature& signature,
                   int64_t cols);

class RowVectorLoop {
 public:
  RowVectorLoop(KernelWriter& writer,
                const FusionGroup& group,
                const KernelDialect& dialect,
                std::string index_type,
                int64_t cols,
                int width);

  // Opens the loop over the current row's vectors, a block's threads
  // (kBlockThreadsName, declared by the kernel) apart, and the loop over lanes,
  // defining column `c`; the caller names the element's linear index
  // (KernelWriter::SetVectorLane(linear, lane())).
  void Open();
  // Stores the vector outputs and puts the vector loads before the lanes.
  void Close();
  static const char* lane() {
    return "j";
  }

 private:
  KernelWriter& w_;
  const FusionGroup& group_;
  const KernelDialect& dialect_;
  std::string idx_;
  int64_t cols_;
  int width_;
  size_t loads_at_ = 0;
};

}  // namespace lazyfuse
