#pragma once

// Note [Matmuls whose result is read transposed]
// A Linear weight's gradient reaches the graph as t(mm(t(x), grad)). Eager's
// mm backward picks the operand order that yields the weight's own layout
// (mm_mat2_backward reads the weight's strides); lazy tensors are all
// contiguous, so the lazy graph computes the product in the input's layout
// and transposes it. Every reader of the gradient, the optimizer's update
// first, then reads it transposed: a strided read that does not vectorize.
// Eager's SGD momentum update of a 512x256 weight takes 172 us reading its
// gradient transposed, 39 us reading it contiguous (2 cores, 2026-11-27).
//
// The transpose of a product is the product of the transposed operands in
// reverse order, and BLAS reads a transposed operand at no cost, so
//   X = mm(A, B); Z = t(X)   becomes   Y = mm(t(B), t(A)); X = t(Y); Z = Y
// when every step that reads X transposes it. A transpose of a transpose is
// its input, so readers of Z read Y, and t(A) is A's own input when A was a
// transpose. X stays a view of Y for the results that hold it, where
// DeriveBaseResults makes it from Y's result on its first read.

#include "program/program.h"

namespace lazyfuse {

// Rewrites `program` as the note says; returns how many matmuls it turned.
// Keeps every result's value, and the parameters.
int TransposeMatmulsReadTransposed(Program& program);

}  // namespace lazyfuse
