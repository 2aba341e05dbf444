#pragma once

// What the planner may do with a step (its role), and where a buffer can
// live in a kernel.

#include <cstdint>
#include <vector>

#include "program/program.h"

namespace lazyfuse {

enum class Role { kOpaque, kPointwise, kView, kReduction };

// A step's role, from the rule that lowers it into a kernel, if any.
Role RoleOf(const Step& step, const Program& program);

// Right-aligned broadcast: every dim of `from` equals the matching dim of `to` or is 1.
bool BroadcastsTo(const std::vector<int64_t>& from, const std::vector<int64_t>& to);

// A buffer of `shape` can live in a kernel over `domain` when it has the
// domain's element count (stored at the linear index) or broadcasts to it.
bool FitsDomain(const std::vector<int64_t>& shape, const std::vector<int64_t>& domain);

// Whether returning view step `i`'s result as an alias of its input, rather
// than as a copy a kernel writes, saves memory: when the view is a chain of
// reshapes (detach, view), which alias as laid out. Device data is
// contiguous, so any other alias would be copied when it becomes data.
// `making_step` is MakingSteps(program), computed once per plan.
bool ResultAliasSavesMemory(const Program& program, size_t i, const std::vector<int>& making_step);

// Whether step `i` is a permute (a transpose) that only matmuls read (by
// buffer, `readers` lists the steps reading it). It stays an alias: BLAS
// reads a transposed operand at no cost, where a pointwise group would write
// a transposed copy beside its own output (fusion/transposed_matmuls.h).
bool OnlyMatmulsRead(const Program& program,
                     size_t i,
                     const std::vector<std::vector<size_t>>& readers);

}  // namespace lazyfuse
