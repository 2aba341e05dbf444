#include "ltc/ir_reuse.h"

#include <c10/util/Exception.h>

#include <cstring>

namespace lazyfuse {

bool SameScalar(const at::Scalar& a, const at::Scalar& b) {
  if (a.type() != b.type()) {
    return false;
  }
  if (a.isFloatingPoint()) {
    // Bitwise: -0.0 is not 0.0 (x * -0.0 keeps the sign), and NaN is NaN.
    const double x = a.toDouble();
    const double y = b.toDouble();
    return std::memcmp(&x, &y, sizeof(double)) == 0;
  }
  if (a.isBoolean()) {
    return a.toBool() == b.toBool();
  }
  if (a.isComplex()) {
    return a.toComplexDouble() == b.toComplexDouble();
  }
  if (a.type() == at::ScalarType::UInt64) {
    return a.toUInt64() == b.toUInt64();
  }
  return a.toLong() == b.toLong();
}

torch::lazy::hash_t ScalarHash(const at::Scalar& value) {
  TORCH_CHECK(!value.isSymbolic(),
              "lazyfuse: a symbolic number (",
              value,
              ") cannot be an attribute of a lazy op");
  const torch::lazy::hash_t type = torch::lazy::Hash(value.type());
  if (value.isComplex()) {
    const c10::complex<double> z = value.toComplexDouble();
    return torch::lazy::HashCombine(
        type, torch::lazy::HashCombine(torch::lazy::Hash(z.real()), torch::lazy::Hash(z.imag())));
  }
  if (value.isFloatingPoint()) {
    return torch::lazy::HashCombine(type, torch::lazy::Hash(value.toDouble()));
  }
  if (value.isBoolean()) {
    return torch::lazy::HashCombine(type, torch::lazy::Hash(value.toBool()));
  }
  if (value.type() == at::ScalarType::UInt64) {
    return torch::lazy::HashCombine(type, torch::lazy::Hash(value.toUInt64()));
  }
  return torch::lazy::HashCombine(type, torch::lazy::Hash(value.toLong()));
}

torch::lazy::hash_t ScalarHash(const std::optional<at::Scalar>& value) {
  return value.has_value() ? ScalarHash(*value) : torch::lazy::Hash(false);
}

}  // namespace lazyfuse
