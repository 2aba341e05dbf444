#include "runtime/emulated/launcher.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>

#include "program/error_text.h"

namespace lazyfuse {
namespace emulated {
namespace {

constexpr int kWarp = 32;

// Unwinds an emulated thread once its launch has failed.
struct EmuAbort {};

// A barrier over `size` threads: a whole block, or one warp.
struct SyncPoint {
  int size = 0;
  int arrived = 0;
  uint64_t generation = 0;
};

struct BlockRun;

struct ThreadContext {
  BlockRun* block = nullptr;
  unsigned int thread = 0;
  EmuEnv env{};
};

struct BlockRun {
  const EmuLaunch* launch = nullptr;
  unsigned int index = 0;
  int threads = 0;
  std::mutex mutex;
  std::condition_variable wake;
  SyncPoint block_sync;
  std::vector<SyncPoint> warp_syncs;
  std::vector<uint64_t> shuffle_slots;
  int waiting = 0;
  int exited = 0;
  bool failed = false;
  std::string error;

  // Called with `mutex` held.
  void Fail(const std::string& message) {
    if (!failed) {
      failed = true;
      error = message;
    }
    wake.notify_all();
  }

  // Every live thread waits, so no barrier can complete any more.
  void FailIfStuck() {
    if (waiting > 0 && waiting + exited == threads) {
      std::ostringstream out;
      out << "a barrier (__syncthreads or a warp shuffle) that not every thread of block " << index
          << " reaches: " << waiting << " threads wait at one, " << exited
          << " returned without reaching it";
      Fail(out.str());
    }
  }

  void Wait(SyncPoint& sync, std::unique_lock<std::mutex>& lock) {
    if (failed) {
      throw EmuAbort();
    }
    if (sync.arrived + 1 == sync.size) {
      // The released threads stop counting as waiting now, before they
      // wake: the next barrier must not take them for stuck.
      waiting -= sync.arrived;
      sync.arrived = 0;
      ++sync.generation;
      wake.notify_all();
      return;
    }
    ++sync.arrived;
    const uint64_t generation = sync.generation;
    ++waiting;
    FailIfStuck();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(launch->barrier_timeout_seconds);
    while (sync.generation == generation && !failed) {
      if (wake.wait_until(lock, deadline) == std::cv_status::timeout &&
          sync.generation == generation && !failed) {
        std::ostringstream out;
        out << "a barrier in block " << index << " waited " << launch->barrier_timeout_seconds
            << " s: not every thread reaches it";
        Fail(out.str());
      }
    }
    if (failed) {
      throw EmuAbort();
    }
  }
};

void FailFromThread(ThreadContext& context, const std::string& message) {
  BlockRun& block = *context.block;
  std::lock_guard<std::mutex> lock(block.mutex);
  std::ostringstream out;
  out << message << " by thread " << context.thread << " of block " << block.index;
  block.Fail(out.str());
}

void Sync(void* ctx) {
  auto& context = *static_cast<ThreadContext*>(ctx);
  std::unique_lock<std::mutex> lock(context.block->mutex);
  context.block->Wait(context.block->block_sync, lock);
}

void ShuffleXor(void* ctx, void* value, int bytes, int lane_mask) {
  auto& context = *static_cast<ThreadContext*>(ctx);
  BlockRun& block = *context.block;
  const unsigned int warp = context.thread / kWarp;
  const unsigned int lane = context.thread % kWarp;
  SyncPoint& sync = block.warp_syncs[warp];
  std::unique_lock<std::mutex> lock(block.mutex);
  std::memcpy(&block.shuffle_slots[context.thread], value, bytes);
  block.Wait(sync, lock);
  const unsigned int source = lane ^ static_cast<unsigned int>(lane_mask);
  if (source < static_cast<unsigned int>(sync.size)) {
    std::memcpy(value, &block.shuffle_slots[warp * kWarp + source], bytes);
  }
  // Nobody overwrites a slot before every lane has read its partner's.
  block.Wait(sync, lock);
}

void CheckInPlace(ThreadContext& context,
                  const EmuBuffer& buffer,
                  uintptr_t at,
                  unsigned long bytes,
                  bool write) {
  std::atomic<unsigned char>* flags = buffer.written.get() + (at - buffer.begin);
  for (unsigned long b = 0; b < bytes; ++b) {
    if (write) {
      flags[b].store(1, std::memory_order_relaxed);
    } else if (flags[b].load(std::memory_order_relaxed) != 0) {
      std::ostringstream out;
      out << "read of " << buffer.name << " at 0x" << std::hex << at << std::dec
          << " after this launch wrote its output there in place";
      FailFromThread(context, out.str());
      throw EmuAbort();
    }
  }
}

void CheckAccess(void* ctx, const void* address, unsigned long bytes, int access) {
  auto& context = *static_cast<ThreadContext*>(ctx);
  const auto at = reinterpret_cast<uintptr_t>(address);
  const bool write = (access & kEmuWrite) != 0;
  const bool vector = (access & kEmuVector) != 0;
  if (vector && at % bytes != 0) {
    std::ostringstream out;
    out << "misaligned " << bytes << "-byte vector " << (write ? "store" : "load") << " at 0x"
        << std::hex << at << std::dec << " (needs " << bytes << "-byte alignment)";
    FailFromThread(context, out.str());
    throw EmuAbort();
  }
  const EmuBuffer* nearest = nullptr;
  uintptr_t distance = UINTPTR_MAX;
  for (const EmuBuffer& buffer : context.block->launch->buffers) {
    if (buffer.writable != write && !buffer.readable_too) {
      continue;
    }
    if (at >= buffer.begin && at + bytes <= buffer.end) {
      if (buffer.written) {
        CheckInPlace(context, buffer, at, bytes, write);
      }
      return;
    }
    const uintptr_t d = at < buffer.begin ? buffer.begin - at : at + bytes - buffer.end;
    if (d < distance) {
      distance = d;
      nearest = &buffer;
    }
  }
  std::ostringstream out;
  out << "out-of-bounds " << bytes << "-byte " << (write ? "write" : "read") << " at 0x" << std::hex
      << at << std::dec;
  if (nearest != nullptr) {
    const bool before = at < nearest->begin;
    out << ", " << distance << " bytes " << (before ? "before " : "past the end of ")
        << nearest->name << " (" << (nearest->end - nearest->begin) << " bytes)";
  } else {
    out << "; the kernel has no " << (write ? "output" : "input") << " to "
        << (write ? "write" : "read");
  }
  FailFromThread(context, out.str());
  throw EmuAbort();
}

void ThreadMain(ThreadContext* context, const EmuLaunch* launch) {
  BlockRun& block = *context->block;
  try {
    launch->entry(&context->env, launch->params);
  } catch (const EmuAbort&) {
  } catch (const std::exception& error) {
    FailFromThread(*context, std::string("exception: ") + ErrorText(error));
  }
  std::lock_guard<std::mutex> lock(block.mutex);
  ++block.exited;
  block.FailIfStuck();
}

std::mutex g_launch_mutex;

}  // namespace

void RunEmulatedLaunch(const EmuLaunch& launch) {
  TORCH_CHECK(launch.block > 0 && launch.block % kWarp == 0 && launch.block <= 1024,
              "lazyfuse: emulated block size must be a multiple of 32 up to 1024, got ",
              launch.block);
  // __shared__ memory is static in the kernel library, so blocks, and
  // launches, run one at a time.
  std::lock_guard<std::mutex> serial(g_launch_mutex);
  for (int64_t b = 0; b < launch.grid; ++b) {
    BlockRun block;
    block.launch = &launch;
    block.index = static_cast<unsigned int>(b);
    block.threads = static_cast<int>(launch.block);
    block.block_sync.size = block.threads;
    for (int w = 0; w < (block.threads + kWarp - 1) / kWarp; ++w) {
      block.warp_syncs.push_back(SyncPoint{std::min(kWarp, block.threads - w * kWarp), 0, 0});
    }
    block.shuffle_slots.assign(block.threads, 0);
    std::vector<ThreadContext> contexts(block.threads);
    std::vector<std::thread> threads;
    threads.reserve(block.threads);
    for (int t = 0; t < block.threads; ++t) {
      ThreadContext& context = contexts[t];
      context.block = &block;
      context.thread = static_cast<unsigned int>(t);
      context.env.thread_x = context.thread;
      context.env.block_x = block.index;
      context.env.block_dim_x = static_cast<unsigned int>(launch.block);
      context.env.grid_dim_x = static_cast<unsigned int>(launch.grid);
      context.env.ctx = &context;
      context.env.sync = &Sync;
      context.env.shfl_xor = &ShuffleXor;
      context.env.check = &CheckAccess;
      try {
        threads.emplace_back(ThreadMain, &context, &launch);
      } catch (const std::system_error& error) {
        // The threads already started unwind at their next barrier or access.
        std::lock_guard<std::mutex> lock(block.mutex);
        block.Fail(std::string("could not start an emulated thread: ") + error.what());
        break;
      }
    }
    for (std::thread& thread : threads) {
      thread.join();
    }
    TORCH_CHECK(!block.failed,
                "lazyfuse: emulated kernel ",
                launch.kernel,
                ": ",
                block.error,
                "\nsource: ",
                launch.source_path);
  }
}

}  // namespace emulated
}  // namespace lazyfuse
