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
// than as a copy a kernel writes, saves memory. Device data is contiguous, so
// a non-contiguous result is copied anyway: a chain of reshapes (detach,
// view) aliases as laid out, and a permutation is worth it only when the
// chain's root is a result too (`is_result`, by buffer), whose memory the
// view's copy then stands in for (ltc/result_aliases.h).
bool ResultAliasSavesMemory(const Program& program, size_t i, const std::vector<bool>& is_result);

}  // namespace lazyfuse
