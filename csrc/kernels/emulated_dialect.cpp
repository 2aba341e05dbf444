#include <string>

#include "kernels/dialect.h"
#include "kernels/emulated_abi.h"

namespace lazyfuse {
namespace {

// CUDA's thread built-ins for a host C++ compiler (HostKernelBuiltins has the
// rest). Each emulated thread binds lf_env (kEmuEntryName); indices, barriers
// and shuffles go through it, and so does every load and store, which the
// runtime checks against the launch's buffers. __shared__ becomes static:
// the runtime runs one block at a time.
constexpr const char* kEmulatedTarget = R"CPP(
  static thread_local const lf_emu_env* lf_env;
  struct lf_dim3 {
    unsigned int x, y, z;
  };
#define threadIdx (lf_dim3{lf_env->thread_x, 0u, 0u})
#define blockIdx (lf_dim3{lf_env->block_x, 0u, 0u})
#define blockDim (lf_dim3{lf_env->block_dim_x, 1u, 1u})
#define gridDim (lf_dim3{lf_env->grid_dim_x, 1u, 1u})
#define __shared__ static
#define __syncthreads() (lf_env->sync(lf_env->ctx))
  template <typename T>
  inline T __shfl_xor_sync(unsigned int, T value, int lane_mask) {
    lf_env->shfl_xor(lf_env->ctx, &value, (int)sizeof(T), lane_mask);
    return value;
  }

  template <typename T, typename I>
  inline T lf_ld(const T* p, I i) {
    lf_env->check(lf_env->ctx, p + i, sizeof(T), 0);
    return p[i];
  }
  template <typename T, typename I, typename V>
  inline void lf_st(T* p, I i, V v) {
    lf_env->check(lf_env->ctx, p + i, sizeof(T), LF_EMU_WRITE);
    p[i] = v;
  }
  template <typename V, typename T>
  inline V lf_vload(const T* p) {
    lf_env->check(lf_env->ctx, p, sizeof(V), LF_EMU_VECTOR);
    V v;
    memcpy(&v, p, sizeof(V));
    return v;
  }
  template <typename V, typename T>
  inline void lf_vstore(T* p, V v) {
    lf_env->check(lf_env->ctx, p, sizeof(V), LF_EMU_WRITE | LF_EMU_VECTOR);
    memcpy(p, &v, sizeof(V));
  }
  template <typename T, typename I>
  inline unsigned int lf_publish(T* partials, I slot, T v, unsigned int* counter) {
    lf_st(partials, slot, v);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    lf_env->check(lf_env->ctx, counter, sizeof(unsigned int), LF_EMU_WRITE);
    return __atomic_fetch_add(counter, 1u, __ATOMIC_SEQ_CST);
  }
  template <typename T, typename I>
  inline T lf_ld_published(const T* p, I i) {
    return lf_ld(p, i);
  }
)CPP";

}  // namespace

const KernelDialect& EmulatedCudaDialect() {
  static const std::string prelude = std::string("\n") + HostKernelBuiltins() + kEmuEnvDeclaration +
                                     kEmulatedTarget + CommonKernelHelpers();
  // Every field the body uses is the CUDA dialect's: only the prelude differs.
  static const KernelDialect dialect = [] {
    KernelDialect d = CudaDialect();
    d.name = "emulated_cuda";
    d.prelude = prelude.c_str();
    return d;
  }();
  return dialect;
}

}  // namespace lazyfuse
