#include "runtime/cpu/output_pool.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace lazyfuse {
namespace {

// Block sizes are rounded up to this, so sizes a few elements apart share
// blocks.
constexpr size_t kGranule = size_t{64} << 10;

constexpr int64_t kDefaultCapMiB = 1024;

int64_t CapFromEnv() {
  const char* env = std::getenv("LAZYFUSE_CPU_CACHE_MB");
  if (env == nullptr || *env == '\0') {
    return kDefaultCapMiB << 20;
  }
  char* end = nullptr;
  const long long mib = std::strtoll(env, &end, 10);
  TORCH_CHECK(*end == '\0' && mib >= 0,
              "lazyfuse: LAZYFUSE_CPU_CACHE_MB is '",
              env,
              "'; use a number of MiB, or 0 to keep no freed CPU blocks");
  return static_cast<int64_t>(mib) << 20;
}

std::atomic<int64_t> g_cap{-1};

struct Block {
  void* data = nullptr;
  size_t capacity = 0;   // bytes allocated
  size_t requested = 0;  // bytes asked for, as reported to the memory hook
};

class OutputPool final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n < kPooledBytes) {
      return c10::GetCPUAllocator()->allocate(n);
    }
    auto block =
        std::make_unique<Block>(Block{nullptr, (n + kGranule - 1) / kGranule * kGranule, n});
    bool reused = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // A kept block at most an eighth larger: a small request never pins a
      // big block.
      auto found = kept_.lower_bound(block->capacity);
      if (found != kept_.end() && found->first <= block->capacity + block->capacity / 8) {
        block->capacity = found->first;
        block->data = found->second;
        kept_bytes_ -= static_cast<int64_t>(found->first);
        kept_.erase(found);
        reused = true;
        ++reused_;
      }
    }
    if (block->data == nullptr) {
      try {
        block->data = c10::alloc_cpu(block->capacity);
      } catch (const c10::Error&) {
        // What is kept may be what is missing.
        EmptyCache();
        block->data = c10::alloc_cpu(block->capacity);
      }
    }
    if (reused) {
      TORCH_LAZY_COUNTER("LazyFuseCpuOutputsReused", 1);
    }
    Report(block.get(), static_cast<int64_t>(n));
    void* data = block->data;
    return {data, block.release(), &Release, c10::Device(c10::kCPU)};
  }

  void copy_data(void* dest, const void* src, size_t count) const override {
    std::memcpy(dest, src, count);
  }

  OutputPoolStats Stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {kept_bytes_, in_use_bytes_, reused_};
  }

  void EmptyCache() {
    std::multimap<size_t, void*> freed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      freed.swap(kept_);
      kept_bytes_ = 0;
    }
    for (const auto& entry : freed) {
      c10::free_cpu(entry.second);
    }
  }

 private:
  static void Release(void* context) {
    auto* block = static_cast<Block*>(context);
    Pool().Return(block);
  }

  void Return(Block* block) {
    Report(block, -static_cast<int64_t>(block->requested));
    bool kept = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (kept_bytes_ + static_cast<int64_t>(block->capacity) <= CpuOutputPoolCap()) {
        kept_.emplace(block->capacity, block->data);
        kept_bytes_ += static_cast<int64_t>(block->capacity);
        kept = true;
      }
    }
    if (!kept) {
      c10::free_cpu(block->data);
    }
    delete block;
  }

  // As torch's CPU allocator reports: the bytes asked for, in use after.
  void Report(const Block* block, int64_t change) {
    int64_t in_use = 0;
    int64_t kept = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_use_bytes_ += change;
      in_use = in_use_bytes_;
      kept = kept_bytes_;
    }
    c10::reportMemoryUsageToProfiler(block->data,
                                     change,
                                     static_cast<size_t>(in_use),
                                     static_cast<size_t>(in_use + kept),
                                     c10::Device(c10::kCPU));
  }

 public:
  static OutputPool& Pool() {
    // Never destroyed: a tensor freed during interpreter teardown still
    // returns its block here.
    static auto* pool = new OutputPool;
    return *pool;
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> kept_;  // by capacity
  int64_t kept_bytes_ = 0;
  int64_t in_use_bytes_ = 0;
  int64_t reused_ = 0;
};

}  // namespace

c10::Allocator* CpuOutputAllocator() {
  return &OutputPool::Pool();
}

OutputPoolStats CpuOutputPoolStats() {
  return OutputPool::Pool().Stats();
}

void EmptyCpuOutputPool() {
  OutputPool::Pool().EmptyCache();
}

int64_t CpuOutputPoolCap() {
  int64_t cap = g_cap.load();
  if (cap < 0) {
    cap = CapFromEnv();
    g_cap = cap;
  }
  return cap;
}

void SetCpuOutputPoolCap(int64_t bytes) {
  g_cap = bytes;
  if (bytes < CpuOutputPoolStats().kept_bytes) {
    EmptyCpuOutputPool();
  }
}

}  // namespace lazyfuse
