#pragma once

// The steps of as_strided_copy and as_strided_scatter, which read their
// input as storage: sizes, strides and an offset into the memory behind it.
// A lazy tensor reports contiguous strides and a storage offset of 0, so
// user code that computes as_strided's arguments from them
// (t.as_strided(t.size(), t.stride(), t.storage_offset())) means that
// layout. The tensor a step gets may be laid out otherwise: a view that runs
// as an alias of its base, a matmul computed transposed, an output in its
// input's layout. These steps first make their input its own contiguous
// storage, so every target reads what the lazy tensor says it holds.

#include <ATen/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/core/SymIntArrayRef.h>

#include <optional>

namespace lazyfuse {

at::Tensor AsStridedCopyStep(const at::Tensor& self,
                             c10::SymIntArrayRef size,
                             c10::SymIntArrayRef stride,
                             std::optional<c10::SymInt> storage_offset);

at::Tensor AsStridedScatterStep(const at::Tensor& self,
                                const at::Tensor& src,
                                c10::SymIntArrayRef size,
                                c10::SymIntArrayRef stride,
                                std::optional<c10::SymInt> storage_offset);

}  // namespace lazyfuse
