#include "runtime/parallel_compile.h"

#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "runtime/target.h"

namespace lazyfuse {
namespace {
// Each compile holds a few hundred MB (NVRTC, or a host compiler parsing the
// emulation prelude): a many-core machine would otherwise hold GBs at once.
constexpr unsigned kMostCompileThreadsByDefault = 16;
}  // namespace

int CompileThreads() {
  if (const char* text = std::getenv("LAZYFUSE_COMPILE_THREADS")) {
    const int threads = std::atoi(text);
    if (threads > 0) {
      return threads;
    }
  }
  return static_cast<int>(
      std::clamp(std::thread::hardware_concurrency(), 1U, kMostCompileThreadsByDefault));
}

void ForEachInParallel(size_t count, const std::function<void(size_t)>& work) {
  const size_t threads = std::min(count, static_cast<size_t>(CompileThreads()));
  std::atomic<size_t> next{0};
  const auto drain = [&] {
    for (size_t i = next++; i < count; i = next++) {
      work(i);
    }
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(drain);
    } catch (const std::system_error&) {
      break;  // no thread to be had: the ones there, the caller's too, do the rest
    }
  }
  drain();
  for (std::thread& helper : helpers) {
    helper.join();
  }
}

std::vector<std::shared_ptr<LoadedKernel>> KernelTarget::LoadBatch(
    const std::vector<KernelSource>& sources) {
  std::vector<std::shared_ptr<LoadedKernel>> loaded(sources.size());
  ForEachInParallel(sources.size(), [&](size_t i) {
    try {
      loaded[i] = Load(sources[i]);
    } catch (const std::exception&) {
      TORCH_LAZY_COUNTER("LazyFuseBatchCompileFailed", 1);
    }
  });
  return loaded;
}

}  // namespace lazyfuse
