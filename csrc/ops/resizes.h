#pragma once

namespace lazyfuse {

// Note [resize_ of lazy tensors]: torch's functionalization resizes a tensor
// to fewer elements by adding an as_strided view of its old storage, and
// refuses to grow any tensor that has one ("Attempted to resize a view tensor
// to a larger size"). So PyTorch's own advice for reusing an out= tensor,
// `t.resize_(0)` and then `op(..., out=t)`, failed on a lazy tensor; and a
// view grown within its base's storage failed only when its graph ran.
//
// A Functionalize kernel around torch's own resizes a lazy tensor that no
// view shares by replacing its value (the first elements kept, new ones 0;
// eager leaves those uninitialised), and refuses, naming the op, to grow a
// view or a tensor views share, whose elements live in storage a lazy
// tensor does not lay out as eager does. Called once from the backend's
// init.
void RegisterLazyResizes();

}  // namespace lazyfuse
