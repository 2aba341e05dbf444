#pragma once

// Which outputs of a fused group may be written into the memory of one of
// its inputs (buffer donation, as torch_xla aliases inputs to outputs), so an
// optimizer step updates parameters and their state where they are instead
// of holding an old and a new copy. Only a plan: the executor decides at run
// time whether the input's memory is free to take (see ProgramRun::owned).

#include <vector>

#include "fusion/planner.h"

namespace lazyfuse {

// Per output of `group`, the indices in group.inputs of the inputs whose
// memory it may take; which one is free is known only at run time. An input
// qualifies for an output when both have the sizes the output is computed
// over and the same dtype, and the input reaches the output only through
// pointwise steps at the element being computed: the thread computing an
// element then loads the input's element before it stores any output
// there, and nothing reads that element afterwards. In a reduction group
// that means the epilogue: at the row being reduced (a bias's optimizer
// update after its gradient's sum), or at the element for softmax and layer
// norm, and never in the prologue.
std::vector<std::vector<size_t>> InPlaceInputs(const Program& program, const FusionGroup& group);

}  // namespace lazyfuse
