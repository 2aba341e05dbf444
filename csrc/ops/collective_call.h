#pragma once

// How a recorded collective runs (ops/collectives.h): the step calls the
// same op again, on backing-device tensors, with the process group found by
// name.

#include <ATen/core/stack.h>
#include <torch/csrc/lazy/core/shape.h>

#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <unordered_map>
#include <vector>

#include "program/program.h"

namespace lazyfuse {

// How a collective uses one of its tensor arguments.
enum class Use {
  kRead,       // an input: allgather_'s input_tensors
  kReadWrite,  // reduced or broadcast in place: allreduce_'s tensors
  kWrite,      // an output whose old value nobody reads: allgather_'s output_tensors
  kDispatch,   // there only to pick the kernel: barrier's tensor
};

// A tensor argument, flattened: a Tensor, a Tensor[] or a Tensor[][] (rows).
struct TensorArgument {
  size_t position = 0;
  Use use = Use::kRead;
  int depth = 0;
  std::vector<size_t> rows;
  size_t count = 0;
  // Empty once recorded: a cached step must not keep the user's tensors alive.
  std::vector<at::Tensor> tensors;
};

TensorArgument Flatten(size_t position, Use use, const c10::IValue& value);

// What a step needs to call the op again on the backing device, for this
// graph and every later one with the same hash.
struct CollectiveCall {
  std::string op;
  std::string overload;
  // The call's arguments with its tensors left out; the process group is
  // found again by name when the step runs (a group re-created under the
  // same name serves a cached graph).
  torch::jit::Stack arguments;
  std::optional<size_t> group_position;
  std::string group_name;
  std::vector<TensorArgument> tensors;    // structure only, tensors cleared
  std::vector<torch::lazy::Shape> fresh;  // kWrite and kDispatch tensors, in order
  bool functional = false;
};

// The step attribute naming the process group of a collective that takes one.
inline constexpr const char* kGroupAttr = "group";

// The process groups of a graph's collectives, found by name when mark_step
// handed the graph to the CPU stream. The run uses them, not the groups that
// hold those names when it gets there, so a group destroyed (or re-created)
// in the meantime does not change what the graph's collectives do: they run
// as eager's would have, when they were called.
struct CollectiveGroups {
  std::unordered_map<std::string, c10::intrusive_ptr<c10d::ProcessGroup>> by_name;
};

// The groups of `program`'s collectives, if they may run on another thread;
// nullptr if one may not. They may when each names a Gloo group that exists:
// Gloo runs in C++ threads that never take the GIL, and a group implemented
// in Python would. A functional collective (_c10d_functional) finds its
// group by name in torch's own kernel, so a graph that holds one stays on the
// calling thread.
std::shared_ptr<const CollectiveGroups> GroupsForAnotherThread(const Program& program);

// While it lives, collectives on this thread use `groups` (see above).
class UseCollectiveGroups {
 public:
  explicit UseCollectiveGroups(const CollectiveGroups* groups);
  ~UseCollectiveGroups();
  UseCollectiveGroups(const UseCollectiveGroups&) = delete;
  UseCollectiveGroups& operator=(const UseCollectiveGroups&) = delete;

 private:
  const CollectiveGroups* previous_;
};

// Runs `call` on the step's inputs: the written tensors come back in order,
// then the op's own results (a functional collective's), then the token.
std::vector<at::Tensor> RunCollective(const CollectiveCall& call, KernelArgs& args);

}  // namespace lazyfuse
