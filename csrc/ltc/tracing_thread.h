#pragma once

// One thread traces on the lazy device at a time.
//
// The lazy device keeps one graph for the whole process: every thread's lazy
// ops add to it, and any sync runs all of it. Two threads tracing at once
// race on LTC's tensor state (a sync swaps a tensor's IR for its data while
// another thread reads that tensor's sizes: "Expected tensor_data") and mix
// their steps into each other's graphs. So the thread that records lazy
// work owns the device until no live tensor has a pending value (its
// mark_step, or a read, ran the step). Meanwhile another thread's lazy op or
// sync raises, naming both threads; once the step has run, the next thread
// to trace takes the device over. Autograd's device thread runs backward on
// behalf of the thread that called backward(), so inside a backward pass
// nothing is checked.

#include <functional>
#include <string>

namespace lazyfuse {

// Called before the calling thread records an op on the device, once per
// lazy tensor made (a hot path): `what` names the op and `any_pending` tells
// whether some live lazy tensor still has a pending value; both are asked
// only when another thread owns the device.
void ClaimTracing(const std::function<std::string()>& what,
                  const std::function<bool()>& any_pending);

// Called before the calling thread runs the pending step (`any_pending`: it
// has one), by mark_step or a read.
void CheckSyncMayRun(const std::string& what, bool any_pending);

}  // namespace lazyfuse
