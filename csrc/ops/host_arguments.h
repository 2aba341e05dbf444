#pragma once

namespace lazyfuse {

// Composites whose eager kernel reads some tensor arguments on the host:
// tensor_split's split points (which eager insists are on the CPU; a lazy
// one is read first) and ctc_loss's lengths (CPU tensors, as cuDNN wants
// them). On lazy tensors, functional wrappers take these composites' path
// for tensor subclasses, which mixes the host tensors into device math; the
// overrides, at the autograd key, read them on the host as eager does for
// plain tensors, then call the IntArrayRef overloads, which record autograd
// as usual. _pack_padded_sequence's batch sizes leave functionalization as
// the CPU tensor eager returns. Called once from the backend's init.
void RegisterHostArgumentOverrides();

}  // namespace lazyfuse
