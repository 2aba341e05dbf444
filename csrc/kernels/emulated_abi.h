#pragma once

// The one interface between an emulated kernel (CUDA source compiled as host
// C++, see EmulatedCudaDialect) and the runtime that launches it. The kernel
// library's prelude declares the same struct from the same macro, so the two
// sides cannot drift apart.

// Per emulated CUDA thread: its indices, and the runtime's barrier, warp
// shuffle and memory checks. `access` is a bit set of kEmuWrite and kEmuVector.
#define LF_EMU_ENV_FIELDS                                             \
  unsigned int thread_x;                                              \
  unsigned int block_x;                                               \
  unsigned int block_dim_x;                                           \
  unsigned int grid_dim_x;                                            \
  void* ctx;                                                          \
  void (*sync)(void* ctx);                                            \
  void (*shfl_xor)(void* ctx, void* value, int bytes, int lane_mask); \
  void (*check)(void* ctx, const void* address, unsigned long bytes, int access);

#define LF_EMU_STRINGIFY2(...) #__VA_ARGS__
#define LF_EMU_STRINGIFY(...) LF_EMU_STRINGIFY2(__VA_ARGS__)

namespace lazyfuse {

struct EmuEnv {
  LF_EMU_ENV_FIELDS
};

constexpr int kEmuWrite = 1;   // LF_EMU_WRITE in the prelude
constexpr int kEmuVector = 2;  // LF_EMU_VECTOR

// The C++ text declaring `struct lf_emu_env` and the access bits, for the
// kernel prelude.
constexpr const char* kEmuEnvDeclaration =
    "struct lf_emu_env { " LF_EMU_STRINGIFY(LF_EMU_ENV_FIELDS) " };\n"
    "enum { LF_EMU_WRITE = 1, LF_EMU_VECTOR = 2 };\n";

// Every emulated kernel library exports this entry point, which the runtime
// appends after the kernel: it binds the thread's env and calls the kernel
// with its arguments, each read from an 8-byte slot.
constexpr const char* kEmuEntryName = "lf_emu_entry";
using EmuEntry = void (*)(const EmuEnv* env, void** args);

}  // namespace lazyfuse
