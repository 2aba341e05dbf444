#pragma once

// Why graphs compile. Every uncached compile is recorded with its graph hash,
// node count, the Python line that triggered it, and its cause: what changed
// against the previous graph compiled from the same line (an input's shape
// or dtype, or a node), and which of its kernels went shape-generic, and why.
// LAZYFUSE_DEBUG=1 prints each record as it happens.

#include <torch/csrc/lazy/core/hash.h>

#include <string>
#include <vector>

#include "program/program.h"

namespace lazyfuse {

// LAZYFUSE_DEBUG, read once: 1 prints compile records as they happen, 2 also
// says why each fused kernel runs specialized (runtime/generic_kernels.cpp).
int DebugLevel();

struct CompileRecord {
  torch::lazy::hash_t hash;
  size_t node_count = 0;
  std::string call_site;
  std::string cause;
  const void* program = nullptr;  // identity only, to attach notes
  // The graph's kernels that went shape-generic, each with why
  // (runtime/generic_kernels.h).
  std::vector<std::string> generic;
};

void RecordCompile(const Program& program, size_t node_count);
// Adds `note` to the recorded compile of `program` (identity), if still kept.
void NoteGenericKernel(const void* program, std::string note);

std::vector<CompileRecord> CompileLog();
// The folders of torch and lazyfuse themselves: frames under them are never
// the user's call site. Matched as path prefixes, so a user's own folder
// named torch or lazyfuse still counts as the user's.
void SetLibraryDirs(std::vector<std::string> dirs);
// The innermost Python frame outside torch and lazyfuse, as "file:line in function".
std::string UserCallSite();
void ClearCompileLog();

}  // namespace lazyfuse
