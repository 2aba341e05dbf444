#include "runtime/launch_report.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdio>
#include <cstdlib>

namespace lazyfuse {
namespace {

// The bytes a tensor's elements span in memory: a broadcast input is read
// once, not once per element it stands for.
int64_t SpannedBytes(const at::Tensor& tensor) {
  if (tensor.numel() == 0) {
    return 0;
  }
  int64_t last = 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    last += (tensor.size(d) - 1) * std::abs(tensor.stride(d));
  }
  return (last + 1) * static_cast<int64_t>(tensor.element_size());
}

}  // namespace

void WaitForDevice(const c10::Device& device) {
  if (device.is_cuda()) {
    c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device).synchronize();
  }
}

void PrintLaunch(const KernelSource& source,
                 bool generic,
                 const std::vector<at::Tensor>& inputs,
                 const std::vector<at::Tensor>& outputs,
                 double seconds) {
  int64_t read = 0;
  for (const at::Tensor& input : inputs) {
    read += input.dim() > 0 ? SpannedBytes(input) : 0;
  }
  int64_t written = 0;
  for (const at::Tensor& output : outputs) {
    written += SpannedBytes(output);
  }
  const double bytes = static_cast<double>(read + written);
  std::fprintf(stderr,
               "[lazyfuse] kernel %s%s: %.3f MB read, %.3f MB written, %.1f us, %.1f GB/s\n",
               source.name.c_str(),
               generic ? " (generic)" : "",
               static_cast<double>(read) / 1e6,
               static_cast<double>(written) / 1e6,
               seconds * 1e6,
               seconds > 0 ? bytes / seconds / 1e9 : 0.0);
}

}  // namespace lazyfuse
