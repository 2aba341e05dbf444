#pragma once

// Step replay: a step's graph run again without its Python
// (lazyfuse.compile(fn, replay=True); python/lazyfuse/replay.py decides when).
//
// A capture watches one traced call of the step. It notes where each datum
// the step's graph reads came from: a tensor argument, a tensor alive before
// the call (a parameter, a gradient, optimizer state, a closed-over tensor),
// a random seed, or a value made during the call (a Python number, a host
// tensor moved to the lazy device). It also notes which tensors the graph's
// results went to. Two consecutive captures that agree make a record that
// replays: the graph runs on the data those same tensors hold now, with fresh
// seeds, and its results go back into them.
//
// Values made during the call are frozen by a record; two captures agree only
// if they made equal ones. A tensor is bound by identity, so a step that
// reads a new object each call (a new optimizer, a parameter replaced) never
// agrees with itself and stays traced.

#include <ATen/Tensor.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/lazy/backend/backend_data.h>
#include <torch/csrc/lazy/backend/lowering_context.h>
#include <torch/csrc/lazy/core/hash.h>
#include <torch/csrc/lazy/core/ir.h>
#include <torch/csrc/lazy/core/tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lazyfuse {

using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

inline WeakTensor NoTensor() {
  return WeakTensor(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>());
}
inline bool IsSet(const WeakTensor& tensor) {
  return tensor._unsafe_get_target() != c10::UndefinedTensorImpl::singleton();
}

// Where a datum the graph reads comes from on a replayed call.
enum class InputSource {
  kArgument,     // the lazy tensor argument `index`
  kTransfer,     // the host tensor argument `index`, moved to the device
  kLive,         // the tensor `live`, alive before the call
  kSeed,         // the `index`-th seed the call draws
  kHostTensor,   // `host`'s memory, moved to the device: a host tensor the
                 // step reads (a closed-over CPU tensor), read again each call
  kFrozen,       // `frozen`, made during the call (a Python number, say)
  kUnspecified,  // `frozen`, memory whose contents do not matter (empty())
};

// How a tensor lies in its memory.
struct HostLayout {
  at::ScalarType dtype = at::kFloat;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  bool operator==(const HostLayout& other) const {
    return dtype == other.dtype && offset == other.offset && sizes == other.sizes &&
           strides == other.strides;
  }
};

// A host tensor a step reads, found again on each call: eager reads the
// memory it holds then, and a tensor given new memory (`h.data = ...`,
// `h.set_(...)`) may leave the old alive in another view. A view made anew
// each call (`h[:3]`) is found through `owner`, the tensor it is a view of.
// Everything is held weakly, so no other object takes their addresses.
struct HostView {
  WeakTensor tensor = NoTensor();
  WeakTensor owner = NoTensor();
  bool through_owner = false;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
  HostLayout layout;  // of `tensor`
  HostLayout owner_layout;
};

struct RecordedInput {
  InputSource source = InputSource::kFrozen;
  size_t index = 0;
  WeakTensor live = NoTensor();
  // Set when `live` was the gradient of this parameter: a gradient is read
  // through its parameter, since zero_grad() makes a new one.
  WeakTensor grad_of = NoTensor();
  // `live` is read through its functional storage base (a view's base).
  bool via_base = false;
  torch::lazy::BackendDataPtr frozen;  // also a host tensor's value at capture
  HostView host;
  torch::lazy::Shape shape;
  // A live tensor the step's results replace: its old value is dead after a
  // replay, so the graph may write over it (buffer donation).
  bool rewritten = false;
  // The results replace its functional storage base too, which the graph
  // does not read. A parameter and its base come out of a step as one tensor
  // (runtime/result_aliases.h), held by two lazy tensors.
  bool base_rewritten = false;
  // The first op that reads it and the user's line that made it (frozen ones).
  std::string op;
  std::string call_site;
  // A live tensor's requires_grad: autograd records the traced call by it.
  bool requires_grad = false;
};

// Result `result` goes into `target`; `made_in_call`: the target was created
// during the captured call. The replay writes into that same object if it
// is still alive (a tensor the step stores somewhere): once freed, nothing
// can read it. A gradient goes to its parameter `grad_of`: a
// new one (after zero_grad(set_to_none=True)) becomes the parameter's .grad,
// as in a traced call, and an old one is updated in place.
struct RecordedWrite {
  size_t result = 0;
  WeakTensor target = NoTensor();
  bool made_in_call = false;
  WeakTensor grad_of = NoTensor();
  // The result the target's functional storage base took, when it is not
  // the target's own value (the target is a view, as every Parameter is).
  std::optional<size_t> base_result;
  // The target's requires_grad: a frozen parameter's optimizer step skips it.
  bool requires_grad = false;
  // Set when the target is this tensor argument and alone in its memory (see
  // OwnsItsMemory): bound by position, as the argument's reads are, so a
  // step that updates its argument in place replays for any tensor passed.
  std::optional<size_t> argument;
};

// The lazy tensor holding the functional storage base of `tensor`, or null.
torch::lazy::LazyTensorPtr LazyStorageBase(const at::Tensor& tensor);

// A returned tensor: result `index`, the tensor argument `index`, or a tensor
// that is neither, returned as it is on every replay.
struct RecordedReturn {
  enum class Kind { kResult, kArgument, kAsIs } kind = Kind::kAsIs;
  size_t index = 0;
  at::Tensor as_is;
  // An earlier returned tensor this one was (`return y, y`): the replay
  // returns that one again, one object as in a traced call.
  std::optional<size_t> same_as;
};

struct RecordedArgument {
  bool lazy = false;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::Device device = c10::Device(c10::kCPU);
  bool requires_grad = false;
  // The earlier argument whose data this one's was (the same tensor passed
  // twice): the graph reads that datum once, for both.
  std::optional<size_t> same_data_as;
  // Another live tensor that held this argument's data (a parameter passed
  // as its detach()): the step may read it directly, and the graph reads the
  // datum once, as the argument.
  WeakTensor shared_with = NoTensor();
  // The tensor passed. Pinned when both captures that agreed were passed that
  // same tensor: the step may read it another way too (a closure), so only
  // that tensor replays in this position (BindRepeatedTensors).
  WeakTensor captured_as = NoTensor();
  bool pinned = false;
  // A host argument the graph does not read, as it was: the step's Python
  // may have read it (`range(int(n))`, a branch), which a replay skips, so
  // it replays only for equal values.
  at::Tensor host_value;
};

struct StepRecord {
  // Why the captured call cannot be replayed; empty when it can.
  std::string not_replayable;
  torch::lazy::hash_t hash;
  torch::lazy::ComputationPtr computation;
  std::shared_ptr<torch::lazy::BackendDevice> device;
  std::vector<RecordedArgument> arguments;
  std::vector<RecordedInput> inputs;
  std::vector<RecordedWrite> writes;
  std::vector<RecordedReturn> returns;
  size_t seeds = 0;
};

// Hooks for the ops and the backend; each does nothing unless this thread is
// capturing.
bool Capturing();
// Whether the capture keeps `data`'s value as it is after the run (a frozen
// or unspecified input): a run must not write over it then.
bool CaptureFreezes(const torch::lazy::BackendDataPtr& data);
void NoteTransfer(const torch::lazy::BackendDataPtr& data, const at::Tensor& source);
void NoteUnspecified(const torch::lazy::BackendDataPtr& data);
void NoteScalar(const torch::lazy::BackendDataPtr& data);
void NoteSeed(const torch::lazy::BackendDataPtr& data);
// The graph about to run, in post-order: names the op that reads each datum.
void NoteGraph(c10::ArrayRef<const torch::lazy::Node*> post_order);
void NoteExecution(const torch::lazy::ComputationPtr& computation,
                   c10::ArrayRef<torch::lazy::BackendDataPtr> arguments,
                   c10::ArrayRef<torch::lazy::BackendDataPtr> results,
                   const torch::lazy::BackendDevice& device);
// The tensors a sync gave data: their handles, filled from the results.
void NoteSynced(const std::vector<torch::lazy::BackendDataPtr>& handles);
// Names the user's Python line for frozen values (the compile log's).
void SetCallSiteFunction(std::string (*call_site)());

// A seed for a random op, drawn from torch's default CPU generator, so
// torch.manual_seed makes traced and replayed runs draw the same numbers.
int64_t DrawSeed();

// Starts watching this thread's call: `arguments` are the call's tensor
// arguments, `live` every lazy tensor alive now.
void BeginCapture(const std::vector<at::Tensor>& arguments, const std::vector<at::Tensor>& live);
// Ends it once the call's graph ran: `live` are the lazy tensors alive now,
// `returned` the tensors the call returned.
std::shared_ptr<StepRecord> EndCapture(const std::vector<at::Tensor>& live,
                                       const std::vector<at::Tensor>& returned);
void AbortCapture();

// Why `next` differs from `previous` (so neither can stand for the other),
// naming the op and the user's line of a frozen value; empty when they agree.
// A host tensor the step reads must hold equal values in both, since a value
// the step's own Python changes is frozen. Once `previous` replays
// (`replaying`), a host tensor read from the same memory may have changed:
// the replays read it anew.
std::string Disagreement(const StepRecord& previous, const StepRecord& next, bool replaying);

// Binds what both captures read from the same tensor to that tensor: pins
// `next`'s arguments that `previous` was passed as the same tensor (a
// position whose tensor varied is bound by position), and freezes a host
// tensor's value unless both read it from the same memory.
void BindRepeatedTensors(const StepRecord& previous, StepRecord& next);

enum class ReplayStatus { kDone, kInputPending, kGuardFailed };
struct ReplayOutcome {
  ReplayStatus status = ReplayStatus::kDone;
  std::string why;
  std::vector<at::Tensor> returned;
};

// Runs the record's graph on the data its tensors hold now and writes the
// results back. Checks every guard before it runs anything: a failed one
// changes nothing. kInputPending: an input has pending IR (sync, then retry).
ReplayOutcome Replay(const StepRecord& record, const std::vector<at::Tensor>& arguments);

}  // namespace lazyfuse
