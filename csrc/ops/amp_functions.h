#pragma once

namespace lazyfuse {

// Registers GradScaler's functional ops (_amp_foreach_non_finite_check_and_unscale,
// _amp_update_scale) for the lazy backend; called once from the backend's init.
void RegisterAmpFunctions();

}  // namespace lazyfuse
