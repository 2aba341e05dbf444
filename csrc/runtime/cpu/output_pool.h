#pragma once

// Large CPU kernel outputs come from a pool of blocks freed earlier, as CUDA
// outputs come from torch's caching allocator. glibc hands out every block
// over its mmap threshold (32 MiB at most) as fresh pages, and a kernel
// writing 64 MiB into fresh pages spends most of its time in page faults:
// pointwise x1 at 2^24 elements ran at 9% of a copy's bandwidth. A training
// step frees and allocates the same sizes each time, so a freed block is
// usually the next one asked for.
//
// Blocks of at least kPooledBytes are kept when freed, up to a cap on the
// bytes kept (LAZYFUSE_CPU_CACHE_MB, 1024 by default, 0 turns the pool
// off); smaller blocks go to torch's CPU allocator. Allocations report to
// c10's memory hook at the size asked for, as torch's allocator does, so
// metrics.track_memory() and the profiler count what is in use, not what is
// kept (torch.cuda.memory_allocated, not memory_reserved).

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>

namespace lazyfuse {

constexpr size_t kPooledBytes = size_t{1} << 20;

struct OutputPoolStats {
  int64_t kept_bytes = 0;    // freed blocks held for reuse
  int64_t in_use_bytes = 0;  // pooled blocks handed out and not yet freed
  int64_t reused = 0;        // allocations served from a kept block
};

// The allocator CPU kernel outputs are made with.
c10::Allocator* CpuOutputAllocator();

OutputPoolStats CpuOutputPoolStats();
// Frees every kept block (torch.cuda.empty_cache's counterpart).
void EmptyCpuOutputPool();
// The most bytes kept; from LAZYFUSE_CPU_CACHE_MB until set (tests).
int64_t CpuOutputPoolCap();
void SetCpuOutputPoolCap(int64_t bytes);

}  // namespace lazyfuse
