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
// Not covered: `contiguous()`, which Tensor's C++ and Python methods answer
// from the lazy tensor's strides before any dispatch, so
// `x.t().contiguous()` still aliases x; and views under inference mode, where
// no autograd kernel runs.
std::optional<at::Tensor> EagerLayout(const at::Tensor& functional);

// An AutogradLazy kernel for `view` that copies, as eager's reshape does,
// where EagerLayout allows no view. Called once from the backend's init.
void RegisterEagerLayoutViews();

}  // namespace lazyfuse
