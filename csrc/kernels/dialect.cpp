#include "kernels/dialect.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdio>
#include <string>

namespace lazyfuse {
namespace {

// NVRTC compiles with no system headers, so the prelude includes nothing:
// half conversions are PTX. Loads and stores go through lf_ld/lf_st and
// lf_vload/lf_vstore so the emulated target can check each one.
constexpr const char* kCudaTarget = R"CUDA(
typedef unsigned short lf_half;
typedef unsigned short lf_bf16;
// CUDA eager's pow(x, 3) and pow(x, -2) on half round every product, and
// its pow(x, 0.5) and pow(x, -0.5) are roots.
#define LF_HALF_POW_ROUNDS_EACH_PRODUCT 1
#define LF_HALF_POW_ROOTS_AS_POW 0
// CUDA eager's maximum and relu are fmaxf: its choice between +0 and -0.
#define LF_ZERO_TIES_AS_FMAX 1
// CUDA eager's amax and amin take the later of two equal values.
#define LF_REDUCTION_TIES_TAKE_LATER 1
// CUDA eager computes add's alpha * other and div's quotient in float.
#define LF_ROUNDS_INNER_RESULTS 0
// CUDA eager's add and sub read a CPU scalar at full precision
// (original_scalar_value), where CPU eager rounds it to a half operand.
#define LF_HOST_SCALAR_HALF(x) (x)
#define LF_HOST_SCALAR_BF16(x) (x)
#define LF_INF (__int_as_float(0x7f800000))
#define LF_DINF (__longlong_as_double(0x7ff0000000000000LL))
// Row loops stride by a compile-time block size; unrolled, a thread keeps
// several loads in flight.
#define LF_UNROLL _Pragma("unroll 4")

__device__ __forceinline__ float lf_h2f(lf_half h) {
  float f;
  asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ lf_half lf_f2h(float f) {
  lf_half h;
  asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
  return h;
}

template <typename T, typename I> __device__ __forceinline__ T lf_ld(const T* p, I i) {
  return p[i];
}
template <typename T, typename I, typename V> __device__ __forceinline__ void lf_st(T* p, I i, V v) {
  p[i] = v;
}
template <typename V, typename T> __device__ __forceinline__ V lf_vload(const T* p) {
  return *reinterpret_cast<const V*>(p);
}
template <typename V, typename T> __device__ __forceinline__ void lf_vstore(T* p, V v) {
  *reinterpret_cast<V*>(p) = v;
}
// Split reductions: a block stores its partial, makes it visible device-wide,
// then counts itself in; the block that sees the last count reads every
// partial past its own L1 (volatile), as CUDA's threadFenceReduction does.
template <typename T, typename I>
__device__ __forceinline__ unsigned int lf_publish(T* partials, I slot, T v, unsigned int* counter) {
  partials[slot] = v;
  __threadfence();
  return atomicAdd(counter, 1u);
}
template <typename T, typename I> __device__ __forceinline__ T lf_ld_published(const T* p, I i) {
  return *(const volatile T*)(p + i);
}
)CUDA";

}  // namespace

const KernelDialect& CudaDialect() {
  static const std::string prelude = std::string(kCudaTarget) + CommonKernelHelpers();
  static const KernelDialect dialect{
      "cuda",
      "extern \"C\" __global__ ",
      "threadIdx.x",
      "blockIdx.x",
      "blockDim.x",
      "gridDim.x",
      "__syncthreads()",
      "__restrict__",
      prelude.c_str(),
  };
  return dialect;
}

const char* StorageTypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float";
    case at::kDouble:
      return "double";
    case at::kHalf:
      return "lf_half";
    case at::kBFloat16:
      return "lf_bf16";
    case at::kBool:
      return "bool";
    case at::kByte:
      return "unsigned char";
    case at::kChar:
      return "signed char";
    case at::kShort:
      return "short";
    case at::kInt:
      return "int";
    case at::kLong:
      return "long long";
    default:
      TORCH_CHECK(false, "lazyfuse: kernel codegen does not handle dtype ", dtype);
  }
}

const char* RegisterTypeName(at::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16 ? "float" : StorageTypeName(dtype);
}

std::string LoadConversion(at::ScalarType dtype, const std::string& stored) {
  if (dtype == at::kHalf) {
    return "lf_h2f(" + stored + ")";
  }
  if (dtype == at::kBFloat16) {
    return "lf_bf2f(" + stored + ")";
  }
  return stored;
}

std::string StoreConversion(at::ScalarType dtype, const std::string& value) {
  if (dtype == at::kHalf) {
    return "lf_f2h(" + value + ")";
  }
  if (dtype == at::kBFloat16) {
    return "lf_f2bf(" + value + ")";
  }
  return "(" + std::string(StorageTypeName(dtype)) + ")(" + value + ")";
}

const char* StorageSuffix(at::ScalarType dtype) {
  return dtype == at::kHalf ? "_half" : dtype == at::kBFloat16 ? "_bf16" : "";
}

std::string FromFloat(at::ScalarType to, const std::string& value) {
  const std::string type = RegisterTypeName(to);
  if (at::isIntegralType(to, /*includeBool=*/false)) {
    return "lf_f2i<" + type + ">(" + value + ")";
  }
  return "(" + type + ")(" + value + ")";
}

std::string RoundToDtype(at::ScalarType dtype, const std::string& value) {
  if (dtype == at::kHalf) {
    return "lf_round_half(" + value + ")";
  }
  if (dtype == at::kBFloat16) {
    return "lf_round_bf16(" + value + ")";
  }
  return value;
}

std::string ConstantLiteral(const at::Tensor& value) {
  const at::Scalar scalar = value.item();
  if (value.scalar_type() == at::kBool) {
    return scalar.toBool() ? "true" : "false";
  }
  if (!at::isFloatingType(value.scalar_type())) {
    return "(" + std::to_string(scalar.toLong()) + "LL)";
  }
  const double v = scalar.toDouble();
  if (std::isnan(v)) {
    return "(LF_DINF - LF_DINF)";
  }
  if (std::isinf(v)) {
    return v > 0 ? "LF_DINF" : "(-LF_DINF)";
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", v);
  std::string text = buffer;
  if (text.find_first_of(".eE") == std::string::npos) {
    text += ".0";
  }
  return "(" + text + ")";
}

}  // namespace lazyfuse
