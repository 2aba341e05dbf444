#include "ltc/init.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/config.h>
#include <torch/csrc/lazy/core/lazy_graph_executor.h>

#include <mutex>

#include "ltc/backend_impl.h"
#include "ltc/config.h"
#include "ltc/eager_fallback.h"
#include "ltc/graph_executor.h"
#include "ltc/step_replay.h"
#include "ops/amp_functions.h"
#include "ops/autocast.h"
#include "ops/collectives.h"
#include "ops/dispatch_mode_factories.h"
#include "ops/eager_copy.h"
#include "ops/functionalized_composite.h"
#include "ops/fused_optimizer_updates.h"
#include "ops/host_arguments.h"
#include "ops/inplace_updates.h"
#include "ops/repeating_views.h"
#include "ops/resizes.h"
#include "ops/running_statistics.h"
#include "ops/view_layout.h"
#include "ops/write_records.h"
#include "program/compile_log.h"
#include "runtime/cpu/stream.h"
#include "runtime/host_library.h"

namespace at {
// Generated into RegisterLazy.cpp by torchgen (backend_name "LazyFuse").
void RegisterLazyFuseLazyNativeFunctions();
}  // namespace at

namespace lazyfuse {

void InitLazyFuseBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Everything that can fail runs before the first registration, so a
    // failure leaves the dispatcher untouched.
    TORCH_CHECK(
        !torch::lazy::hasBackend(),
        "lazyfuse: another Lazy Tensor Core backend is already initialised in this process "
        "(torch._lazy.ts_backend.init() was called). lazyfuse and the TorchScript lazy backend "
        "cannot share a process; import lazyfuse in a fresh process instead.");
    InitBackingDeviceFromEnv();
    if (GetKernelSettings().cpu_kernels && !HostCompilerAvailable(nullptr)) {
      // No compiler: the CPU backing device runs every step as ATen calls.
      KernelSettings settings = GetKernelSettings();
      settings.cpu_kernels = false;
      SetKernelSettings(settings);
    }
    // LTC's device-data cache hands equal scalars one shared buffer. Graph
    // parameters are deduplicated by buffer, so whether two scalars (a
    // learning rate and a bias correction, say) happen to be equal would
    // enter the graph hash and recompile the graph. Each scalar gets its own.
    FLAGS_torch_lazy_enable_device_data_cache = false;
    static torch::lazy::BackendRegistrar registrar(GetLazyFuseBackendImpl());
    // Leaked on purpose: LTC may still call into it from exit-time teardown.
    static auto* executor = new LazyFuseGraphExecutor();
    torch::lazy::LazyGraphExecutor::Register(executor);
    at::RegisterLazyFuseLazyNativeFunctions();
    RegisterEagerFallback();
    RegisterAutocast();
    RegisterAmpFunctions();
    RegisterHostArgumentOverrides();
    // Before the composites: the collectives it covers have kernels then.
    RegisterCollectives(&WaitForCpuStreamCollectives);
    RegisterEagerCopy();
    RegisterFunctionalizedComposites();
    RegisterInplaceUpdates();
    RegisterEagerLayoutViews();
    RegisterFusedOptimizerUpdates();
    RegisterWriteRecords();         // it covers the writing ops left without an AutogradLazy kernel
    RegisterRepeatingViewChecks();  // last: it wraps every Functionalize kernel of a writing op
    RegisterDispatchModeFactories();
    RegisterRunningStatisticWrites();
    RegisterLazyResizes();  // after the repeating-view checks, whose kernel it calls
    SetCallSiteFunction(&UserCallSite);
  });
}

}  // namespace lazyfuse
