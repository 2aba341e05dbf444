#pragma once

// What a rendered kernel depends on beyond its group, and what rendering
// gives back: how each input is bound at launch (KernelSignature), and the
// source with its launch shape (KernelSource).

#include <cstdint>
#include <string>
#include <vector>

namespace lazyfuse {

struct InputBinding {
  enum class Kind {
    kTensor,      // a device pointer, read at `strides`
    kHostScalar,  // a 0-dim CPU value passed by value
    kConstant,    // a program constant, written into the source
  };
  Kind kind = Kind::kTensor;
  std::vector<int64_t> strides;  // kTensor
  std::string literal;           // kConstant
  bool aligned = true;           // kTensor: data pointer is 16-byte aligned

  bool operator==(const InputBinding& other) const {
    return kind == other.kind && strides == other.strides && literal == other.literal &&
           aligned == other.aligned;
  }
};

struct KernelSignature {
  std::vector<InputBinding> inputs;  // one per FusionGroup::inputs entry
  // The most threads per block the target launches (the emulator's are
  // fewer); 0: no limit. Block-per-row kernels write their block size into
  // their loops, so it is part of what the source depends on.
  int block_limit = 0;

  bool operator==(const KernelSignature& other) const {
    return inputs == other.inputs && block_limit == other.block_limit;
  }
};

// How a reduction lays out its rows, as its renderer decided (a render at
// other sizes may decide otherwise, and so render another skeleton). A
// render may be asked to prefer a strategy already compiled for its
// structure (kernels/row_strategy.h), so that its template serves it.
struct RowStrategy {
  bool known = false;  // a reduction rendered it
  bool block = false;  // a block per row (else a thread, or a serial block)
  int threads = 0;     // a block-per-row kernel's block size
  int vector_width = 1;
  bool split = false;     // rows split into chunks (kernels/row_split.h)
  int64_t row_array = 0;  // elements of a block's row cache (0: none)

  bool operator==(const RowStrategy& other) const {
    return known == other.known && block == other.block && threads == other.threads &&
           vector_width == other.vector_width && split == other.split &&
           row_array == other.row_array;
  }
  bool operator!=(const RowStrategy& other) const {
    return !(*this == other);
  }
};

enum class LaunchShape {
  kElementwise,   // grid-stride over `work_items` elements (vectors when vector_width > 1)
  kBlockPerRow,   // one block per reduced row (or chunk), exactly `block_size` threads
  kThreadPerRow,  // one thread per reduced row
};

struct KernelSource {
  std::string name;
  std::string source;
  std::vector<std::string> ops;  // qualified ATen ops fused into it, in order
  LaunchShape launch = LaunchShape::kElementwise;
  int64_t work_items = 0;
  int vector_width = 1;
  int block_size = 256;
  bool index64 = false;
  // Index arithmetic cancelled through views (kernels/index_algebra.h):
  // whether terms cancel depends on the sizes' factors, so only renders
  // that run at their own sizes do it; templates keep the plain text.
  bool simplified_indices = false;
  // A split reduction's workspace, passed after the outputs: `partials`
  // accumulators of `partial_bytes` each (uninitialised), then, when
  // `counters` > 0, one unsigned int counter per row, zeroed before the launch.
  int64_t partials = 0;
  int partial_bytes = 4;
  int64_t counters = 0;
  // More than one: the kernel takes a last `int lf_phase` parameter and is
  // launched once per phase, 0 first, in order on one stream, so a phase
  // reads what the ones before it wrote.
  int launches = 1;
  // The C type of each kernel parameter, in order, for launchers that call
  // the kernel as a host function.
  std::vector<std::string> parameter_types;
  RowStrategy strategy;  // reductions only
};

}  // namespace lazyfuse
