#pragma once

namespace lazyfuse {

// Note [Running statistics written behind functionalization]: ATen's
// native_batch_norm writes its running statistics though its schema says it
// does not, so torch's Functionalize kernel, which follows the schema, never
// learns of the write. lazyfuse's kernel gives the statistics their new IR
// in place, in the lazy tensors functionalization passed it: the wrapper's
// own value. That was right only where the wrapper is its storage's base
// and nothing views it. After `load_state_dict` under PyTorch's
// swap-on-conversion (which swaps each buffer with a detached alias of
// itself) the buffer is a view, so the write never reached the storage:
// `bn.running_var.detach()`, and so `state_dict()` and every checkpoint
// saved after resuming, read the statistics from before the step; and views
// taken earlier never saw it, of a base too.
//
// A Functionalize kernel around torch's own reports each written statistic
// as functionalization's in-place ops do (TakeWrittenValue): the write
// reaches the storage, its base and every view. Called once from the
// backend's init.
void RegisterRunningStatisticWrites();

}  // namespace lazyfuse
