// The CPU dialect: fused kernels as host C++, compiled at -O3 for the
// machine's ISA and run by the CPU target (runtime/cpu) over CPU tensors.
//
// The renderer writes the same bodies it writes for CUDA, in the shape a CPU
// wants (KernelDialect::serial_blocks): a block is one host thread running
// serial loops. A pointwise kernel's block takes a contiguous chunk of the
// domain, in a loop the compiler vectorizes; a reduction's block takes whole
// rows, or chunks of a few long rows. The runtime hands blocks to torch's
// intra-op thread pool (at::parallel_for), so lazyfuse and eager share one
// pool and one thread count, under every supported torch.
//
// Semantics are CPU eager's, as the emulated CUDA target's are: both preludes
// start with HostKernelBuiltins.

#include <string>

#include "kernels/dialect.h"

namespace lazyfuse {
namespace {

// CUDA's math built-ins and CPU eager's semantics, for any host compiler.
constexpr const char* kHostBuiltins = R"CPP(
  // The C library's math, declared here: in C++, <math.h> brings <cmath>'s
  // templates, 20,000 lines that took 0.3 s of every compile, a precompiled
  // header's load included (docs/performance.md). GCC and clang know each as
  // a built-in.
#define LF_C_MATH(name)                     \
    extern "C" float name##f(float) noexcept; \
    extern "C" double name(double) noexcept;
#define LF_C_MATH2(name)                           \
    extern "C" float name##f(float, float) noexcept; \
    extern "C" double name(double, double) noexcept;
  LF_C_MATH(sin)
  LF_C_MATH(cos)
  LF_C_MATH(tan)
  LF_C_MATH(tanh)
  LF_C_MATH(exp)
  LF_C_MATH(exp2)
  LF_C_MATH(expm1)
  LF_C_MATH(log)
  LF_C_MATH(log2)
  LF_C_MATH(log10)
  LF_C_MATH(log1p)
  LF_C_MATH(sqrt)
  LF_C_MATH(erf)
  LF_C_MATH(erfc)
  LF_C_MATH(floor)
  LF_C_MATH(ceil)
  LF_C_MATH(trunc)
  LF_C_MATH(rint)
  LF_C_MATH(nearbyint)
  LF_C_MATH(round)
  LF_C_MATH(fabs)
  LF_C_MATH2(fmod)
  LF_C_MATH2(copysign)
  LF_C_MATH2(fmin)
  LF_C_MATH2(fmax)
  LF_C_MATH2(pow)
#undef LF_C_MATH
#undef LF_C_MATH2
  extern "C" void* memcpy(void*, const void*, __SIZE_TYPE__) noexcept;

  // Checked against CPU eager, whose pow(x, 3) on half rounds once, and whose
  // half pow(x, 0.5) is pow(), not a root (see lf_pow_scalar_half),
#define LF_HALF_POW_ROUNDS_EACH_PRODUCT 0
#define LF_HALF_POW_ROOTS_AS_POW 1
  // and whose maximum, minimum and relu keep the first operand on a tie of
  // +0 and -0 (see lf_max_number).
#define LF_ZERO_TIES_AS_FMAX 0
#define LF_REDUCTION_TIES_TAKE_LATER 0
  // and whose add and sub round a CPU scalar to a half operand's dtype.
#define LF_HOST_SCALAR_HALF(x) lf_round_half(x)
#define LF_HOST_SCALAR_BF16(x) lf_round_bf16(x)
  // and which computes add's alpha * other and div's truncated quotient in
  // half or bfloat16 (see lf_inner).
#define LF_ROUNDS_INNER_RESULTS 1
  // and whose float-to-integer casts are x86's (see lf_f2i).
#if defined(__x86_64__) || defined(__i386__)
#define LF_F2I_AS_X86 1
#else
#define LF_F2I_AS_X86 0
#endif
#define LF_UNROLL
#define __global__
#define __device__
#define __forceinline__ inline
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
)CPP";

// A block's index and the grid's size, set by the entry point (kCpuEntry)
// before each block runs. Loads and stores are plain, so loops vectorize;
// a split row's last chunk is found with an atomic counter, as on a GPU.
constexpr const char* kCpuTarget = R"CPP(
#define LF_SERIAL_BLOCKS 1
  // glibc's vector math (libmvec), where the runtime found it: loops that
  // call these vectorize (LF_LIBMVEC is the glibc version, 222 or 235 on).
#if defined(LF_LIBMVEC) && defined(__x86_64__)
#define LF_VECTOR_MATH(name)                                                     \
    extern "C" float name##f(float) noexcept __attribute__((simd("notinbranch"))); \
    extern "C" double name(double) noexcept __attribute__((simd("notinbranch")));
  LF_VECTOR_MATH(sin)
  LF_VECTOR_MATH(cos)
  LF_VECTOR_MATH(exp)
  LF_VECTOR_MATH(log)
#if LF_LIBMVEC >= 235
  LF_VECTOR_MATH(exp2)
  LF_VECTOR_MATH(expm1)
  LF_VECTOR_MATH(log2)
  LF_VECTOR_MATH(log10)
  LF_VECTOR_MATH(log1p)
  LF_VECTOR_MATH(tan)
  LF_VECTOR_MATH(tanh)
  LF_VECTOR_MATH(erf)
  LF_VECTOR_MATH(erfc)
#endif
#endif
  static thread_local long long lf_block;
  static thread_local long long lf_grid;
#define lf_no_barrier_on_the_cpu()

  template <typename T, typename I>
  inline T lf_ld(const T* p, I i) {
    return p[i];
  }
  template <typename T, typename I, typename V>
  inline void lf_st(T* p, I i, V v) {
    p[i] = v;
  }
  template <typename V, typename T>
  inline V lf_vload(const T* p) {
    V v;
    memcpy(&v, p, sizeof(V));
    return v;
  }
  template <typename V, typename T>
  inline void lf_vstore(T* p, V v) {
    memcpy(p, &v, sizeof(V));
  }
  template <typename T, typename I>
  inline unsigned int lf_publish(T* partials, I slot, T v, unsigned int* counter) {
    partials[slot] = v;
    return __atomic_fetch_add(counter, 1u, __ATOMIC_ACQ_REL);
  }
  template <typename T, typename I>
  inline T lf_ld_published(const T* p, I i) {
    return p[i];
  }
)CPP";

}  // namespace

const char* HostKernelBuiltins() {
  return kHostBuiltins;
}

const KernelDialect& CpuDialect() {
  static const std::string prelude =
      std::string("\n") + kHostBuiltins + kCpuTarget + CommonKernelHelpers();
  static const KernelDialect dialect{
      "cpu",
      "static ",
      "0",
      "lf_block",
      "1",
      "lf_grid",
      "lf_no_barrier_on_the_cpu()",
      "__restrict__",
      prelude.c_str(),
      /*serial_blocks=*/true,
  };
  return dialect;
}

}  // namespace lazyfuse
