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

#include <ATen/Tensor.h>
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

class OutCall {
 public:
  // For an aten op with out= arguments whose results are those arguments (or
  // nothing); nullopt for any other op.
  static std::optional<OutCall> For(const c10::OperatorHandle& op);

  // Runs the call itself where torch's path would go wrong, and returns true,
  // leaving its results on the stack; returns false when the caller should
  // run it:
  // - an op that also writes arguments besides its out tensors runs eagerly:
  //   functionalization writes its functional variant's results into the
  //   wrong ones (rrelu_with_noise.out's noise gets its output);
  // - an out tensor of another dtype than its result runs eagerly (above);
  //   where no meta kernel tells the result dtypes, the functional variant
  //   runs here on the lazy tensors and its results tell;
  // - an op whose functional variant is a composite (linear's): functionalization
  //   would run that composite below itself, where the views it takes of bare
  //   lazy tensors cannot be recorded, so the functional variant runs here and
  //   its results are written into the out tensors.
  bool RunsItself(const c10::OperatorHandle& op, torch::jit::Stack* stack) const;

  // The out tensors on the stack, before the call.
  std::vector<at::Tensor> Outs(const c10::OperatorHandle& op, const torch::jit::Stack& stack) const;

  // After torch's path: eager's out= contract is that the results are the
  // out tensors. A composite may return another tensor instead
  // (linalg_matrix_rank's rebinds its result to a new one for functional
  // tensors), which is then written into its out tensor, and out returned.
  void KeepResultsInOuts(const c10::OperatorHandle& op,
                         const std::vector<at::Tensor>& outs,
                         torch::jit::Stack* stack) const;

 private:
  enum class OutDtypes { kSame, kOther, kUnknown };

  // Whether a call's out tensors have other dtypes than its functional
  // variant's results, by what decides dtypes (a meta call takes 10-300 us).
  struct Decisions {
    std::mutex mutex;
    std::unordered_map<std::string, OutDtypes> by_key;
  };

  OutCall(std::vector<size_t> outs,
          std::vector<size_t> written_inputs,
          std::optional<c10::OperatorHandle> functional,
          bool functional_decomposes,
          std::vector<bool> decisive,
          std::vector<bool> number)
      : outs_(std::move(outs)),
        written_inputs_(std::move(written_inputs)),
        functional_(std::move(functional)),
        functional_decomposes_(functional_decomposes),
        decisive_(std::move(decisive)),
        number_(std::move(number)),
        decisions_(std::make_shared<Decisions>()) {}

  OutDtypes Decision(const torch::jit::Stack& stack, size_t first, size_t num_arguments) const;
  // kUnknown where the functional variant has no meta kernel, or one that
  // needs the values (masked_select): the lazy call's own results then tell.
  OutDtypes DecideOnMeta(const torch::jit::Stack& stack, size_t first, size_t num_arguments) const;
  // The call's arguments but its out tensors: its functional variant's.
  torch::jit::Stack FunctionalArguments(const torch::jit::Stack& stack,
                                        size_t first,
                                        size_t num_arguments) const;
  std::vector<at::Tensor> OutsFrom(const torch::jit::Stack& stack, size_t first) const;
  std::string DtypeKey(const torch::jit::Stack& stack, size_t first) const;
  // With check_dtypes, a result of another dtype than its out tensor sends
  // the call to run eagerly instead.
  void RunFunctionalHere(const c10::OperatorHandle& op,
                         bool check_dtypes,
                         torch::jit::Stack* stack) const;

  std::vector<size_t> outs_;  // the out= arguments' positions
  // The other arguments it writes (rrelu_with_noise.out's noise).
  std::vector<size_t> written_inputs_;
  std::optional<c10::OperatorHandle> functional_;
  bool functional_decomposes_;
  std::vector<bool> decisive_;  // by argument: whether it can change a result dtype
  std::vector<bool> number_;    // by argument: whether it is a Scalar, whose kind counts
  std::shared_ptr<Decisions> decisions_;
};

}  // namespace lazyfuse
