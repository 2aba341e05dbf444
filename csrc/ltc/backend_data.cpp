#include "ltc/backend_data.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstring>

#include "ltc/pending_run_failures.h"

namespace lazyfuse {
namespace {
std::atomic<long> g_failed_alive{0};
}  // namespace

const char* const LazyFuseBackendData::kNoValueForGood =
    "this tensor needs that failing step, so it has no value: reading it, or a graph that "
    "reads it, raises this error again. Later syncs do not run the failed graph again, so "
    "they raise nothing for it. Reassign the tensor to go on.";

LazyFuseBackendData::Pending::Pending(MakePending make,
                                      bool in_flight,
                                      std::shared_ptr<const std::atomic<bool>> failure_raised)
    : make(std::move(make)), in_flight(in_flight), failure_raised(std::move(failure_raised)) {}

LazyFuseBackendData::Pending::~Pending() {
  if (failure != nullptr) {
    g_failed_alive.fetch_sub(1, std::memory_order_relaxed);
  }
}

LazyFuseBackendData::LazyFuseBackendData(torch::lazy::BackendDevice device,
                                         torch::lazy::Shape shape)
    : torch::lazy::BackendData(std::move(device), std::move(shape)) {}

LazyFuseBackendData::LazyFuseBackendData(torch::lazy::BackendDevice device,
                                         torch::lazy::Shape shape,
                                         at::Tensor value)
    : torch::lazy::BackendData(std::move(device), std::move(shape)),
      // Device data is always contiguous. A tensor LTC hands out describes
      // its data with contiguous strides, and ATen composites that run on
      // bare lazy tensors change that description in place (rot90's
      // transpose_), so strided data (host data from a transposed tensor, a
      // view step's result) was read in the wrong order.
      value_(value.is_contiguous() ? std::move(value) : value.contiguous()) {}

LazyFuseBackendData::LazyFuseBackendData(torch::lazy::BackendDevice device,
                                         torch::lazy::Shape shape,
                                         MakePending pending,
                                         bool in_flight,
                                         std::shared_ptr<const std::atomic<bool>> failure_raised)
    : torch::lazy::BackendData(std::move(device), std::move(shape)),
      pending_(
          std::make_shared<Pending>(std::move(pending), in_flight, std::move(failure_raised))) {}

std::shared_ptr<LazyFuseBackendData> LazyFuseBackendData::Failed(torch::lazy::BackendDevice device,
                                                                 torch::lazy::Shape shape,
                                                                 std::exception_ptr failure,
                                                                 std::string explanation) {
  auto data = std::make_shared<LazyFuseBackendData>(std::move(device), std::move(shape));
  data->failure_ = std::move(failure);
  data->failure_explanation_ = std::move(explanation);
  g_failed_alive.fetch_add(1, std::memory_order_relaxed);
  return data;
}

long LazyFuseBackendData::FailedAlive() {
  return g_failed_alive.load(std::memory_order_relaxed);
}

LazyFuseBackendData::~LazyFuseBackendData() {
  if (failure_ != nullptr) {
    g_failed_alive.fetch_sub(1, std::memory_order_relaxed);
  }
}

const std::string& LazyFuseBackendData::failure_explanation() const {
  static const std::string pending_failure = kNoValueForGood;
  return failure_ != nullptr ? failure_explanation_ : pending_failure;
}

void LazyFuseBackendData::RaiseFailure() const {
  RaiseWithResultsPending(failure(), failure_explanation());
}

void LazyFuseBackendData::SetPrior(const torch::lazy::BackendDataPtr& prior) {
  if (pending()) {
    pending_->prior = prior;
  }
}

void LazyFuseBackendData::Assign(const torch::lazy::BackendData& data) {
  const auto* other = dynamic_cast<const LazyFuseBackendData*>(&data);
  TORCH_CHECK(other != nullptr, "lazyfuse: cannot assign data from another LTC backend");
  value_ = other->value_;
  pending_ = other->pending_;
  g_failed_alive.fetch_add((other->failure_ != nullptr ? 1 : 0) - (failure_ != nullptr ? 1 : 0),
                           std::memory_order_relaxed);
  failure_ = other->failure_;
  failure_explanation_ = other->failure_explanation_;
}

const at::Tensor& LazyFuseBackendData::tensor() const {
  if (failed()) {
    RaiseFailure();
  }
  if (!value_.defined() && pending_ != nullptr) {
    if (!pending_->value.defined()) {
      bool no_value_for_good = false;
      at::Tensor value;
      try {
        value = pending_->make(pending_->prior.lock(), &no_value_for_good);
      } catch (...) {
        if (no_value_for_good) {
          // Raised as it is this once; every later read raises it with the
          // explanation, and a sync gives the tensors reading it no value.
          pending_->failure = std::current_exception();
          pending_->make = nullptr;
          g_failed_alive.fetch_add(1, std::memory_order_relaxed);
        }
        throw;
      }
      pending_->value = value.is_contiguous() ? std::move(value) : value.contiguous();
      pending_->make = nullptr;  // lets go of what it read from
    }
    value_ = pending_->value;
    pending_ = nullptr;
  }
  TORCH_CHECK(!let_go_,
              "lazyfuse: reading data of shape ",
              shape().to_string(),
              " that a graph was given (buffer donation) and let go of; the tensor that "
              "held it has the graph's result instead");
  TORCH_CHECK(value_.defined(),
              "lazyfuse: reading data of shape ",
              shape().to_string(),
              " before the graph that produces it has run");
  return value_;
}

void LazyFuseBackendData::LetGo() {
  value_ = at::Tensor();
  pending_ = nullptr;
  let_go_ = true;
}

const void* LazyFuseBackendData::value_identity() const {
  if (value_.defined()) {
    return value_.unsafeGetTensorImpl();
  }
  if (pending_ != nullptr && pending_->value.defined()) {
    return pending_->value.unsafeGetTensorImpl();
  }
  if (failure_ != nullptr) {
    return this;
  }
  return pending_.get();
}

at::Tensor CopyHostScalar(const at::Tensor& scalar) {
  TORCH_CHECK(scalar.dim() == 0 && scalar.is_cpu(), "lazyfuse: expected a 0-dim CPU tensor");
  at::Tensor copy = at::detail::empty_cpu({}, scalar.scalar_type());
  std::memcpy(copy.mutable_data_ptr(), scalar.const_data_ptr(), scalar.element_size());
  copy.unsafeGetTensorImpl()->set_wrapped_number(scalar.unsafeGetTensorImpl()->is_wrapped_number());
  return copy;
}

bool LazyFuseBackendData::is_wrapped_number() const {
  // A pending result is never a wrapped number; asking must not finish it.
  return value_.defined() && value_.dim() == 0 && value_.is_cpu() &&
         value_.unsafeGetTensorImpl()->is_wrapped_number();
}

bool LazyFuseBackendData::is_host_scalar() const {
  if (shape().dim() != 0 || failed()) {
    return false;  // answered without making a pending value
  }
  if (pending_ != nullptr) {
    tensor();
  }
  return value_.defined() && value_.dim() == 0 && value_.is_cpu();
}

}  // namespace lazyfuse
