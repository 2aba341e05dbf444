#pragma once

// torch.distributed collectives on lazy tensors. dist.all_reduce and the
// other c10d ops (DDP's buckets among their callers), and the functional
// collectives (_c10d_functional), each record one collective step in the
// graph. At mark_step the step calls the same op on the backing device's
// tensors, so the process group's backend for that device does the work:
// Gloo on the CPU, NCCL on CUDA. The caller gets back a completed Work whose
// future holds its own (lazy) tensors.
//
// Ranks stay in lockstep:
// - a token chains the collectives, so a graph runs them in the order they
//   were issued, and a graph that holds one holds every earlier one not yet
//   run;
// - while a collective waits, a read of any value runs every live tensor's
//   graph first (SyncCollectivesBeforeRead), so no rank runs one alone;
// - a graph's hash carries the group's name and the op's arguments, never
//   the rank, and a failed collective is never retried (ProgramRun);
// - a graph whose collectives run on the CPU stream (asynchronous execution)
//   runs them before any later eager collective of this process, which waits
//   for them: the op's order on every rank is the program's.

#include <functional>

namespace lazyfuse {

// Called once from the backend's init. `wait_for_graph_collectives` blocks
// until the collectives of graphs handed to another thread have run; a c10d
// call on eager tensors calls it first.
void RegisterCollectives(std::function<void()> wait_for_graph_collectives);

// Runs every live tensor's graph if a recorded collective has not run yet.
// Called before a lazy value is read into an eager tensor.
void SyncCollectivesBeforeRead();

}  // namespace lazyfuse
