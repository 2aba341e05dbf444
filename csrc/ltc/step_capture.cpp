// Capturing a traced call for step replay (see step_replay.h).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/Functions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/backend/backend_interface.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ltc/backend_data.h"
#include "ltc/device_data.h"
#include "ltc/graph_executor.h"
#include "ltc/replay_binding.h"
#include "ltc/step_replay.h"

namespace lazyfuse {
namespace {

using DataKey = const torch::lazy::BackendData*;

// What this thread's capture has seen so far. Data are held strongly while
// the call runs, so an address freed and reused mid-call is never mistaken
// for another datum.
struct Capture {
  bool active = false;
  std::unordered_map<DataKey, size_t> argument_data;
  std::unordered_map<const c10::TensorImpl*, size_t> host_arguments;
  // The host arguments, with their version counters when the call began
  // (none for an inference tensor, which counts no versions).
  struct HostArgument {
    size_t index;
    at::Tensor tensor;
    std::optional<int64_t> version;
  };
  std::vector<HostArgument> host_tensors;
  std::unordered_map<const c10::TensorImpl*, size_t> argument_impls;
  std::unordered_map<DataKey, WeakTensor> live_data;
  std::unordered_map<DataKey, WeakTensor> live_bases;
  std::unordered_set<const c10::TensorImpl*> live_before;
  std::unordered_map<const c10::TensorImpl*, WeakTensor> grad_owner;
  std::unordered_map<DataKey, size_t> transfers;  // to the host argument's index
  // Other host tensors moved to the device, with their version counters then
  // (none for an inference tensor).
  struct HostSource {
    at::Tensor tensor;
    std::optional<int64_t> version;
  };
  std::unordered_map<DataKey, HostSource> host_sources;
  std::unordered_set<DataKey> unspecified;
  std::unordered_map<DataKey, std::string> call_sites;
  std::unordered_map<DataKey, size_t> seeds;
  std::unordered_map<DataKey, std::string> readers;
  std::vector<torch::lazy::BackendDataPtr> held;
  std::vector<RecordedArgument> arguments;
  size_t executions = 0;
  torch::lazy::hash_t hash;
  torch::lazy::ComputationPtr computation;
  std::shared_ptr<torch::lazy::BackendDevice> device;
  std::vector<torch::lazy::BackendDataPtr> graph_arguments;
  std::vector<torch::lazy::BackendDataPtr> graph_results;
  // The data of the tensors the sync computed, by result.
  std::unordered_map<DataKey, size_t> synced;
};
thread_local Capture t_capture;

std::string (*g_call_site)() = nullptr;

void Hold(const torch::lazy::BackendDataPtr& data) {
  t_capture.held.push_back(data);
}

RecordedInput ClassifyInput(const Capture& capture, const torch::lazy::BackendDataPtr& data) {
  const DataKey key = data.get();
  RecordedInput input;
  input.shape = data->shape();
  auto reader = capture.readers.find(key);
  if (reader != capture.readers.end()) {
    input.op = reader->second;
  }
  auto site = capture.call_sites.find(key);
  if (site != capture.call_sites.end()) {
    input.call_site = site->second;
  }
  if (auto it = capture.argument_data.find(key); it != capture.argument_data.end()) {
    input.source = InputSource::kArgument;
    input.index = it->second;
  } else if (auto it = capture.live_data.find(key); it != capture.live_data.end()) {
    input.source = InputSource::kLive;
    input.live = it->second;
    auto owner = capture.grad_owner.find(input.live._unsafe_get_target());
    if (owner != capture.grad_owner.end()) {
      input.grad_of = owner->second;
    }
  } else if (auto it = capture.live_bases.find(key); it != capture.live_bases.end()) {
    input.source = InputSource::kLive;
    input.live = it->second;
    input.via_base = true;
  } else if (auto it = capture.seeds.find(key); it != capture.seeds.end()) {
    input.source = InputSource::kSeed;
    input.index = it->second;
  } else if (auto it = capture.transfers.find(key); it != capture.transfers.end()) {
    input.source = InputSource::kTransfer;
    input.index = it->second;
  } else if (capture.unspecified.count(key) != 0) {
    input.source = InputSource::kUnspecified;
    input.frozen = data;
  } else if (auto it = capture.host_sources.find(key); it != capture.host_sources.end()) {
    // A tensor the step updated in place after reading it is frozen: a
    // replay, which runs none of the step's Python, must not read it anew.
    const auto& [tensor, version] = it->second;
    input.source =
        version && tensor._version() != *version ? InputSource::kFrozen : InputSource::kHostTensor;
    input.frozen = data;
    input.host = HostViewOf(tensor);
  } else {
    input.source = InputSource::kFrozen;
    input.frozen = data;
  }
  return input;
}

// A live tensor that is not an argument but holds an argument's data.
void NoteSharedWithArgument(const at::Tensor& tensor) {
  torch::lazy::LazyTensorPtr lazy = torch::lazy::TryGetLtcTensor(tensor);
  torch::lazy::BackendDataPtr data = lazy ? lazy->CurrentDataHandle() : nullptr;
  auto argument = data ? t_capture.argument_data.find(data.get()) : t_capture.argument_data.end();
  if (argument != t_capture.argument_data.end() &&
      t_capture.argument_impls.count(tensor.unsafeGetTensorImpl()) == 0) {
    t_capture.arguments[argument->second].shared_with = WeakTensor(tensor.getIntrusivePtr());
  }
}

// Maps each gradient among `live` to its parameter.
void NoteGradOwners(const std::vector<at::Tensor>& live,
                    std::unordered_map<const c10::TensorImpl*, WeakTensor>* owners) {
  for (const at::Tensor& tensor : live) {
    if (tensor.requires_grad() && tensor.is_leaf() && tensor.grad().defined()) {
      owners->emplace(tensor.grad().unsafeGetTensorImpl(), WeakTensor(tensor.getIntrusivePtr()));
    }
  }
}

}  // namespace

torch::lazy::LazyTensorPtr LazyStorageBase(const at::Tensor& tensor) {
  if (!tensor.defined() || !at::functionalization::impl::isFunctionalTensor(tensor)) {
    return nullptr;
  }
  auto* storage = static_cast<at::functionalization::FunctionalStorageImpl*>(
      tensor.storage().unsafeGetStorageImpl());
  return torch::lazy::TryGetLtcTensor(storage->base());
}

bool Capturing() {
  return t_capture.active;
}

bool CaptureFreezes(const torch::lazy::BackendDataPtr& data) {
  if (!t_capture.active) {
    return false;
  }
  const InputSource source = ClassifyInput(t_capture, data).source;
  return source == InputSource::kFrozen || source == InputSource::kUnspecified ||
         source == InputSource::kHostTensor;
}

void NoteTransfer(const torch::lazy::BackendDataPtr& data, const at::Tensor& source) {
  if (!t_capture.active) {
    return;
  }
  Hold(data);
  auto it = t_capture.host_arguments.find(source.unsafeGetTensorImpl());
  if (it != t_capture.host_arguments.end()) {
    t_capture.transfers[data.get()] = it->second;
    return;
  }
  // A later note of the same datum names the tensor the user moved, where
  // the first named its cast.
  t_capture.host_sources[data.get()] = {
      source, source.is_inference() ? std::nullopt : std::make_optional(source._version())};
  if (g_call_site != nullptr) {
    t_capture.call_sites[data.get()] = g_call_site();
  }
}

void NoteUnspecified(const torch::lazy::BackendDataPtr& data) {
  if (t_capture.active) {
    Hold(data);
    t_capture.unspecified.insert(data.get());
  }
}

void NoteScalar(const torch::lazy::BackendDataPtr& data) {
  if (t_capture.active && g_call_site != nullptr) {
    Hold(data);
    t_capture.call_sites.emplace(data.get(), g_call_site());
  }
}

void NoteSeed(const torch::lazy::BackendDataPtr& data) {
  if (t_capture.active) {
    Hold(data);
    t_capture.seeds.emplace(data.get(), t_capture.seeds.size());
  }
}

void NoteGraph(c10::ArrayRef<const torch::lazy::Node*> post_order) {
  if (!t_capture.active) {
    return;
  }
  for (const torch::lazy::Node* node : post_order) {
    for (const torch::lazy::Output& operand : node->operands()) {
      if (const DeviceData* leaf = DeviceData::Cast(operand.node)) {
        t_capture.readers.emplace(leaf->data().get(), node->op().ToString());
      }
    }
  }
}

void NoteExecution(const torch::lazy::ComputationPtr& computation,
                   c10::ArrayRef<torch::lazy::BackendDataPtr> arguments,
                   c10::ArrayRef<torch::lazy::BackendDataPtr> results,
                   const torch::lazy::BackendDevice& device) {
  if (!t_capture.active) {
    return;
  }
  ++t_capture.executions;
  t_capture.hash = PendingGraphHash();
  t_capture.computation = computation;
  t_capture.device = std::make_shared<torch::lazy::BackendDevice>(device);
  t_capture.graph_arguments = arguments.vec();
  t_capture.graph_results = results.vec();
}

void NoteSynced(const std::vector<torch::lazy::BackendDataPtr>& handles) {
  if (!t_capture.active || t_capture.graph_results.empty()) {
    return;
  }
  // LTC fills each synced tensor's placeholder with a result's value: match
  // them by the value (its tensor, or the pending value both share).
  // Results that are one tensor (identical aliases, runtime/result_aliases.h) go to
  // the handles in order, so that a replay gives each its own data again.
  std::unordered_map<const void*, std::vector<size_t>> by_value;
  for (size_t i = 0; i < t_capture.graph_results.size(); ++i) {
    const auto* result = dynamic_cast<const LazyFuseBackendData*>(t_capture.graph_results[i].get());
    if (result != nullptr && result->HasValue()) {
      by_value[result->value_identity()].push_back(i);
    }
  }
  std::unordered_map<const void*, size_t> taken;
  for (const auto& handle : handles) {
    const auto* data = dynamic_cast<const LazyFuseBackendData*>(handle.get());
    if (data == nullptr || !data->HasValue()) {
      continue;
    }
    auto it = by_value.find(data->value_identity());
    if (it != by_value.end()) {
      size_t& next = taken[it->first];
      Hold(handle);
      t_capture.synced.emplace(handle.get(), it->second[std::min(next, it->second.size() - 1)]);
      ++next;
    }
  }
}

void SetCallSiteFunction(std::string (*call_site)()) {
  g_call_site = call_site;
}

int64_t DrawSeed() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  // Non-negative, so it round-trips through a Long host scalar.
  return static_cast<int64_t>(at::check_generator<at::CPUGeneratorImpl>(gen)->random64() >> 1);
}

void BeginCapture(const std::vector<at::Tensor>& arguments, const std::vector<at::Tensor>& live) {
  t_capture = Capture();
  t_capture.active = true;
  for (size_t k = 0; k < arguments.size(); ++k) {
    const at::Tensor& argument = arguments[k];
    RecordedArgument meta;
    meta.dtype = argument.scalar_type();
    meta.sizes = argument.sizes().vec();
    meta.device = argument.device();
    meta.requires_grad = argument.requires_grad();
    meta.captured_as = WeakTensor(argument.getIntrusivePtr());
    t_capture.argument_impls.emplace(argument.unsafeGetTensorImpl(), k);
    // Alive before the call, whether or not `live` lists it (a periodic
    // check lists only the record's tensors).
    t_capture.live_before.insert(argument.unsafeGetTensorImpl());
    if (torch::lazy::LazyTensorPtr lazy = torch::lazy::TryGetLtcTensor(argument)) {
      meta.lazy = true;
      if (torch::lazy::BackendDataPtr data = lazy->CurrentDataHandle()) {
        Hold(data);
        if (auto [first, fresh] = t_capture.argument_data.emplace(data.get(), k); !fresh) {
          meta.same_data_as = first->second;
        }
      }
    } else {
      meta.strides = argument.strides().vec();
      t_capture.host_arguments.emplace(argument.unsafeGetTensorImpl(), k);
      t_capture.host_tensors.push_back(
          {k,
           argument,
           argument.is_inference() ? std::nullopt : std::make_optional(argument._version())});
    }
    t_capture.arguments.push_back(std::move(meta));
  }
  NoteGradOwners(live, &t_capture.grad_owner);
  for (const at::Tensor& tensor : live) {
    t_capture.live_before.insert(tensor.unsafeGetTensorImpl());
    NoteSharedWithArgument(tensor);
    // A view is read through its base: binding the view itself would read a
    // value functionalization may be about to regenerate.
    torch::lazy::LazyTensorPtr lazy = torch::lazy::TryGetLtcTensor(tensor);
    torch::lazy::BackendDataPtr data = lazy ? lazy->CurrentDataHandle() : nullptr;
    if (data != nullptr) {
      Hold(data);
      t_capture.live_data.emplace(data.get(), WeakTensor(tensor.getIntrusivePtr()));
    }
    // Ops on a view that functionalization regenerates read its base.
    torch::lazy::LazyTensorPtr base = LazyStorageBase(tensor);
    torch::lazy::BackendDataPtr base_data = base ? base->CurrentDataHandle() : nullptr;
    if (base_data != nullptr && base_data != data) {
      Hold(base_data);
      t_capture.live_bases.emplace(base_data.get(), WeakTensor(tensor.getIntrusivePtr()));
    }
  }
}

void AbortCapture() {
  t_capture = Capture();
}

std::shared_ptr<StepRecord> EndCapture(const std::vector<at::Tensor>& live,
                                       const std::vector<at::Tensor>& returned) {
  TORCH_CHECK(t_capture.active, "lazyfuse: EndCapture without BeginCapture");
  Capture capture = std::move(t_capture);
  t_capture = Capture();
  auto record = std::make_shared<StepRecord>();
  record->arguments = capture.arguments;
  if (capture.executions != 1) {
    record->not_replayable =
        capture.executions == 0
            ? "the call computed nothing on the lazy device"
            : "the call ran " + std::to_string(capture.executions) +
                  " graphs: something read a lazy value before the step ended (.item(), "
                  ".cpu(), print, a tensor in an if); a replayed step must be one graph";
    return record;
  }
  for (const auto& [k, argument, version] : capture.host_tensors) {
    if (version && argument._version() != *version) {
      record->not_replayable =
          "the step updates tensor argument " + std::to_string(k) + " in place on the " +
          argument.device().str() +
          ", which a replay would not do: it runs the lazy graph, not the step's Python. "
          "Keep that tensor on the lazy device, or update it outside the step";
      return record;
    }
  }
  record->hash = capture.hash;
  record->computation = capture.computation;
  record->device = capture.device;
  for (const auto& data : capture.graph_arguments) {
    record->inputs.push_back(ClassifyInput(capture, data));
    RecordedInput& input = record->inputs.back();
    if (input.source == InputSource::kLive) {
      const at::Tensor tensor = BoundTensor(input);
      input.requires_grad = tensor.defined() && tensor.requires_grad();
    }
  }
  record->seeds = capture.seeds.size();
  std::unordered_set<size_t> moved;  // host arguments the graph reads
  for (const RecordedInput& input : record->inputs) {
    if (input.source == InputSource::kTransfer) {
      moved.insert(input.index);
    }
  }
  for (const auto& [k, argument, version] : capture.host_tensors) {
    if (moved.count(k) == 0) {
      record->arguments[k].host_value = argument.clone();
    }
  }
  const std::unordered_map<DataKey, size_t>& result_index = capture.synced;
  std::unordered_set<const c10::TensorImpl*> returned_new;
  std::unordered_map<const c10::TensorImpl*, size_t> returned_at;
  for (const at::Tensor& tensor : returned) {
    RecordedReturn entry;
    if (auto [earlier, fresh] =
            returned_at.emplace(tensor.unsafeGetTensorImpl(), record->returns.size());
        !fresh) {
      entry.same_as = earlier->second;
      record->returns.push_back(std::move(entry));
      continue;
    }
    torch::lazy::LazyTensorPtr lazy = torch::lazy::TryGetLtcTensor(tensor);
    torch::lazy::BackendDataPtr data = lazy ? lazy->CurrentDataHandle() : nullptr;
    auto argument = capture.argument_impls.find(tensor.unsafeGetTensorImpl());
    if (data != nullptr && result_index.count(data.get()) != 0) {
      entry.kind = RecordedReturn::Kind::kResult;
      entry.index = result_index.at(data.get());
      if (capture.live_before.count(tensor.unsafeGetTensorImpl()) == 0) {
        returned_new.insert(tensor.unsafeGetTensorImpl());
      }
    } else if (argument != capture.argument_impls.end()) {
      entry.kind = RecordedReturn::Kind::kArgument;
      entry.index = argument->second;
    } else {
      entry.as_is = tensor;
    }
    record->returns.push_back(std::move(entry));
  }
  std::unordered_map<const c10::TensorImpl*, WeakTensor> grad_owner_after;
  NoteGradOwners(live, &grad_owner_after);
  std::unordered_set<const c10::TensorImpl*> written;
  std::unordered_set<const c10::StorageImpl*> updated_storages;  // of tensors alive before
  for (const at::Tensor& tensor : live) {
    const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
    torch::lazy::LazyTensorPtr lazy = torch::lazy::TryGetLtcTensor(tensor);
    torch::lazy::BackendDataPtr data = lazy ? lazy->CurrentDataHandle() : nullptr;
    auto result = data ? result_index.find(data.get()) : result_index.end();
    if (result == result_index.end() || returned_new.count(impl) != 0 ||
        !written.insert(impl).second) {
      continue;
    }
    RecordedWrite write;
    write.result = result->second;
    write.target = WeakTensor(tensor.getIntrusivePtr());
    write.made_in_call = capture.live_before.count(impl) == 0;
    write.requires_grad = tensor.requires_grad();
    torch::lazy::LazyTensorPtr base = LazyStorageBase(tensor);
    torch::lazy::BackendDataPtr base_data = base ? base->CurrentDataHandle() : nullptr;
    if (base_data != nullptr && base_data != data && result_index.count(base_data.get()) != 0) {
      write.base_result = result_index.at(base_data.get());
    }
    if (auto owner = grad_owner_after.find(impl); owner != grad_owner_after.end()) {
      write.grad_of = owner->second;
    }
    if (auto argument = capture.argument_impls.find(impl);
        argument != capture.argument_impls.end() && !IsSet(write.grad_of) &&
        OwnsItsMemory(tensor)) {
      write.argument = argument->second;
    }
    if (!write.made_in_call && tensor.has_storage()) {
      updated_storages.insert(tensor.storage().unsafeGetStorageImpl());
    }
    record->writes.push_back(std::move(write));
  }
  // A view shares its base's storage (functionalization's). A traced call's
  // view follows the tensor's later updates; a replay's result could not.
  for (size_t r = 0; r < returned.size(); ++r) {
    const at::Tensor& tensor = returned[r];
    if (tensor.has_storage() && capture.live_before.count(tensor.unsafeGetTensorImpl()) == 0 &&
        updated_storages.count(tensor.storage().unsafeGetStorageImpl()) != 0) {
      record->not_replayable =
          "returned tensor " + std::to_string(r) +
          " is a view of a tensor the step updates (such as a parameter's detach(), t() or a "
          "slice of it), which later steps' updates reach; a replay returns new tensors, which "
          "they would not. Return a copy of it (.clone()) instead";
      return record;
    }
  }
  // By target the step rewrites: whether it rewrites the target's base too.
  std::unordered_map<const c10::TensorImpl*, bool> rewritten;
  for (const RecordedWrite& write : record->writes) {
    if (!write.made_in_call) {
      rewritten[write.target._unsafe_get_target()] = write.base_result.has_value();
    }
  }
  std::unordered_set<const c10::TensorImpl*> read_via_base;
  for (const RecordedInput& input : record->inputs) {
    if (input.source == InputSource::kLive && input.via_base) {
      read_via_base.insert(input.live._unsafe_get_target());
    }
  }
  for (RecordedInput& input : record->inputs) {
    const c10::TensorImpl* impl = input.live._unsafe_get_target();
    auto found = input.source == InputSource::kLive ? rewritten.find(impl) : rewritten.end();
    input.rewritten = found != rewritten.end();
    input.base_rewritten = input.rewritten && found->second && read_via_base.count(impl) == 0;
  }
  // The order the caller listed live tensors in is not the graph's.
  std::sort(record->writes.begin(), record->writes.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.result, a.made_in_call, a.target._unsafe_get_target()) <
           std::make_tuple(b.result, b.made_in_call, b.target._unsafe_get_target());
  });
  return record;
}

}  // namespace lazyfuse
