#pragma once

// The CPU backing device's counterpart of a CUDA stream: one thread that runs
// host work in the order it was submitted. mark_step hands a graph's run to
// it and returns, so the next step traces while the graph runs
// (ltc/pending_run.h).

#include <functional>

namespace lazyfuse {

// Queues `work` behind everything submitted before it. `work` must not throw
// and must never take Python's GIL: a thread holding the GIL may be waiting
// for it. `communicates`: it runs a collective (WaitForCpuStreamCollectives).
void SubmitToCpuStream(std::function<void()> work, bool communicates = false);

// Blocks until everything submitted so far has run. Called before a graph
// runs on any other thread, so the CPU kernels' runtime serves one run at a
// time. Returns at once on the stream's own thread.
void SynchronizeCpuStream();

// Blocks until all work submitted as communicating has run. Every rank must
// issue its collectives on a process group in one order, so a collective
// called on another thread goes after those of the graphs already handed
// over. Returns at once on the stream's own thread.
void WaitForCpuStreamCollectives();

}  // namespace lazyfuse
