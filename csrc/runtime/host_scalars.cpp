#include "runtime/host_scalars.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

namespace lazyfuse {

ArgSlot HostScalarSlot(const at::Tensor& value) {
  ArgSlot slot{};
  const void* data = value.const_data_ptr();
  switch (value.scalar_type()) {
    case at::kDouble:
      slot.f64 = *static_cast<const double*>(data);
      break;
    case at::kFloat:
      slot.f32 = *static_cast<const float*>(data);
      break;
    case at::kHalf:
      slot.f32 = static_cast<float>(*static_cast<const at::Half*>(data));
      break;
    case at::kBFloat16:
      slot.f32 = static_cast<float>(*static_cast<const at::BFloat16*>(data));
      break;
    case at::kLong:
      slot.i64 = *static_cast<const int64_t*>(data);
      break;
    case at::kInt:
      slot.i32 = *static_cast<const int32_t*>(data);
      break;
    case at::kShort:
      slot.i16 = *static_cast<const int16_t*>(data);
      break;
    case at::kChar:
      slot.i8 = *static_cast<const int8_t*>(data);
      break;
    case at::kByte:
      slot.u8 = *static_cast<const uint8_t*>(data);
      break;
    case at::kBool:
      slot.b = *static_cast<const bool*>(data);
      break;
    default:
      TORCH_CHECK(false, "lazyfuse: a fused kernel cannot take a ", value.scalar_type(), " scalar");
  }
  return slot;
}

bool IsHostScalar(const at::Tensor& tensor) {
  return tensor.dim() == 0 && tensor.is_cpu();
}

}  // namespace lazyfuse
