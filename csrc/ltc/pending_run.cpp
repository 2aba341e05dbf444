#include "ltc/pending_run.h"

#include <ATen/ThreadLocalState.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "ltc/backend_data.h"
#include "ltc/pending_run_failures.h"
#include "ltc/run_results.h"
#include "ops/collective_call.h"
#include "program/error_text.h"
#include "runtime/cpu/stream.h"
#include "runtime/result_aliases.h"

namespace lazyfuse {
namespace {

// Runs alive whose failure was raised (FailedRunsRaisedAlive).
std::atomic<long> g_failed_runs_raised{0};

class PendingRun {
 public:
  // `failure`: what the sync that ran it raised, for a run that failed there.
  PendingRun(std::shared_ptr<ProgramRun> run,
             bool on_stream,
             std::vector<torch::lazy::BackendDataPtr> arguments,
             std::exception_ptr failure = nullptr)
      : run_(std::move(run)),
        program_(run_->program),
        on_stream_(on_stream),
        arguments_(std::move(arguments)),
        holders_(program_->results.size()),
        derived_from_(program_->results.size(), false),
        failure_error_(std::move(failure)) {
    for (const DerivedResult& entry : program_->derived_results) {
      derived_from_[entry.from] = true;
    }
    if (failure_error_ != nullptr) {
      MarkReported();
    }
  }

  ~PendingRun() {
    if (failure_raised_->load()) {
      g_failed_runs_raised.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  std::vector<torch::lazy::BackendDataPtr> Results(std::shared_ptr<PendingRun> self,
                                                   const torch::lazy::BackendDevice& device) {
    const std::vector<const DerivedResult*> derived = DerivedByResult(*program_);
    std::vector<torch::lazy::BackendDataPtr> results;
    results.reserve(program_->results.size());
    for (size_t i = 0; i < program_->results.size(); ++i) {
      const BufferInfo& info = program_->buffers[program_->results[i]];
      LazyFuseBackendData::MakePending make;
      if (const DerivedResult* entry = derived[i]) {
        make = [self, entry = *entry, sizes = info.sizes, holder = Holder(self, entry->from)](
                   const torch::lazy::BackendDataPtr& prior, bool* no_value_for_good) {
          bool undone = false;
          at::Tensor from =
              self->Result(entry.from, /*keep=*/true, prior, &undone, no_value_for_good);
          return undone ? from : MakeDerivedResult(entry, sizes, from);
        };
      } else {
        make = [self, i, holder = Holder(self, i)](const torch::lazy::BackendDataPtr& prior,
                                                   bool* no_value_for_good) {
          return self->Result(i, /*keep=*/false, prior, nullptr, no_value_for_good);
        };
      }
      results.push_back(
          std::make_shared<LazyFuseBackendData>(device,
                                                torch::lazy::Shape(info.dtype, info.sizes),
                                                std::move(make),
                                                on_stream_,
                                                failure_raised_));
    }
    return results;
  }

  // On the stream's thread, under the state of the thread that handed it over.
  void RunOnStream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      try {
        Finish(/*all=*/true);
      } catch (...) {
        failure_error_ = std::current_exception();
        TORCH_LAZY_COUNTER("LazyFuseStreamRunFailures", 1);
      }
    }
    {
      std::lock_guard<std::mutex> lock(attempted_mutex_);
      attempted_ = true;
    }
    attempted_cv_.notify_all();
  }

  bool Unfinished() {
    std::lock_guard<std::mutex> lock(mutex_);
    return run_ != nullptr;
  }

  // Why the run's values cannot be made again, if they cannot.
  std::string lost() {
    std::lock_guard<std::mutex> lock(mutex_);
    return run_ != nullptr ? run_->lost : std::string();
  }

  // What a read of a failed stream run raised, if a read raised.
  std::string failure() {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

  // Whether the run's failure was raised already.
  bool reported() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reported_;
  }

  // A wait raised the failure of this unfinished run: from now on a tensor
  // it updates in place that needs the failing step may get its value from
  // before the run back.
  void NoteFailureReported() {
    std::lock_guard<std::mutex> lock(mutex_);
    MarkReported();
  }

 private:
  // Kept alive by whatever holds pending data that reads result `index`:
  // its own, and that of a result derived from it, share one. The last
  // holder to go takes the result with it, whichever thread drops it and
  // whenever: a result kept here after its tensors are gone would count as
  // a second reader of the memory, and the next graph would not donate it.
  std::shared_ptr<void> Holder(const std::shared_ptr<PendingRun>& self, size_t index) {
    if (std::shared_ptr<void> held = holders_.at(index).lock()) {
      return held;
    }
    std::shared_ptr<void> holder(new size_t(index),
                                 [run = std::weak_ptr<PendingRun>(self), index](void* held) {
                                   delete static_cast<size_t*>(held);
                                   if (const std::shared_ptr<PendingRun> alive = run.lock()) {
                                     alive->ReleaseUnheld(index);
                                   }
                                 });
    holders_[index] = holder;
    return holder;
  }

  // The holder shared by a result and those derived from it went: nothing
  // reads the result again.
  void ReleaseUnheld(size_t index) {
    std::lock_guard<std::mutex> lock(outputs_mutex_);
    DropOutputLocked(index);
  }

  // Under outputs_mutex_.
  void DropOutputLocked(size_t index) {
    if (index < outputs_.size()) {
      outputs_[index].reset();
    }
  }

  // `keep`: a derived result reads this one again. `prior`: what the tensor
  // reading it held before this graph (ltc/prior_values.h), or nullptr; a
  // value undone to it sets `*undone`. A failure raised that every later
  // read would raise again sets `*no_value_for_good`.
  at::Tensor Result(size_t index,
                    bool keep,
                    const torch::lazy::BackendDataPtr& prior,
                    bool* undone,
                    bool* no_value_for_good) {
    if (on_stream_) {
      std::unique_lock<std::mutex> lock(attempted_mutex_);
      attempted_cv_.wait(lock, [&] { return attempted_; });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (run_ != nullptr && !FinishedAlone(index)) {
      // Nothing runs beside a second try, or a copy for this result alone:
      // the CPU kernels' runtime serves one run at a time.
      SynchronizeCpuStream();
      std::exception_ptr failure = failure_error_;
      bool fresh = false;
      // The rest of the run is tried again until its failure is raised. After
      // that only where no value may be undone instead: memory ran out, which
      // freeing memory cures, a collective ran, or the values are lost. Never
      // once a value is undone, whose memory the run would write over.
      const bool retry = failure == nullptr || !reported_ || !FailureUndoes(failure) ||
                         !run_->lost.empty() || !run_->ran_collective.empty();
      if (!undid_ && retry) {
        try {
          Finish(/*all=*/false);
          failure = nullptr;
        } catch (const c10::Error&) {
          failure = std::current_exception();
          failure_error_ = failure;
          fresh = true;
        }
      }
      // Otherwise the rest stays pending for the others; the value is read below.
      bool needs_failing_step = false;
      if (failure != nullptr && !FinishAlone(index, &needs_failing_step)) {
        const bool may_undo =
            prior != nullptr && prior->HasValue() && FailureUndoes(failure) && MayUndoTo(*prior);
        if (may_undo && reported_) {
          undid_ = true;
          TORCH_LAZY_COUNTER("LazyFuseValuesUndone", 1);
          if (undone != nullptr) {
            *undone = true;
          }
          return static_cast<const LazyFuseBackendData&>(*prior).tensor();
        }
        // The step failed on its inputs' values, so it fails again at every
        // read; with no earlier value to give, this result has none for good,
        // and a graph reading it would raise at every sync (a running total
        // of the losses) without it.
        *no_value_for_good = needs_failing_step && FailureUndoes(failure) && !may_undo;
        MarkReported();
        try {
          std::rethrow_exception(failure);
        } catch (c10::Error& error) {
          if (fresh && on_stream_ && run_->lost.empty()) {
            failure_ = error.what_without_backtrace();
            error.add_context(
                "lazyfuse: this graph ran on the CPU stream after mark_step returned "
                "(asynchronous execution; LAZYFUSE_ASYNC=0 turns it off) and failed there; this "
                "read ran its rest again, which failed too, and so did the steps this tensor "
                "needs. Its tensors keep their pending values (free memory if it ran out); "
                "those that do not need the failing step read as usual. From now on, a tensor "
                "it updates in place that needs the failing step reads as it was before the "
                "graph.");
          }
          throw;
        }
      }
    }
    std::lock_guard<std::mutex> outputs_lock(outputs_mutex_);
    at::Tensor value = outputs_.at(index);
    // The datum read owns it now, so the next graph may donate it; a result
    // others are derived from stays until the last of them is read.
    if (!keep && !derived_from_[index]) {
      DropOutputLocked(index);
    }
    return value;
  }

  // Under mutex_ (or in the constructor): the run's failure reached the
  // user. If it failed on values, each result is from
  // now on a value, one from before the run, or none, found without running
  // the rest again, so a sync may make the results its graph reads first.
  void MarkReported() {
    reported_ = true;
    if (run_ != nullptr && failure_error_ != nullptr && FailureUndoes(failure_error_) &&
        run_->lost.empty() && run_->ran_collective.empty() && !failure_raised_->exchange(true)) {
      g_failed_runs_raised.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Under mutex_, with the run unfinished: whether a tensor it updates in
  // place may get back `prior`, its value from before the run. Not once a
  // step wrote over that memory (buffer donation), nor after a collective,
  // which other ranks have completed.
  bool MayUndoTo(const torch::lazy::BackendData& prior) const {
    if (!run_->lost.empty() || !run_->ran_collective.empty()) {
      return false;
    }
    const at::Tensor& value = static_cast<const LazyFuseBackendData&>(prior).tensor();
    const void* memory = value.has_storage() ? value.storage().data() : nullptr;
    const auto& overwritten = run_->overwritten_memory;
    return std::find(overwritten.begin(), overwritten.end(), memory) == overwritten.end();
  }

  // Finishing the rest failed, most likely on the values of a step some other
  // held tensor needs (an index out of range): a read that does not need it
  // must not fail with it, as it would not in eager. A copy of the run runs
  // only the steps result `index` needs; it shares the run's buffers but may
  // write over none of them, so the run stays as it was for the other
  // results. Never where a collective is left, which every rank runs exactly
  // once. Whether the copy succeeded; if it ran and failed,
  // `*needs_failing_step`.
  bool FinishAlone(size_t index, bool* needs_failing_step) {
    const auto& steps = program_->steps;
    if (!run_->lost.empty() || !run_->ran_collective.empty() ||
        std::any_of(steps.begin() + run_->next_step, steps.end(), [](const Step& step) {
          return step.kind == StepKind::kCollective;
        })) {
      return false;
    }
    ProgramRun copy = *run_;
    copy.owned.assign(copy.owned.size(), 0);
    copy.donated.assign(copy.donated.size(), 0);
    copy.let_go_of_parameter = nullptr;
    std::vector<bool> wanted(program_->results.size(), false);
    wanted[index] = true;
    std::vector<at::Tensor> outputs;
    try {
      outputs = ContinueProgram(copy, wanted);
    } catch (const std::exception&) {
      *needs_failing_step = true;  // the caller raises the run's error
      return false;
    }
    if (on_stream_) {
      SettleOutputs(*program_, outputs);
    }
    TORCH_LAZY_COUNTER("LazyFuseResultsFinishedAlone", 1);
    std::lock_guard<std::mutex> lock(outputs_mutex_);
    outputs_.resize(program_->results.size());
    outputs_[index] = std::move(outputs[index]);
    return true;
  }

  // Under mutex_, with the run unfinished: whether FinishAlone made result
  // `index` and it is still held for a read.
  bool FinishedAlone(size_t index) {
    std::lock_guard<std::mutex> lock(outputs_mutex_);
    return index < outputs_.size() && outputs_[index].defined();
  }

  // Runs the steps left: with `all`, as mark_step would have; otherwise only
  // those a result still held needs (the rest may be what failed).
  void Finish(bool all) {
    std::vector<bool> wanted;
    if (!all) {
      wanted.resize(holders_.size());
      for (size_t k = 0; k < holders_.size(); ++k) {
        wanted[k] = !holders_[k].expired();
      }
    }
    std::vector<at::Tensor> outputs = ContinueProgram(*run_, wanted);
    run_.reset();
    arguments_.clear();
    if (on_stream_) {
      SettleOutputs(*program_, outputs);
    } else {
      TORCH_LAZY_COUNTER("LazyFuseGraphsFinishedLater", 1);
    }
    // A result may stay unread for as long as its tensor lives; the graph's
    // kernels and constants need not.
    program_.reset();
    std::lock_guard<std::mutex> lock(outputs_mutex_);
    outputs_ = std::move(outputs);
    // A result no tensor holds any more goes now, as it would in mark_step.
    for (size_t k = 0; k < holders_.size(); ++k) {
      if (holders_[k].expired()) {
        DropOutputLocked(k);
      }
    }
  }

  std::mutex mutex_;
  std::shared_ptr<ProgramRun> run_;
  std::shared_ptr<const Program> program_;
  const bool on_stream_;
  // Held until the run finishes: what a tensor it updates may be undone to.
  std::vector<torch::lazy::BackendDataPtr> arguments_;
  std::vector<std::weak_ptr<void>> holders_;
  std::vector<bool> derived_from_;  // by result: whether a derived result reads it again
  // Never held while waiting, or while data are made or dropped: a holder
  // may go on any thread, while another holds mutex_.
  std::mutex outputs_mutex_;
  // By result: once the run finished, its values; before, those FinishAlone made.
  std::vector<at::Tensor> outputs_;
  std::string failure_;
  // The run's failure, once a read met it, or the sync that ran it raised it.
  std::exception_ptr failure_error_;
  // Whether the run's failure reached the user: a read or a wait raised it,
  // or the sync that ran it did.
  bool reported_ = false;
  // Whether MarkReported found the run failed on values, for the results'
  // data to read without mutex_, which a run on the CPU stream holds until it
  // ends.
  const std::shared_ptr<std::atomic<bool>> failure_raised_ =
      std::make_shared<std::atomic<bool>>(false);
  // Whether a value was undone to its prior (see Result).
  bool undid_ = false;

  std::mutex attempted_mutex_;
  std::condition_variable attempted_cv_;
  bool attempted_ = false;
};

std::mutex g_stream_runs_mutex;
// Runs handed to the stream and not yet waited for (WaitForCpuStreamRuns).
std::vector<std::weak_ptr<PendingRun>> g_stream_runs;

}  // namespace

std::vector<torch::lazy::BackendDataPtr> ResultsFinishedOnRead(
    std::shared_ptr<ProgramRun> run,
    const torch::lazy::BackendDevice& device,
    std::vector<torch::lazy::BackendDataPtr> arguments,
    std::exception_ptr failure) {
  auto pending = std::make_shared<PendingRun>(
      std::move(run), /*on_stream=*/false, std::move(arguments), std::move(failure));
  return pending->Results(pending, device);
}

std::vector<torch::lazy::BackendDataPtr> ResultsRunOnCpuStream(
    std::shared_ptr<ProgramRun> run,
    const torch::lazy::BackendDevice& device,
    std::vector<torch::lazy::BackendDataPtr> arguments,
    std::shared_ptr<const CollectiveGroups> groups) {
  auto pending =
      std::make_shared<PendingRun>(std::move(run), /*on_stream=*/true, std::move(arguments));
  std::vector<torch::lazy::BackendDataPtr> results = pending->Results(pending, device);
  {
    std::lock_guard<std::mutex> lock(g_stream_runs_mutex);
    if (g_stream_runs.size() >= 64) {  // a loop that never waits keeps no trail
      g_stream_runs.erase(
          std::remove_if(g_stream_runs.begin(),
                         g_stream_runs.end(),
                         [](const std::weak_ptr<PendingRun>& run) { return run.expired(); }),
          g_stream_runs.end());
    }
    g_stream_runs.push_back(pending);
  }
  const bool communicates = groups != nullptr;
  SubmitToCpuStream(
      [pending, groups = std::move(groups), state = at::ThreadLocalState()]() mutable {
        at::ThreadLocalStateGuard guard(state);
        const UseCollectiveGroups use(groups.get());
        pending->RunOnStream();
        // If this is the run's last holder, its memory goes under the caller's
        // state too, where the memory meter that counted it counts its free.
        pending.reset();
      },
      communicates);
  TORCH_LAZY_COUNTER("LazyFuseStreamRuns", 1);
  return results;
}

void SettleStreamResults(c10::ArrayRef<torch::lazy::BackendDataPtr> data) {
  for (const auto& datum : data) {
    const auto* ours = dynamic_cast<const LazyFuseBackendData*>(datum.get());
    if (ours != nullptr && ours->in_flight()) {
      ours->tensor();
    }
  }
}

long FailedRunsRaisedAlive() {
  return g_failed_runs_raised.load(std::memory_order_relaxed);
}

void WaitForCpuStreamRuns() {
  SynchronizeCpuStream();
  std::vector<std::weak_ptr<PendingRun>> runs;
  {
    std::lock_guard<std::mutex> lock(g_stream_runs_mutex);
    runs.swap(g_stream_runs);
  }
  for (const auto& weak : runs) {
    if (const std::shared_ptr<PendingRun> run = weak.lock()) {
      // A failure raised already, by a read of a result or an earlier wait,
      // is not raised again: each read of a lost value says so itself, and
      // a read of something else must not fail with it.
      if (!run->Unfinished() || run->reported()) {
        continue;  // finished, or its failure was raised already
      }
      run->NoteFailureReported();
      const std::string lost = run->lost();
      TORCH_CHECK(lost.empty(),
                  "lazyfuse: a graph that mark_step handed to the CPU stream (asynchronous "
                  "execution; LAZYFUSE_ASYNC=0 turns it off) failed when it ran, and what it "
                  "computes cannot be made again. ",
                  lost);
      TORCH_CHECK(false,
                  "lazyfuse: a graph that mark_step handed to the CPU stream (asynchronous "
                  "execution; LAZYFUSE_ASYNC=0 turns it off) failed when it ran. Nothing is lost: "
                  "its tensors keep their pending values, and reading one runs the rest of the "
                  "graph again (raising its error if it fails again). A tensor it updates in "
                  "place that needs the failing step reads as it was before the graph.",
                  run->failure().empty() ? "" : " The last read raised: " + run->failure());
    }
  }
}

}  // namespace lazyfuse
