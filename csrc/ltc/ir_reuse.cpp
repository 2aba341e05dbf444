#include "ltc/ir_reuse.h"

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
  return a.toLong() == b.toLong();
}

}  // namespace lazyfuse
