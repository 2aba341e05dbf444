#include <string>

#include "kernels/dialect.h"
#include "kernels/emulated_abi.h"

namespace lazyfuse {
namespace {

// CUDA's built-ins for a host C++ compiler. Each emulated thread binds
// lf_env (kEmuEntryName); indices, barriers and shuffles go through it, and so
// does every load and store, which the runtime checks against the launch's
// buffers. __shared__ becomes static: the runtime runs one block at a time.
constexpr const char* kEmulatedTarget = R"CPP(
#include <math.h>
#include <string.h>

  static thread_local const lf_emu_env* lf_env;
  struct lf_dim3 {
    unsigned int x, y, z;
  };
#define threadIdx (lf_dim3{lf_env->thread_x, 0u, 0u})
#define blockIdx (lf_dim3{lf_env->block_x, 0u, 0u})
#define blockDim (lf_dim3{lf_env->block_dim_x, 1u, 1u})
#define gridDim (lf_dim3{lf_env->grid_dim_x, 1u, 1u})
  // Emulated kernels are checked against CPU eager, whose pow(x, 3) on half
  // rounds once, and whose half pow(x, 0.5) is pow(), not a root (see
  // lf_pow_scalar_half),
#define LF_HALF_POW_ROUNDS_EACH_PRODUCT 0
#define LF_HALF_POW_ROOTS_AS_POW 1
  // and whose maximum, minimum and relu keep the first operand on a tie of
  // +0 and -0 (see lf_max_number).
#define LF_ZERO_TIES_AS_FMAX 0
  // and whose add and sub round a CPU scalar to a half operand's dtype.
#define LF_HOST_SCALAR_HALF(x) lf_round_half(x)
#define LF_HOST_SCALAR_BF16(x) lf_round_bf16(x)
#define LF_UNROLL
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() (lf_env->sync(lf_env->ctx))
  template <typename T>
  inline T __shfl_xor_sync(unsigned int, T value, int lane_mask) {
    lf_env->shfl_xor(lf_env->ctx, &value, (int)sizeof(T), lane_mask);
    return value;
  }
  inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
  }
  inline float __uint_as_float(unsigned int u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, 4);
    return u;
  }
  inline double __longlong_as_double(long long i) {
    double d;
    memcpy(&d, &i, 8);
    return d;
  }
  inline float rsqrtf(float x) {
    return 1.0f / sqrtf(x);
  }
  inline double rsqrt(double x) {
    return 1.0 / sqrt(x);
  }

  typedef unsigned short lf_half;
  typedef unsigned short lf_bf16;
#define LF_INF (__int_as_float(0x7f800000))
#define LF_DINF (__longlong_as_double(0x7ff0000000000000LL))

  inline float lf_h2f(lf_half h) {
    const unsigned int sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
      const float f = (float)mant * 5.9604644775390625e-8f;
      return sign ? -f : f;
    }
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
  }
  inline lf_half lf_f2h(float f) {
    unsigned int x = __float_as_uint(f);
    const unsigned int sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return (lf_half)(sign | 0x7e00u);
    if (x >= 0x477ff000u) return (lf_half)(sign | 0x7c00u);
    if (x < 0x38800000u) {
      return (lf_half)(sign | (unsigned int)nearbyintf(__uint_as_float(x) * 16777216.0f));
    }
    x += 0xfffu + ((x >> 13) & 1u);
    return (lf_half)(sign | ((x - 0x38000000u) >> 13));
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
  static const std::string prelude =
      std::string("\n") + kEmuEnvDeclaration + kEmulatedTarget + CommonKernelHelpers();
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
