#pragma once

// Results of one graph run that share memory. Functionalization keeps a
// view's base alive next to the view: p.grad is the transpose of the matmul
// that made it, and both are graph results. The run returns the view as an
// alias of the base, but device data is contiguous (backend_data.h), so the
// view gets a copy of its own, and holding the base as well would keep two
// copies of one value for the whole next step. The base is instead derived
// from the view's copy, on its first read, which a training step never makes.

#include <ATen/Tensor.h>

#include <functional>
#include <vector>

namespace lazyfuse {

// Makes each non-contiguous result that holds every element of a contiguous
// result, in another order, a contiguous copy, and drops that base result:
// its slot comes back undefined, with the function that makes it from the
// copy at the same index. Other slots' functions are empty.
std::vector<std::function<at::Tensor()>> DeriveBasesFromViews(std::vector<at::Tensor>& outputs);

// Makes results that are the same elements laid out alike (a parameter's
// value and its detached view) one tensor, so that the next graph may write
// over their memory: donation refuses memory two tensors share, and one
// tensor held by two of its arguments is donated to both (backend_impl.cpp).
void ShareIdenticalAliases(std::vector<at::Tensor>& outputs);

}  // namespace lazyfuse
