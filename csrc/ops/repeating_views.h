#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace lazyfuse {

// Note [Writes through a view that repeats an element]: an expanded view
// (`x.expand(3, 3)`), an unfolded one with overlapping windows, or an
// as_strided view with a zero or overlapping stride shows one element of its
// base at several places. Eager writes such memory once per place, or refuses
// ("more than one element of the written-to tensor refers to a single memory
// location"). Functionalization cannot alias within a tensor: it folds the
// written view back into its base with the view's inverse, which sums the
// places (expand's `sum_to`, unfold's `unfold_backward`), so `fill_(2)` of a
// 3-times expanded view of ones wrote 4, and `zero_()` wrote -2. Such a write
// on a lazy tensor is refused, before anything is written, with eager's
// message and the op's name, including the writes eager allows (fill_,
// index_put_; the latter deprecated there): clone() first.
//
// The same holds one step up: unfold's inverse (`unfold_backward`) sums
// the windows into a zeroed input, so even a write to one window was wrong
// when windows overlap or leave elements out (`x.unfold(0, 2, 3)[0].fill_(2)`
// zeroed the uncovered x[2]). Such writes are refused too.
//
// Only expand, unfold and as_strided can repeat an element, so a view whose
// chain holds none of them costs a scan of its ViewMetas. Otherwise the
// chain is replayed on the base's element indices, on the CPU.
//
// One kind stays writable: an as_strided view last in its chain, whose
// inverse copies the view into its base in eager's order. A write of every
// element of it (copy_, fill_, zero_) lands as eager's does; other writes
// are refused (kOverwritable).
enum class WriteThroughView { kWritable, kRepeats, kThroughUnfold, kOverwritable };
WriteThroughView CheckViewChain(const at::Tensor& functional_view);

// Raises, naming `op_name`, when `written` is a lazy tensor viewing its
// base through a view that repeats an element, or through an as_strided view
// of another view, which functionalization cannot write back through.
void CheckWriteTarget(const std::string& op_name, const at::Tensor& written);

// The same for each tensor an op will write, before it writes any.
void CheckWriteTargets(const std::string& op_name, const std::vector<at::Tensor>& written);

// Wraps torch's Functionalize kernel of every aten op that writes a tensor
// argument (copy_ aside: ops/eager_copy.cpp checks its own) with the check
// above, so that every path to a write sees it: autograd's, inference mode's
// and out= calls. Called once from the backend's init.
void RegisterRepeatingViewChecks();

}  // namespace lazyfuse
