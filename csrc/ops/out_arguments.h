#pragma once

// An out= op on lazy tensors reaches torch's functionalization, which calls
// the op's functional variant and copies its result into out, casting it.
// Eager does not cast: it refuses an out tensor of a dtype the op cannot
// write (mm into int32, any into float, index_select into another dtype), and
// a reduction into an out tensor of another dtype computes in that dtype (a
// sum of floats into int32 sums the truncated elements). Which it does is
// each kernel's own rule. So the functional variant first runs on meta
// tensors for its result dtypes, and a call whose out tensor has another
// dtype runs eagerly on the backing device (counted and warned about as a
// fallback): its values, or its error, are eager's. Every other call goes on
// as before.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lazyfuse {

class OutCallCheck {
 public:
  // For an aten out= op with a functional variant; nullopt for any other op.
  static std::optional<OutCallCheck> For(const c10::OperatorHandle& op);

  // Returns true when it has run the call eagerly, leaving its results on the
  // stack; false when the caller should run it.
  bool RunsEagerly(const c10::OperatorHandle& op, torch::jit::Stack* stack) const;

 private:
  // Whether a call's out tensors have other dtypes than its functional
  // variant's results, by what decides dtypes (a meta call takes 10-300 us).
  struct Decisions {
    std::mutex mutex;
    std::unordered_map<std::string, bool> other_dtype;
  };

  OutCallCheck(std::vector<size_t> outs,
               c10::OperatorHandle functional,
               std::vector<bool> decisive,
               std::vector<bool> number)
      : outs_(std::move(outs)),
        functional_(std::move(functional)),
        decisive_(std::move(decisive)),
        number_(std::move(number)),
        decisions_(std::make_shared<Decisions>()) {}

  std::string DtypeKey(const torch::jit::Stack& stack, size_t first) const;
  bool OutHasOtherDtype(const torch::jit::Stack& stack, size_t first, size_t num_arguments) const;

  std::vector<size_t> outs_;  // the out= arguments' positions
  c10::OperatorHandle functional_;
  std::vector<bool> decisive_;  // by argument: whether it can change a result dtype
  std::vector<bool> number_;    // by argument: whether it is a Scalar, whose kind counts
  std::shared_ptr<Decisions> decisions_;
};

}  // namespace lazyfuse
