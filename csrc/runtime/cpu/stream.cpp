#include "runtime/cpu/stream.h"

#include <ATen/Parallel.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace lazyfuse {
namespace {

thread_local bool t_on_stream = false;

class CpuStream {
 public:
  CpuStream() {
    // Detached: a joinable thread in a static would have to be joined while
    // the process exits, after the objects the work uses are gone.
    std::thread([this] { Serve(); }).detach();
  }

  void Submit(std::function<void()> work, bool communicates) {
    const int threads = at::get_num_threads();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({std::move(work), threads});
      ++submitted_;
      if (communicates) {
        last_communicating_ = submitted_;
      }
    }
    wake_.notify_one();
  }

  void Synchronize() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t target = submitted_;
    done_cv_.wait(lock, [&] { return finished_ >= target; });
  }

  void WaitForCommunicating() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t target = last_communicating_;
    done_cv_.wait(lock, [&] { return finished_ >= target; });
  }

 private:
  void Serve() {
    t_on_stream = true;
    // OpenMP and torch's intra-op pool size themselves per calling thread.
    at::init_num_threads();
    for (;;) {
      Work work;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return !queue_.empty(); });
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      UseThreadsBeside(work.caller_threads);
      work.run();
      work.run = nullptr;  // what it holds goes before anyone is told it ran
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++finished_;
      }
      done_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  struct Work {
    std::function<void()> run;
    int caller_threads = 1;  // the submitting thread's intra-op thread count
  };

  // The thread that submitted keeps tracing the next step beside this run:
  // the run takes one core fewer than it would, so that neither waits for
  // the other's threads. On 2 cores, in one run, this made a traced MLP step
  // 1.4x faster than a run on both (docs/performance.md). OpenMP counts threads per
  // calling thread; torch's own pool, if built without OpenMP, is shared.
  void UseThreadsBeside(int caller_threads) {
#ifdef _OPENMP
    const int threads = std::max(1, caller_threads - 1);
    if (threads != threads_) {
      omp_set_num_threads(threads);
      threads_ = threads;
    }
#else
    (void)caller_threads;
#endif
  }

  std::deque<Work> queue_;
  int threads_ = 0;
  uint64_t submitted_ = 0;
  uint64_t finished_ = 0;
  uint64_t last_communicating_ = 0;  // by submission count
};

std::mutex g_stream_mutex;
CpuStream* g_stream = nullptr;  // leaked, as its thread is never joined

CpuStream* Stream(bool create) {
  static const bool registered = [] {
    // The stream is idle when the process forks (a DataLoader's workers),
    // so no lock is held by a thread the child lacks; the child starts a
    // stream of its own. A fork from Python holds the GIL here, which a run
    // may need: lazyfuse waits first, in an os.register_at_fork hook.
    pthread_atfork(SynchronizeCpuStream, nullptr, [] { g_stream = nullptr; });
    return true;
  }();
  (void)registered;
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  if (g_stream == nullptr && create) {
    g_stream = new CpuStream();
  }
  return g_stream;
}

}  // namespace

void SubmitToCpuStream(std::function<void()> work, bool communicates) {
  Stream(/*create=*/true)->Submit(std::move(work), communicates);
}

void SynchronizeCpuStream() {
  if (t_on_stream) {
    return;
  }
  if (CpuStream* stream = Stream(/*create=*/false)) {
    stream->Synchronize();
  }
}

void WaitForCpuStreamCollectives() {
  if (t_on_stream) {
    return;
  }
  if (CpuStream* stream = Stream(/*create=*/false)) {
    stream->WaitForCommunicating();
  }
}

}  // namespace lazyfuse
