#pragma once

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace lazyfuse {

// Ops lazyfuse runs on backing-device tensors (a graph's steps, an eager
// fallback) compute what was traced, whatever the thread is doing when
// they run. A graph read or marked inside `torch.autocast("cpu")` must not
// run its float matmuls in bfloat16; a TorchDispatchMode or a functorch
// transform must neither see nor change them (a FlopCounterMode around a
// step would count each op twice). Autograd was applied while tracing.
class BackingOpsGuard {
 public:
  BackingOpsGuard() : exclude_(Excluded()) {}

 private:
  static c10::DispatchKeySet Excluded() {
    return c10::autocast_dispatch_keyset |
           c10::DispatchKeySet({c10::DispatchKey::Python,
                                c10::DispatchKey::PythonTLSSnapshot,
                                c10::DispatchKey::PreDispatch,
                                c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
                                c10::DispatchKey::FuncTorchDynamicLayerBackMode});
  }

  at::AutoDispatchBelowADInplaceOrView below_autograd_;
  c10::impl::ExcludeDispatchKeyGuard exclude_;
};

}  // namespace lazyfuse
