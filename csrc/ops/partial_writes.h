#pragma once

// In-place forms of the indexed writes functionalization turns functional
// (index_copy_, index_put_, scatter_ and their kin: `cache.index_copy_(2,
// pos, k)`, `x[idx] = v`). Their functional step copies the whole base to
// change a part; where the run owns the base and nothing else reads it, the
// step writes the part into it, as eager does.
//
// ATen's kernels check an index as they write, so an index out of bounds
// raises with part of the base already written. On the CPU the indices are
// checked first, and an out-of-bounds one leaves the functional call to
// raise eager's error on a copy. On a GPU the kernels' device-side asserts
// are eager's own behaviour either way.

#include <ATen/Tensor.h>
#include <ATen/core/List.h>

#include <optional>

#include "program/program.h"

namespace lazyfuse {

// The base (input 0) to write `index`'s entries of dim `dim` into, recorded
// as overwritten and counted (LazyFuseInPlaceScatters) before the caller
// writes, so that a write that fails halfway marks the run lost instead of
// letting it run again on a half-written input; undefined where the
// functional call must run. `negative_wraps`: the op reads -1 as the last
// entry (index_fill), instead of raising.
at::Tensor BaseToWriteAlong(KernelArgs& args,
                            int64_t dim,
                            const at::Tensor& index,
                            bool negative_wraps);

// The same for index_put: one optional index per leading dim of the base.
at::Tensor BaseToIndexPut(KernelArgs& args,
                          const c10::List<std::optional<at::Tensor>>& indices,
                          const at::Tensor& values);

}  // namespace lazyfuse
