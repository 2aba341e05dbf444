#pragma once

// The registers of a vector loop: each contiguous input it reads is loaded
// `width` elements at a time into a union, and each output it writes is
// gathered in one and stored at once. Pointwise kernels (codegen.cpp) and
// block-per-row loops (row_vectors.cpp) write the same registers.

#include <c10/core/ScalarType.h>

#include <string>

#include "fusion/planner.h"
#include "kernels/writer.h"

namespace lazyfuse {

// The register type moving `bytes` at once (lf_v16, lf_v8, unsigned int...),
// and a union viewing `width` elements of `dtype` as one, named `name`.
const char* VectorTypeFor(int bytes);
std::string VectorUnion(at::ScalarType dtype, int width, const std::string& name);

// Lines, each prefixed by `indent`, for the vector registers `writer`'s loop
// body used: the input unions loaded from `base`, and the output unions; then
// the outputs' stores to `base`.
std::string VectorLoads(const KernelWriter& writer,
                        const FusionGroup& group,
                        int width,
                        const std::string& base,
                        const std::string& indent);
std::string VectorStores(const KernelWriter& writer,
                         const std::string& base,
                         const std::string& indent);

}  // namespace lazyfuse
