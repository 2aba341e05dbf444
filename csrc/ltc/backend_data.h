#pragma once

// Data on the backing device. A value is either a contiguous at::Tensor on
// the backing device, or a host scalar: a 0-dim CPU tensor. Host scalars (learning rates,
// loss scales, alpha arguments) are read with item() on the host, so they
// never force a device sync, and as graph parameters their value never
// enters the graph hash.

#include <ATen/Tensor.h>
#include <torch/csrc/lazy/backend/backend_data.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace lazyfuse {

class LazyFuseBackendData : public torch::lazy::BackendData {
 public:
  // A placeholder, filled in by Assign() once the graph producing it ran.
  LazyFuseBackendData(torch::lazy::BackendDevice device, torch::lazy::Shape shape);
  LazyFuseBackendData(torch::lazy::BackendDevice device,
                      torch::lazy::Shape shape,
                      at::Tensor value);
  // A value made on its first read by `pending`, again on the next read if
  // it fails: a result of a graph that failed after it had overwritten some
  // of its parameters (`pending` finishes the graph), a result of a graph
  // running on the CPU stream (`in_flight`; `pending` waits for it), or a
  // view's base kept as a function of the view (runtime/result_aliases.h).
  // `pending` is given the data set by SetPrior, or nullptr, and sets
  // `*no_value_for_good` before it raises a failure that a read would meet
  // again (its result needs the step that failed on its inputs' values, and
  // there is no earlier value to give): the data then has no value for good,
  // as Failed() data does. `failure_raised`, if given, says whether the run
  // making the value failed on its inputs' values and that failure was raised.
  using MakePending =
      std::function<at::Tensor(const torch::lazy::BackendDataPtr& prior, bool* no_value_for_good)>;
  LazyFuseBackendData(torch::lazy::BackendDevice device,
                      torch::lazy::Shape shape,
                      MakePending pending,
                      bool in_flight = false,
                      std::shared_ptr<const std::atomic<bool>> failure_raised = nullptr);

  // No value, for good: the step of the graph that would have made it
  // failed on its inputs' values, and that failure was raised. Each read, and
  // each graph that reads it, raises `failure` again, followed by
  // `explanation`; a later sync does not run that graph again.
  static std::shared_ptr<LazyFuseBackendData> Failed(torch::lazy::BackendDevice device,
                                                     torch::lazy::Shape shape,
                                                     std::exception_ptr failure,
                                                     std::string explanation);
  // What a read of data with no value for good says after the failure.
  static const char* const kNoValueForGood;
  // How many data with no value for good are alive: while none is, no sync
  // looks for them.
  static long FailedAlive();
  ~LazyFuseBackendData() override;

  Handle GetHandle() override {
    return reinterpret_cast<Handle>(this);
  }
  void Assign(const torch::lazy::BackendData& data) override;
  bool HasValue() const override {
    return value_.defined() || pending_ != nullptr || failure_ != nullptr;
  }
  // Whether the data has no value for good: Failed() data, or a pending
  // value whose making met such a failure.
  bool failed() const {
    return failure_ != nullptr || (pending_ != nullptr && pending_->failure != nullptr);
  }
  // Raises the failure of data with no value for good.
  [[noreturn]] void RaiseFailure() const;
  const std::exception_ptr& failure() const {
    return failure_ != nullptr || pending_ == nullptr ? failure_ : pending_->failure;
  }
  const std::string& failure_explanation() const;

  const at::Tensor& tensor() const;
  // Drops the value: a graph given this memory (buffer donation) reads it
  // no more, and the tensor holding this data gets the graph's result
  // instead. Reading it afterwards raises.
  void LetGo();
  // A pending value's tensor held `prior` before the graph that makes the
  // value (ltc/prior_values.h): if that graph fails, the value may be undone
  // to it. Shared by the data assigned from this one. Kept weakly: a failed
  // run holds its arguments, and a finished one must free them.
  void SetPrior(const torch::lazy::BackendDataPtr& prior);
  // Whether the value waits for its first read to be made.
  bool pending() const {
    return !value_.defined() && pending_ != nullptr && !pending_->value.defined() &&
           pending_->failure == nullptr;
  }
  // Whether the value is a result of a graph the CPU stream runs, not yet read.
  bool in_flight() const {
    return pending() && pending_->in_flight;
  }
  // Whether the value waits for a run whose failure was raised already: made
  // now, it is a value, one from before that run, or none for good.
  bool awaits_failed_run() const {
    return pending() && pending_->failure_raised != nullptr && pending_->failure_raised->load();
  }
  // Tells data apart by value without making a pending one: data assigned
  // from the same result answer the same.
  const void* value_identity() const;
  bool is_host_scalar() const;
  // A host scalar holding a Python number or Scalar argument, which type
  // promotion ranks below tensors of its category (BufferInfo::wrapped_number).
  bool is_wrapped_number() const;

 private:
  // A pending value, shared by the data assigned from it, so that it is made
  // once, as one tensor, whichever of them is read first.
  struct Pending {
    Pending(MakePending make,
            bool in_flight,
            std::shared_ptr<const std::atomic<bool>> failure_raised);
    ~Pending();
    MakePending make;
    at::Tensor value;
    bool in_flight = false;
    std::shared_ptr<const std::atomic<bool>> failure_raised;
    std::weak_ptr<torch::lazy::BackendData> prior;
    std::exception_ptr failure;  // no value for good: what making it raised
  };
  // Filled from pending_ on the first read. LTC reads device data from the
  // thread that traces, as it does every tensor's data.
  mutable at::Tensor value_;
  mutable std::shared_ptr<Pending> pending_;
  bool let_go_ = false;
  std::exception_ptr failure_;
  std::string failure_explanation_;
};

// A copy of a 0-dim CPU value, made without the dispatcher (it runs for
// every scalar operand while tracing), so a later in-place write to the
// source never reaches a graph. Python numbers keep the wrapped-number flag
// that gives them Python type promotion (float_tensor * 2 stays float).
at::Tensor CopyHostScalar(const at::Tensor& scalar);

}  // namespace lazyfuse
