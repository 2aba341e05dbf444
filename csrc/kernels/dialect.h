#pragma once

// The target-specific pieces of the C-style kernel renderer: qualifiers,
// thread indices, shared memory and the helper prelude every kernel starts
// with. The renderer (kernels/codegen) writes everything else the same way
// for every target.

#include <ATen/Tensor.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace lazyfuse {

struct KernelDialect {
  const char* name;
  const char* kernel_prefix;  // before "void <name>(...)"
  const char* thread_index;
  const char* block_index;
  const char* block_size;
  const char* grid_size;
  const char* barrier;
  const char* restrict_qualifier;
  const char* prelude;
  // A block is one host thread running serial loops (the CPU): pointwise
  // kernels take a contiguous chunk of the domain per block, reductions whole
  // rows (or chunks of few long rows); never shared memory, barriers or
  // shuffles, and one thread per block.
  bool serial_blocks = false;
};

const KernelDialect& CudaDialect();
// CUDA source run on the CPU: the CUDA dialect with a host prelude. Kernel
// bodies are the CUDA dialect's, character for character.
const KernelDialect& EmulatedCudaDialect();
// Host C++ for the CPU: serial blocks, compiled for the machine's ISA.
const KernelDialect& CpuDialect();
// What every host-compiled prelude starts with: CUDA's math built-ins and
// CPU eager's semantics (the emulated and CPU dialects).
const char* HostKernelBuiltins();
// The helpers every prelude ends with (math, reductions), target-neutral.
const char* CommonKernelHelpers();

// How a dtype is stored in memory and held in a register inside a kernel.
const char* StorageTypeName(at::ScalarType dtype);
const char* RegisterTypeName(at::ScalarType dtype);
// The expression converting a loaded storage value to its register type.
std::string LoadConversion(at::ScalarType dtype, const std::string& stored);
// The expression converting a register value to the storage type.
std::string StoreConversion(at::ScalarType dtype, const std::string& value);
// Names a helper's variant for values stored as half or bfloat16, whose
// eager kernels round intermediate results to that type ("_half", "_bf16").
const char* StorageSuffix(at::ScalarType dtype);
// A float register converted to `to`'s register type. To an integer it goes
// through lf_f2i: C++ leaves NaN and out-of-range values undefined, and an
// optimizing compiler answered differently from eager's conversion.
std::string FromFloat(at::ScalarType to, const std::string& value);
// Rounds a float register through half or bfloat16 so every step's result
// matches what ATen stores; other dtypes pass through.
std::string RoundToDtype(at::ScalarType dtype, const std::string& value);

// The literal C++ spelling of a 0-dim constant (1.5, 2LL, true, inf, nan).
std::string ConstantLiteral(const at::Tensor& value);

}  // namespace lazyfuse
