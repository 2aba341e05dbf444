#pragma once

// Mixed precision on lazy tensors: lazyfuse.autocast(dtype=...) applies
// CUDA's autocast policy (ATen's AT_FORALL_* op lists) to lazy tensors.
//
// Autocast in PyTorch is a dispatch key per backend, and the lazy backend has
// none, so torch.autocast("lazy") is refused. lazyfuse borrows one unused
// autocast key (autocast.cpp says which), registers the policy's ops on it
// with one boxed kernel, and puts the key in the thread's included set while
// a region is active. The key sits above autograd, so the casts are recorded
// by autograd exactly as CUDA's are.

#include <c10/core/ScalarType.h>

#include <string>
#include <utility>
#include <vector>

namespace lazyfuse {

struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::BFloat16;
};

// Sets this thread's autocast state and returns the previous one.
AutocastState SetAutocast(AutocastState state);
AutocastState CurrentAutocast();

// Registers the policy kernels; called once from the backend's init.
void RegisterAutocast();

// The registered ops ("aten::pow.Tensor_Scalar") and their policies
// ("lower_precision", "float32", "float32_opt_dtype", "promote", "banned").
std::vector<std::pair<std::string, std::string>> AutocastPolicyEntries();

}  // namespace lazyfuse
