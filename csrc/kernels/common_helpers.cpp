// The kernel helpers every dialect's prelude ends with (math, rounding,
// NaN rules, reductions), written once in CUDA's dialect: each target's
// prelude first defines the CUDA built-ins they use.

#include "kernels/dialect.h"

namespace lazyfuse {
namespace {

// Written once for every target: each target's prelude defines CUDA's
// built-ins (__float_as_uint, expf, __shfl_xor_sync, ...) these use. A target
// whose blocks are one serial thread (LF_SERIAL_BLOCKS) has no block helpers.
constexpr const char* kCommonHelpers = R"CUDA(
__device__ __forceinline__ float lf_bf2f(lf_bf16 b) {
  return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ lf_bf16 lf_f2bf(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (lf_bf16)0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (lf_bf16)(u >> 16);
}
__device__ __forceinline__ float lf_round_half(float f) { return lf_h2f(lf_f2h(f)); }
__device__ __forceinline__ float lf_round_bf16(float f) { return lf_bf2f(lf_f2bf(f)); }
// An inner result of an op (add's alpha and alpha * other, the quotient
// div(rounding_mode="trunc") truncates): CPU eager computes it in half or
// bfloat16 (c10::Half arithmetic, Vectorized<Half>), rounding it, where
// CUDA eager keeps float. LF_ROUNDS_INNER_RESULTS says which a target follows.
template <typename T> __device__ __forceinline__ T lf_inner(T x) { return x; }
#if LF_ROUNDS_INNER_RESULTS
__device__ __forceinline__ float lf_inner_half(float x) { return lf_round_half(x); }
__device__ __forceinline__ float lf_inner_bf16(float x) { return lf_round_bf16(x); }
#else
__device__ __forceinline__ float lf_inner_half(float x) { return x; }
__device__ __forceinline__ float lf_inner_bf16(float x) { return x; }
#endif

#define LF_UNARY(name, ffn, dfn) \
  __device__ __forceinline__ float name(float x) { return ffn(x); } \
  __device__ __forceinline__ double name(double x) { return dfn(x); }
LF_UNARY(lf_exp, expf, exp)
LF_UNARY(lf_exp2, exp2f, exp2)
LF_UNARY(lf_expm1, expm1f, expm1)
LF_UNARY(lf_log, logf, log)
LF_UNARY(lf_log2, log2f, log2)
LF_UNARY(lf_log10, log10f, log10)
LF_UNARY(lf_log1p, log1pf, log1p)
LF_UNARY(lf_sqrt, sqrtf, sqrt)
LF_UNARY(lf_rsqrt, rsqrtf, rsqrt)
LF_UNARY(lf_sin, sinf, sin)
LF_UNARY(lf_cos, cosf, cos)
LF_UNARY(lf_tan, tanf, tan)
LF_UNARY(lf_tanh, tanhf, tanh)
LF_UNARY(lf_erf, erff, erf)
LF_UNARY(lf_erfc, erfcf, erfc)
LF_UNARY(lf_floor, floorf, floor)
LF_UNARY(lf_ceil, ceilf, ceil)
LF_UNARY(lf_trunc, truncf, trunc)
LF_UNARY(lf_rint, rintf, rint)
__device__ __forceinline__ float lf_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double lf_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float lf_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double lf_fmod(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float lf_copysign(float a, float b) { return copysignf(a, b); }
__device__ __forceinline__ double lf_copysign(double a, double b) { return copysign(a, b); }
// ATen's pow with a scalar exponent: the common integral and half exponents
// are products, roots and reciprocals, not pow().
template <typename T> __device__ __forceinline__ T lf_pow_scalar(T x, T e) {
  if (e == (T)2) return x * x;
  if (e == (T)3) return x * x * x;
  if (e == (T)0.5) return lf_sqrt(x);
  if (e == (T)-0.5) return lf_rsqrt(x);
  if (e == (T)-1) return (T)1 / x;
  if (e == (T)-2) return (T)1 / (x * x);
  return lf_pow(x, e);
}
// ATen's pow(x, 3) and pow(x, -2) multiply in the storage type when it is
// bfloat16, rounding each product: on the CPU and on CUDA. For half, CUDA
// eager does so too, while CPU eager computes in float and rounds once; each
// target's prelude says which eager it matches (LF_HALF_POW_ROUNDS_EACH_PRODUCT).
__device__ __forceinline__ float lf_pow_scalar_bf16(float x, float e) {
  if (e == 3.f) return lf_round_bf16(x * x) * x;
  if (e == -2.f) return 1.f / lf_round_bf16(x * x);
  return lf_pow_scalar(x, e);
}
__device__ __forceinline__ float lf_pow_scalar_half(float x, float e) {
#if LF_HALF_POW_ROOTS_AS_POW
  // pow(), not a root: they differ at -inf and -0 (pow(-inf, 0.5) is inf).
  if (e == 0.5f || e == -0.5f) return lf_pow(x, e);
#endif
#if LF_HALF_POW_ROUNDS_EACH_PRODUCT
  if (e == 3.f) return lf_round_half(x * x) * x;
  if (e == -2.f) return 1.f / lf_round_half(x * x);
#endif
  return lf_pow_scalar(x, e);
}
// ATen's floor division of floats: through fmod, so that 1.0 // 0.1 is 9
// (floor(1.0 / 0.1) would give 10).
template <typename T> __device__ __forceinline__ T lf_div_floor(T a, T b) {
  if (b == (T)0) return a / b;
  const T mod = lf_fmod(a, b);
  T div = (a - mod) / b;
  if (mod != (T)0 && (b < (T)0) != (mod < (T)0)) div -= (T)1;
  if (div == (T)0) return lf_copysign((T)0, a / b);
  T floordiv = lf_floor(div);
  if (div - floordiv > (T)0.5) floordiv += (T)1;
  return floordiv;
}

template <typename T> __device__ __forceinline__ bool lf_isnan(T x) { return x != x; }
// A float converted to an integer type I, as eager's conversion does on the
// target: a GPU's saturates (a plain cast); x86's truncates, and gives the
// minimum of int64 (to int64) or of int32 (then narrowed) for NaN and values
// out of range (LF_F2I_AS_X86), which C++ leaves undefined.
template <typename I, typename F> __device__ __forceinline__ I lf_f2i(F x) {
#if LF_F2I_AS_X86
  if (sizeof(I) == 8) {
    const bool out = !(x >= (F)-9223372036854775808.0 && x < (F)9223372036854775808.0);
    return out ? (I)(-9223372036854775807LL - 1) : (I)(long long)x;
  }
  const bool out = !(x >= (F)-2147483648.0 && x < (F)2147483648.0);
  return (I)(out ? (-2147483647 - 1) : (int)x);
#else
  return (I)x;
#endif
}
template <typename T> __device__ __forceinline__ T lf_abs(T x) { return x < (T)0 ? -x : x; }
__device__ __forceinline__ float lf_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double lf_abs(double x) { return fabs(x); }
__device__ __forceinline__ bool lf_abs(bool x) { return x; }
// ATen's sign: NaN compares false both ways and gives 0.
template <typename T> __device__ __forceinline__ T lf_sign(T x) {
  return (T)((x > (T)0) - (x < (T)0));
}
// The larger (smaller) of two numbers that are not NaN. Which zero a tie of
// +0 and -0 gives is eager's: CUDA eager's maximum, minimum, relu and clamp
// call ::max and ::min (fmaxf, fminf); CPU eager keeps the first operand.
// Each target's prelude says which it matches (LF_ZERO_TIES_AS_FMAX).
template <typename T> __device__ __forceinline__ T lf_max_number(T a, T b) {
  return b > a ? b : a;
}
template <typename T> __device__ __forceinline__ T lf_min_number(T a, T b) {
  return b < a ? b : a;
}
#if LF_ZERO_TIES_AS_FMAX
__device__ __forceinline__ float lf_max_number(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double lf_max_number(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ float lf_min_number(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double lf_min_number(double a, double b) { return fmin(a, b); }
#endif
template <typename T> __device__ __forceinline__ T lf_relu(T x) {
  return lf_isnan(x) ? x : lf_max_number(x, (T)0);
}
template <typename T> __device__ __forceinline__ T lf_maximum(T a, T b) {
  return lf_isnan(a) ? a : (lf_isnan(b) ? b : lf_max_number(a, b));
}
template <typename T> __device__ __forceinline__ T lf_minimum(T a, T b) {
  return lf_isnan(a) ? a : (lf_isnan(b) ? b : lf_min_number(a, b));
}
template <typename T> __device__ __forceinline__ T lf_clamp_min(T x, T lo) {
  return lf_isnan(lo) ? lo : (lf_isnan(x) ? x : lf_max_number(x, lo));
}
template <typename T> __device__ __forceinline__ T lf_clamp_max(T x, T hi) {
  return lf_isnan(hi) ? hi : (lf_isnan(x) ? x : lf_min_number(x, hi));
}
// Reductions (amax, amin) combine what they have, `a`, with a later value
// `b`. Of two equal values (+0 and -0) CPU eager keeps the one it has; CUDA
// eager takes the later one (seen on an H200: amax of [-0, 0] is 0, of
// [0, -0] is -0). Each target's prelude says which (LF_REDUCTION_TIES_TAKE_LATER).
template <typename T> __device__ __forceinline__ T lf_max_combine(T a, T b) {
#if LF_REDUCTION_TIES_TAKE_LATER
  return lf_isnan(a) ? a : (lf_isnan(b) ? b : (b < a ? a : b));
#else
  return lf_isnan(a) ? a : (lf_isnan(b) ? b : (a < b ? b : a));
#endif
}
template <typename T> __device__ __forceinline__ T lf_min_combine(T a, T b) {
#if LF_REDUCTION_TIES_TAKE_LATER
  return lf_isnan(a) ? a : (lf_isnan(b) ? b : (a < b ? a : b));
#else
  return lf_isnan(a) ? a : (lf_isnan(b) ? b : (b < a ? b : a));
#endif
}
template <typename T> __device__ __forceinline__ T lf_lerp(T a, T b, T w) {
  return lf_abs(w) < (T)0.5 ? a + w * (b - a) : b - (b - a) * ((T)1 - w);
}
template <typename T> __device__ __forceinline__ T lf_gelu(T x) {
  return (T)0.5 * x * ((T)1 + lf_erf(x * (T)0.70710678118654752440));
}
template <typename T> __device__ __forceinline__ T lf_gelu_tanh(T x) {
  const T inner = (T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x);
  return (T)0.5 * x * ((T)1 + lf_tanh(inner));
}
template <typename T> __device__ __forceinline__ T lf_gelu_backward(T g, T x) {
  const T cdf = (T)0.5 * ((T)1 + lf_erf(x * (T)0.70710678118654752440));
  const T pdf = lf_exp((T)-0.5 * x * x) * (T)0.39894228040143267794;
  return g * (cdf + x * pdf);
}
template <typename T> __device__ __forceinline__ T lf_gelu_tanh_backward(T g, T x) {
  const T k = (T)0.79788456080286535588;
  const T inner = k * (x + (T)0.044715 * x * x * x);
  const T t = lf_tanh(inner);
  const T dinner = k * ((T)1 + (T)3 * (T)0.044715 * x * x);
  return g * ((T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * dinner);
}
template <typename T> __device__ __forceinline__ T lf_silu_backward(T g, T x) {
  const T s = (T)1 / ((T)1 + lf_exp(-x));
  return g * s * ((T)1 + x * ((T)1 - s));
}

struct lf_sum_op {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct lf_max_op {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
    return lf_max_combine(a, b);
  }
};
struct lf_min_op {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
    return lf_min_combine(a, b);
  }
};

#ifndef LF_SERIAL_BLOCKS
// Reduces across the block; every thread gets the result. Warps reduce with
// shuffles, then one partial per warp goes through shared memory.
template <typename T, typename Op>
__device__ __forceinline__ T lf_block_reduce(T v, Op op, T* smem) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  const int warps = (blockDim.x + 31) >> 5;
  if (warps == 1) return v;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  T out = smem[0];
  for (int w = 1; w < warps; ++w) out = op(out, smem[w]);
  return out;
}

// Merges N statistics per thread across the block (merge(a, b) folds b into
// a), as lf_block_reduce does one value: a butterfly within each warp, then
// each warp's through shared memory, one array per statistic.
template <typename T, int N, typename Merge>
__device__ __forceinline__ void lf_block_merge(T (&v)[N], T* const (&smem)[N], Merge merge) {
  T other[N];
  for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
    for (int j = 0; j < N; ++j) other[j] = __shfl_xor_sync(0xffffffffu, v[j], offset);
    merge(v, other);
  }
  const int warps = (blockDim.x + 31) >> 5;
  if (warps == 1) return;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int j = 0; j < N; ++j) smem[j][threadIdx.x >> 5] = v[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = smem[j][0];
  for (int w = 1; w < warps; ++w) {
#pragma unroll
    for (int j = 0; j < N; ++j) other[j] = smem[j][w];
    merge(v, other);
  }
}

#endif
// Online softmax statistics: m is a running max, s the sum of exp(x - m).
// A merge rescales each side by exp(its max - the new max), except a side
// whose max is -inf and the new max too: exp(-inf - -inf) would be NaN where
// eager has seen only -inf so far. +inf still meets +inf, giving eager's NaN.
// Symmetric, so every lane of a butterfly agrees.
template <typename T> __device__ __forceinline__ bool lf_is_neg_inf(T x) {
  return x < (T)0 && x - x != x - x;
}
template <typename T> __device__ __forceinline__ void lf_softmax_merge(T& m, T& s, T m2, T s2) {
  const T mx = lf_maximum(m, m2);
  const T a = (m == mx && lf_is_neg_inf(m)) ? s : s * lf_exp(m - mx);
  const T b = (m2 == mx && lf_is_neg_inf(m2)) ? s2 : s2 * lf_exp(m2 - mx);
  m = mx;
  s = a + b;
}
#ifndef LF_SERIAL_BLOCKS
template <typename T>
__device__ __forceinline__ void lf_block_softmax_stats(T& m, T& s, T* smem_m, T* smem_s) {
  T v[2] = {m, s};
  T* const smem[2] = {smem_m, smem_s};
  lf_block_merge(v, smem, [](T(&a)[2], const T(&b)[2]) {
    lf_softmax_merge(a[0], a[1], b[0], b[1]);
  });
  m = v[0];
  s = v[1];
}

#endif
// Welford's running count n, mean and sum of squared deviations m2, so a row
// too long for the row cache gives var and layer norm's statistics in one
// read (of the row less its first element, if finite, so the mean is not
// rounded at the row's magnitude). The merge is symmetric (the mean is a
// weighted sum, the correction a product), so every lane of a butterfly
// agrees, and an empty side leaves the other as it was.
template <typename T> __device__ __forceinline__ T lf_finite_or_zero(T x) {
  return x - x == (T)0 ? x : (T)0;
}
template <typename T> __device__ __forceinline__ void lf_welford_add(T& n, T& mean, T& m2, T x) {
  n = n + (T)1;
  const T d = x - mean;
  mean = mean + d / n;
  m2 = m2 + d * (x - mean);
}
template <typename T>
__device__ __forceinline__ void lf_welford_merge(T& n, T& mean, T& m2, T n2, T mean2, T m22) {
  if (n2 == (T)0) return;
  if (n == (T)0) {
    n = n2;
    mean = mean2;
    m2 = m22;
    return;
  }
  const T total = n + n2;
  const T d = mean2 - mean;
  m2 = (m2 + m22) + d * d * (n * n2 / total);
  mean = (n * mean + n2 * mean2) / total;
  n = total;
}
#ifndef LF_SERIAL_BLOCKS
template <typename T>
__device__ __forceinline__ void lf_block_welford(T& n, T& mean, T& m2, T* smem_n, T* smem_mean,
                                                 T* smem_m2) {
  T v[3] = {n, mean, m2};
  T* const smem[3] = {smem_n, smem_mean, smem_m2};
  lf_block_merge(v, smem, [](T(&a)[3], const T(&b)[3]) {
    lf_welford_merge(a[0], a[1], a[2], b[0], b[1], b[2]);
  });
  n = v[0];
  mean = v[1];
  m2 = v[2];
}
#endif
)CUDA";

}  // namespace

const char* CommonKernelHelpers() {
  return kCommonHelpers;
}

}  // namespace lazyfuse
