#pragma once

// A graph's kernels compile side by side: NVRTC and the host compiler each
// take one core per kernel, and a first step otherwise waits for them one
// after the other (issue "New shapes without new kernels", part 3).
// LAZYFUSE_COMPILE_THREADS caps the threads (default: the machine's cores,
// at most 16; 1 compiles serially).

#include <cstddef>
#include <functional>

namespace lazyfuse {

// The most compiles that run at once.
int CompileThreads();

// Runs work(0) ... work(count - 1) on up to CompileThreads() threads, the
// caller's among them, and returns when all are done. `work` must not throw.
void ForEachInParallel(size_t count, const std::function<void(size_t)>& work);

}  // namespace lazyfuse
