#pragma once

namespace lazyfuse {

// Note [In-place updates without a meta reference]: before functionalizing
// an in-place op, torch runs the op once more on meta tensors, to raise the
// errors only the in-place form has (`a.add_(b)` where b would broadcast a
// to a larger shape; an integer tensor given a float result). For most
// in-place ops that meta kernel is Python (torch/_meta_registrations.py), and
// it cost about 100 µs an op, ten times the op's own trace: two thirds of a
// Transformer layer's training-step trace went to Adam's addcdiv_, addcmul_
// and lerp_. Some of those Python kernels also resize the target instead of
// raising (pow_.Tensor's, eq_'s), so functionalization wrote the broadcast
// shape.
//
// lazyfuse gives each aten in-place op with a functional partner (the
// overload of `f` for `f_` with the same arguments) an AutogradLazy kernel:
// - Where autograd records nothing (an optimizer step runs under no_grad),
//   it functionalizes the op itself, as functionalization would: the
//   functional op runs once on the unwrapped tensors, and its result
//   replaces the tensor's value. The in-place errors are raised from that
//   result, in C++, before anything is written: a shape other than the
//   tensor's, or a dtype it cannot be cast to.
// - Where autograd records, torch's autograd kernel runs as before, after the
//   same check on a functional op run only to learn the result's shape and
//   dtype (not for ops that draw random numbers, which keep their shape).
// Inference mode skips autograd keys, so there torch's path runs unchanged;
// a lax meta kernel's resize is then a known gap (test_inplace_updates.py).
// An op torch has no functionalization of (polygamma_, whose functional
// overload orders its arguments otherwise) gets the same update as its
// Functionalize kernel.
//
// LAZYFUSE_INPLACE_UPDATES=0 leaves every in-place op to torch's path.
// Called once from the backend's init.
void RegisterInplaceUpdates();

}  // namespace lazyfuse
