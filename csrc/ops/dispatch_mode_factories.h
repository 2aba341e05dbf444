#pragma once

namespace lazyfuse {

// Note [Lazy tensors made under a TorchDispatchMode]: a lazy factory wraps
// its result for functionalization (Note [Lazy tensors are functional])
// unless functionalization's key is excluded, since functionalization then
// wraps it itself. A TorchDispatchMode (FlopCounterMode, say) runs each op
// with every key above Python excluded, functionalization's among them, so
// `torch.zeros(3, device="lazy")` under a mode returned a bare lazy tensor:
// its first view raised (`t()` in a matmul's backward), and a write through
// a view of it would have been lost.
//
// An op that can name a device (factories, `*_like`, `new_*`, `_to_copy`)
// gets a kernel at PythonTLSSnapshot, a key in the dispatch only while a
// mode is active (or a Python tensor is an argument), so it costs nothing
// otherwise. It runs torch's own PythonTLSSnapshot fallback, which calls the
// mode, and wraps a bare lazy result the way the factory would have. A
// result that requires grad stays as it is: autograd has recorded it, and a
// new wrapper would drop its history. Called once from the backend's init.
void RegisterDispatchModeFactories();

}  // namespace lazyfuse
