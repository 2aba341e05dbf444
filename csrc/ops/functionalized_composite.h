#pragma once

#include <cstddef>

namespace lazyfuse {

// Note [Composite kernels below functionalization]: an op whose only kernel
// is a CompositeExplicitAutograd one (a torch.library custom op's
// implementation, say) runs below functionalization, on bare lazy tensors.
// There a view cannot be recorded, so an implementation that narrows a
// buffer and copy_()s into it fails. lazyfuse gives such ops a Lazy kernel
// that runs the same composite kernel with functionalization re-applied,
// so its views and writes are recorded as a user's would be.
//
// A library's op that writes its arguments (mutates_args), which
// functionalization's fallback refuses, gets an AutogradLazy kernel that
// functionalizes it on lazy tensors.
//
// Also gives every functional CompositeImplicitAutograd op without one a
// Functionalize kernel that decomposes it on lazy tensors, and every in-place
// one (square_, selu_) a Functionalize kernel that decomposes it on any
// tensor: Note [Inference mode and functionalization].
//
// Called once from the backend's init: covers the ops defined so far and
// watches for new ones, which RegisterNewFunctionalizedComposites picks up.
void RegisterFunctionalizedComposites();

// Registers ops defined since the last call and says how many; one atomic
// load when none were defined. Called where lazy data enters (host copies,
// empty), at mark_step, and when a view is refused below functionalization.
size_t RegisterNewFunctionalizedComposites();

}  // namespace lazyfuse
