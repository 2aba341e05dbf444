#pragma once

namespace lazyfuse {

// Fused optimizer steps called on lazy tensors (torch._fused_adam_ and
// _fused_adamw_, _fused_sgd_, _fused_adagrad_): ops that write tensor lists.
// torch's functionalization of them raises an internal assert when a list it
// writes is empty (max_exp_avg_sqs without amsgrad, momentum buffers without
// momentum), since it takes an empty list for one that is not functional.
// Their AutogradLazy kernel functionalizes them itself: the functional
// partner (_fused_adam, one result list per written argument) runs on the
// unwrapped tensors, and each written tensor takes its result, as
// functionalization would. Called once from the backend's init.
void RegisterFusedOptimizerUpdates();

}  // namespace lazyfuse
