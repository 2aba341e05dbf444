#pragma once

// A replayed step whose memory stays put from one call to the next, so that
// one CUDA graph captured around Run() can stand for the whole step
// (python/lazyfuse/replay.py captures it with torch.cuda.graph, which
// records every kernel and ATen call Run() makes on the current stream).
//
// A graph reads and writes the addresses it was captured with, so:
// - the call's tensor arguments are copied into buffers of the step's own
//   before each launch (Bind);
// - a tensor the step updates keeps its memory: Run() copies the result
//   into it, inside the graph, where a replay would hand it the result;
// - a result with no such home (a new gradient, a returned loss) is copied
//   out after each launch (Finish), as the next launch writes over it;
// - Bind checks before each launch that every tensor the step binds still
//   holds the memory it held at capture, and that nothing else holds memory
//   a launch writes over (a kept `p.detach()`). A failed check drops the
//   graph; the call replays as usual.
// A step that draws random numbers is never one graph: its seeds are host
// scalars, which a graph would freeze.

#include <ATen/Tensor.h>
#include <torch/csrc/lazy/backend/backend_data.h>
#include <torch/csrc/lazy/core/tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "ltc/step_replay.h"

namespace lazyfuse {

class StaticStep {
 public:
  // Binds the record's inputs as a replay would. Null, with `why`, when the
  // step cannot run on static memory now.
  static std::shared_ptr<StaticStep> Plan(std::shared_ptr<const StepRecord> record,
                                          const std::vector<at::Tensor>& arguments,
                                          std::string* why);

  // Checks the guards and copies the call's arguments into the step's
  // buffers. False, with `why`, when this call must replay as usual.
  bool Bind(const std::vector<at::Tensor>& arguments, std::string* why);
  // Runs the graph on the bound memory and copies each result home. The
  // first run also checks that the results can go home (nothing of
  // this call is written before that): false, with why(), when not.
  bool Run();
  // After a run or a graph launch: the results with no home are copied out
  // into their tensors; returns what the call returns.
  std::vector<at::Tensor> Finish(const std::vector<at::Tensor>& arguments);
  const std::string& why() const {
    return why_;
  }

 private:
  // Memory the step updates in place: `data`, held by the lazy tensors of
  // `holders` (a tensor and its storage base may share it), gets `result`.
  struct Home {
    torch::lazy::BackendDataPtr data;
    size_t result = 0;
    std::vector<c10::weak_intrusive_ptr<torch::lazy::LazyTensor>> holders;
    long use_count = 0;  // the holders' and this step's references, no others
  };
  // Where each write's result goes: the index of a home, or none (copied out).
  struct WriteHomes {
    long target = -1;
    long base = -1;
    // The lazy tensors the write went to at capture: a write goes to the
    // tensor that holds its home, checked before each launch (the user may
    // since have set a new .grad, or an in-place op a new value).
    c10::weak_intrusive_ptr<torch::lazy::LazyTensor> target_holder{
        c10::intrusive_ptr<torch::lazy::LazyTensor>()};
    c10::weak_intrusive_ptr<torch::lazy::LazyTensor> base_holder{
        c10::intrusive_ptr<torch::lazy::LazyTensor>()};
  };
  struct StaticArgument {
    size_t input = 0;       // the record's input it binds
    size_t argument = 0;    // unless it binds a host tensor the step reads
    bool transfer = false;  // a host argument, moved to the device
    at::Tensor buffer;
  };

  bool AddHome(const torch::lazy::LazyTensorPtr& holder,
               size_t result,
               long* home,
               std::string* why);
  bool CheckResults();

  std::shared_ptr<const StepRecord> record_;
  std::vector<torch::lazy::BackendDataPtr> inputs_;  // bound, by record input
  std::vector<StaticArgument> arguments_;
  std::vector<Home> homes_;
  std::vector<WriteHomes> write_homes_;  // by record write
  std::vector<torch::lazy::BackendDataPtr> results_;
  bool checked_ = false;
  std::string why_;
};

}  // namespace lazyfuse
