#pragma once

// Results of one graph that hold the same values. Functionalization keeps a
// view's base alive beside the view, so a graph returns both: p.grad and the
// matmul output it is the transpose of; an nn.Parameter and the base it is a
// detached view of. Kept apart, every gradient and parameter would be held
// twice after a step.

#include <ATen/Tensor.h>

#include <vector>

#include "program/program.h"

namespace lazyfuse {

// Marks each result that another result is a permutation of (through
// transposes, permutes and reshapes) as derived from it, and recomputes the
// Program's lifetimes: the run then drops the base after its last read, and
// its data is made from the view's on its first read, which a training step
// never makes.
void DeriveBaseResults(Program& program);

// The value of derived result `entry`, a tensor of `sizes`, from the value
// of the result it is derived from.
at::Tensor MakeDerivedResult(const DerivedResult& entry,
                             const std::vector<int64_t>& sizes,
                             const at::Tensor& from);

// Makes results that are the same elements laid out alike (a parameter's
// value and its detached view) one tensor, so that the next graph may write
// over their memory: donation refuses memory two tensors share, and one
// tensor held by two of its arguments is donated to both (backend_impl.cpp).
void ShareIdenticalAliases(std::vector<at::Tensor>& outputs);

}  // namespace lazyfuse
