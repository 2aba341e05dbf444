#include "ltc/prior_values.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>

#include <algorithm>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ltc/device_data.h"

namespace lazyfuse {
namespace {

// By the tensor's id, which LTC never reuses (an address may be). Both kept
// weakly: a link must never count as a reader of the data (buffer donation
// must still find the graph its only holder), nor keep a tensor alive.
struct Link {
  std::weak_ptr<torch::lazy::LazyTensor::Data> tensor;
  std::weak_ptr<torch::lazy::BackendData> prior;
};

std::mutex g_mutex;
std::unordered_map<int64_t, Link> g_links;
// Links of tensors that are gone are dropped when the table has grown past
// this, which then doubles the live ones.
size_t g_prune_at = 4096;

bool SameShape(const torch::lazy::LazyTensor& a, const torch::lazy::LazyTensor& b) {
  // shape() may own what it refers to: keep it for the comparison.
  const auto x = a.shape();
  const auto y = b.shape();
  return x.Get().scalar_type() == y.Get().scalar_type() && x.Get().sizes() == y.Get().sizes();
}

// The device data that is `tensor`'s value, if it has one: its handle, or
// the data its IR reads as it is (LTC gives a tensor with data a DeviceData
// node of it, and keeps both).
torch::lazy::BackendDataPtr ValueHeld(const torch::lazy::LazyTensor& tensor) {
  if (torch::lazy::BackendDataPtr handle = tensor.CurrentDataHandle()) {
    return handle;
  }
  const torch::lazy::Value ir = tensor.CurrentIrValue();
  const DeviceData* leaf = ir ? DeviceData::Cast(ir.node.get()) : nullptr;
  return leaf != nullptr ? leaf->data() : nullptr;
}

// Under g_mutex.
const Link* FindLink(const torch::lazy::LazyTensor& tensor) {
  auto found = g_links.find(tensor.data()->unique_id);
  if (found == g_links.end() || found->second.tensor.lock() != tensor.data()) {
    return nullptr;
  }
  return &found->second;
}

// Under g_mutex.
void PruneIfLarge() {
  if (g_links.size() < g_prune_at) {
    return;
  }
  for (auto it = g_links.begin(); it != g_links.end();) {
    it = it->second.tensor.expired() ? g_links.erase(it) : std::next(it);
  }
  g_prune_at = std::max<size_t>(4096, 2 * g_links.size());
}

}  // namespace

at::Tensor HeldValue(const at::Tensor& functional) {
  if (!functional.defined() || !functional.device().is_lazy() ||
      !at::functionalization::impl::isFunctionalTensor(functional)) {
    return at::Tensor();
  }
  return at::functionalization::impl::from_functional_tensor(functional);
}

void NoteWrittenValue(const at::Tensor& before, const at::Tensor& written) {
  const at::Tensor after = HeldValue(written);
  if (!before.defined() || !after.defined()) {
    return;
  }
  const torch::lazy::LazyTensorPtr old_tensor = torch::lazy::TryGetLtcTensor(before);
  if (old_tensor == nullptr) {
    return;
  }
  // The tensor's value, and its storage's base, which functionalization
  // makes its views from: two lazy tensors once the write is synced.
  auto* storage = static_cast<at::functionalization::FunctionalStorageImpl*>(
      written.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl());
  std::vector<torch::lazy::LazyTensorPtr> new_tensors;
  for (const at::Tensor& value : {after, storage->base()}) {
    torch::lazy::LazyTensorPtr tensor = torch::lazy::TryGetLtcTensor(value);
    if (tensor != nullptr && tensor != old_tensor && SameShape(*old_tensor, *tensor)) {
      new_tensors.push_back(std::move(tensor));
    }
  }
  if (new_tensors.empty()) {
    return;
  }
  std::weak_ptr<torch::lazy::BackendData> prior = ValueHeld(*old_tensor);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (prior.expired()) {
    const Link* link = FindLink(*old_tensor);
    if (link == nullptr) {
      return;  // made by the pending graph itself: it had no value before
    }
    prior = link->prior;
  }
  for (const torch::lazy::LazyTensorPtr& tensor : new_tensors) {
    g_links[tensor->data()->unique_id] = Link{tensor->data(), prior};
  }
  PruneIfLarge();
}

torch::lazy::BackendDataPtr PriorValue(const torch::lazy::LazyTensor& tensor) {
  return PriorValues({&tensor}).front();
}

std::vector<torch::lazy::BackendDataPtr> PriorValues(
    const std::vector<const torch::lazy::LazyTensor*>& tensors) {
  std::vector<torch::lazy::BackendDataPtr> priors(tensors.size());
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_links.empty()) {
    return priors;
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Link* link = FindLink(*tensors[k]);
    torch::lazy::BackendDataPtr prior = link != nullptr ? link->prior.lock() : nullptr;
    if (prior != nullptr && prior->HasValue()) {
      priors[k] = std::move(prior);
    }
  }
  return priors;
}

void ForgetPriorValue(const torch::lazy::LazyTensor& tensor) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_links.erase(tensor.data()->unique_id);
}

void ForgetAllPriorValues() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_links.clear();
}

}  // namespace lazyfuse
