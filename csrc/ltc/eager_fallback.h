#pragma once

// Boxed fallback for ops lazyfuse does not lower: the lazy arguments are
// materialised on the backing device, the op runs there eagerly, and its
// results come back as new lazy tensors. Every use is counted per op under
// "aten::<name>" and warned about once per op.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyfuse {

void LazyFuseEagerFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Counts a run of `op` on the backing device under "aten::<name>", and warns
// the first time, saying `why` it runs there ("has no lazy lowering and runs
// eagerly").
void CountEagerRun(const c10::OperatorHandle& op, const char* why);

// Whether torch._lazy.config.set_force_fallback (LTC_FORCE_FALLBACK) names
// `op` ("aten::sub" covers every overload): the generated lazy kernels then
// take the eager fallback, LTC's way to bisect a wrong result. Read on every
// call, so a new setting applies at once.
bool ForcedEagerFallback(c10::Symbol op);

// Whether `op` belongs to torch.distributed (c10d and the functional
// collectives). Such an op mutates tensors its schema does not declare, or
// talks to other ranks, so it can never fall back: a copy would swallow its
// result, and an extra run would desynchronise the group.
bool IsDistributedOp(const c10::OperatorName& op);

// Also refuses, naming the op, what would make a sparse, quantized or nested
// lazy tensor: a lazy tensor is strided.
void RegisterEagerFallback();

// Runs before a view is refused below functionalization; ops/ sets it, so
// that a custom op defined since lazy data was last made works next call.
void SetViewRefusedBelowFunctionalizationHook(void (*hook)());

}  // namespace lazyfuse
