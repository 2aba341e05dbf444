#pragma once

// The comparisons IR reuse relies on: a node is recycled only for the very
// operands and attributes it was built with. Generated nodes call these from
// CanBeReused.

#include <c10/core/Scalar.h>
#include <torch/csrc/lazy/core/hash.h>
#include <torch/csrc/lazy/core/ir.h>

#include <optional>

namespace lazyfuse {

// Exact equality of two scalars, type included (IR reuse must not recycle a
// node built for 1 when 1.0 is asked for).
bool SameScalar(const at::Scalar& a, const at::Scalar& b);

// A node attribute's hash, equal wherever SameScalar is. torch::lazy::Hash of
// a complex Scalar calls itself until the stack overflows, and it asserts on
// an unsigned one.
torch::lazy::hash_t ScalarHash(const at::Scalar& value);
torch::lazy::hash_t ScalarHash(const std::optional<at::Scalar>& value);

// Whether an operand of a node is this very value. LTC's Output == Value
// compares hashes, and device data hashes only its shape: with it, IR reuse
// took where(m, b, a) for where(m, a, b) and swapped the two inputs.
inline bool SameOperand(const torch::lazy::Output& operand, const torch::lazy::Value& value) {
  return operand.node == value.node.get() && operand.index == value.index;
}

}  // namespace lazyfuse
