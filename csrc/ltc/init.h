#pragma once

namespace lazyfuse {

// Registers lazyfuse as the process's `lazy` device: BackendRegistrar, the
// LazyGraphExecutor, the generated kernels and the eager fallback. Called once
// from `import lazyfuse`; later calls do nothing. Fails, registering nothing,
// if another LTC backend (torch._lazy.ts_backend) already owns the device.
void InitLazyFuseBackend();

}  // namespace lazyfuse
