#include "ltc/tracing_thread.h"

#include <pthread.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace lazyfuse {
namespace {

// Python's threading.get_ident() is pthread_self() on POSIX, so the ids in
// messages are the ones a user can look up.
using ThreadId = uint64_t;
constexpr ThreadId kNoThread = 0;

ThreadId ThisThread() {
  return static_cast<ThreadId>(pthread_self());
}

std::atomic<ThreadId> g_owner{kNoThread};
std::mutex g_claim_mutex;
std::condition_variable g_handed_back;

// A thread that ends hands the device back: what it left pending belongs to
// whoever holds its tensors now.
struct ReleaseAtThreadExit {
  ~ReleaseAtThreadExit() {
    std::lock_guard<std::mutex> lock(g_claim_mutex);
    ThreadId self = ThisThread();
    if (g_owner.compare_exchange_strong(self, kNoThread)) {
      g_handed_back.notify_all();
    }
  }
};

// Python's Thread.join() returns before the thread's C++ thread_local
// destructors have run, so a thread that joined an owner may find it still
// holding the device for a moment. Whether `owner` lets go within that moment.
bool HandedBackSoon(std::unique_lock<std::mutex>& lock, ThreadId owner) {
  return g_handed_back.wait_for(
      lock, std::chrono::milliseconds(200), [owner] { return g_owner.load() != owner; });
}

void NoteTracingThread() {
  thread_local ReleaseAtThreadExit release;
  (void)release;
  static std::once_flag fork_handler;
  std::call_once(fork_handler, [] {
    // The child of a fork has only the forking thread.
    pthread_atfork(nullptr, nullptr, [] { g_owner.store(kNoThread); });
  });
}

bool InBackwardPass() {
  return torch::autograd::get_current_graph_task_id() != -1;
}

// Not a c10::Error: code that catches those to try another way (an aten
// composite falls back to eager for good, ops/functionalized_composite.cpp)
// must let a refusal through. Python sees a RuntimeError either way.
class TracingRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void Refuse(const std::string& what, ThreadId owner) {
  std::ostringstream message;
  message << "lazyfuse: " << what << " on thread " << ThisThread() << " was refused: thread "
          << owner
          << " has a step open on the lazy device (lazy tensors whose values are still "
             "pending). The lazy device records one graph for the whole process, so two threads "
             "must not trace at once: their steps would mix. End that thread's step first "
             "(lazyfuse.mark_step(), or reading its results), or hold one lock around each "
             "thread's lazy work. Nothing was recorded; the thread ids are "
             "threading.get_ident() values.";
  throw TracingRefused(message.str());
}

}  // namespace

void ClaimTracing(const std::function<std::string()>& what,
                  const std::function<bool()>& any_pending) {
  const ThreadId self = ThisThread();
  if (g_owner.load(std::memory_order_relaxed) == self || InBackwardPass()) {
    return;
  }
  std::unique_lock<std::mutex> lock(g_claim_mutex);
  const ThreadId owner = g_owner.load();
  if (owner != kNoThread && owner != self && any_pending() &&
      (!HandedBackSoon(lock, owner) || g_owner.load() != kNoThread)) {
    Refuse(what(), owner);
  }
  // Counted so that a test sees one claim per thread, not one per op: the
  // check above walks every live tensor.
  TORCH_LAZY_COUNTER("LazyFuseTracingThreadClaims", 1);
  g_owner.store(self);
  NoteTracingThread();
}

void CheckSyncMayRun(const std::string& what, bool any_pending) {
  if (!any_pending || InBackwardPass()) {
    return;
  }
  std::unique_lock<std::mutex> lock(g_claim_mutex);
  const ThreadId owner = g_owner.load();
  if (owner != kNoThread && owner != ThisThread() &&
      (!HandedBackSoon(lock, owner) || g_owner.load() != kNoThread)) {
    Refuse(what, owner);
  }
}

}  // namespace lazyfuse
