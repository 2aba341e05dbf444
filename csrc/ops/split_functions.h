#pragma once

namespace lazyfuse {

// Registers tensor_split with a lazy tensor of split points, which eager's
// composite kernel refuses; called once from the backend's init.
void RegisterSplitOverrides();

}  // namespace lazyfuse
