#pragma once

// Runs an emulated kernel the way a GPU would: one host thread per CUDA
// thread of a block, blocks one after the other, real barriers and warp
// shuffles. It catches what the hardware or compute-sanitizer would: every
// load and store is checked against the launch's buffers (a read outside an
// input, a write outside an output, a misaligned vector access), and a
// barrier that not every thread reaches is an error, found when every live
// thread waits, or after a timeout, instead of a hang. An output that takes
// its input's memory is checked for reads after the write.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/emulated_abi.h"

namespace lazyfuse {
namespace emulated {

// Bytes a kernel may touch: an input's elements (read) or an output (write).
struct EmuBuffer {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool writable = false;
  bool readable_too = false;  // a writable buffer the kernel also reads
  std::string name;           // "in0", "out1"
  // An output written in place of an input: one flag per byte, set when the
  // launch writes it. A read of a flagged byte means some thread read an
  // input element after the output took its place, which on a GPU would
  // return the new value or the old one by timing.
  std::shared_ptr<std::atomic<unsigned char>[]> written;
};

struct EmuLaunch {
  EmuEntry entry = nullptr;
  std::string kernel;
  std::string source_path;
  int64_t grid = 1;
  int64_t block = 32;
  void** params = nullptr;
  std::vector<EmuBuffer> buffers;
  double barrier_timeout_seconds = 30;
};

// Throws a c10::Error naming the kernel, its source and what went wrong.
void RunEmulatedLaunch(const EmuLaunch& launch);

}  // namespace emulated
}  // namespace lazyfuse
