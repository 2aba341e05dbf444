#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace lazyfuse {

// Note [Eager's layout of a lazy view]: every lazy tensor reports contiguous
// strides (LTC computes them from the shape), views included, so ATen's
// reshape, which takes `view` for lazy tensors, always aliased: where eager
// copies (`x.t().reshape(-1)`, `flatten()` of a permuted tensor), a write to
// the result wrote into x, and a write to x showed in the result.
//
// EagerLayout gives a meta tensor with the sizes, strides and storage offset
// eager would give the lazy tensor `functional`, relative to its base: the
// base is contiguous, and the view ops that made `functional` are applied to
// a meta tensor of the base's shape, as eager applies them. They are read
// from the IR of the view's value (a chain of view_copy nodes down to the
// base's value), or, where a step has materialized the view, from its
// ViewMetas replayed on an IR-only lazy tensor. nullopt when a view in the
// chain has no eager counterpart here (view_as_real, view(dtype)).
//
// Not covered: views under inference mode, where no autograd kernel runs;
// and `contiguous()` called from C++, which Tensor's C++ method answers from
// the lazy tensor's strides before any dispatch (Python's calls
// EagerContiguous, python/lazyfuse/contiguous.py).
std::optional<at::Tensor> EagerLayout(const at::Tensor& functional);

// `self.contiguous(memory_format)` as eager answers it: a copy where eager's
// layout of the lazy tensor is not contiguous in `memory_format` (a
// transposed or sliced view, or any tensor asked for channels_last), so that
// writes to the result never reach `self` where eager's would not; else
// `self`, whose writes reach its base, as in eager.
at::Tensor EagerContiguous(const at::Tensor& self, at::MemoryFormat memory_format);

// An AutogradLazy kernel for `view` that copies, as eager's reshape does,
// where EagerLayout allows no view. Called once from the backend's init.
void RegisterEagerLayoutViews();

}  // namespace lazyfuse
