#include "lazyfuse/lazyfuse_backend_data.h"

#include <c10/util/Exception.h>

namespace lazyfuse {

LazyFuseBackendData::LazyFuseBackendData(torch::lazy::BackendDevice device,
                                         torch::lazy::Shape shape)
    : torch::lazy::BackendData(std::move(device), std::move(shape)) {}

LazyFuseBackendData::LazyFuseBackendData(torch::lazy::BackendDevice device,
                                         torch::lazy::Shape shape,
                                         at::Tensor value)
    : torch::lazy::BackendData(std::move(device), std::move(shape)), value_(std::move(value)) {}

void LazyFuseBackendData::Assign(const torch::lazy::BackendData& data) {
  const auto* other = dynamic_cast<const LazyFuseBackendData*>(&data);
  TORCH_CHECK(other != nullptr, "lazyfuse: cannot assign data from another LTC backend");
  value_ = other->value_;
}

const at::Tensor& LazyFuseBackendData::tensor() const {
  TORCH_CHECK(value_.defined(),
              "lazyfuse: reading data of shape ",
              shape().to_string(),
              " before the graph that produces it has run");
  return value_;
}

bool LazyFuseBackendData::is_host_scalar() const {
  return value_.defined() && value_.dim() == 0 && value_.is_cpu();
}

}  // namespace lazyfuse
