#pragma once

// eager_tensor.copy_(lazy_tensor) writes a lazy value into a CPU or CUDA
// tensor, as eager code does (DDP's parameter check among it). Functionalization
// refuses a functional source for a plain destination with an internal
// assert, and exempts only XLA; this exempts the lazy device the same way.

namespace lazyfuse {

// Called once from the backend's init.
void RegisterEagerCopy();

}  // namespace lazyfuse
