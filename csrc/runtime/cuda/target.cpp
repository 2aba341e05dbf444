#include "runtime/cuda/target.h"

#include <ATen/Functions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_map>

#include "runtime/cuda/loader.h"
#include "runtime/cuda/nvrtc.h"

namespace lazyfuse {
namespace {

void CheckDriver(int status, const char* what) {
  if (status == 0) {
    return;
  }
  const char* message = nullptr;
  cuda::Driver().cuGetErrorString(status, &message);
  TORCH_CHECK(false,
              "lazyfuse: ",
              what,
              " failed: ",
              message != nullptr ? message : "unknown CUDA driver error",
              " (",
              status,
              ")");
}

struct DeviceFacts {
  int sm = 0;          // compute capability, e.g. 90
  int processors = 0;  // streaming multiprocessors
};

// Binds torch's (primary) context to this thread; module loads and launches
// need one, and a thread that has not touched CUDA through torch has none.
const DeviceFacts& PrepareDevice(int index) {
  static std::mutex mutex;
  static std::unordered_map<int, DeviceFacts> facts;
  const cuda::DriverApi& driver = cuda::Driver();
  cuda::CUcontext context = nullptr;
  CheckDriver(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  cuda::CUdevice device = 0;
  CheckDriver(driver.cuDeviceGet(&device, index), "cuDeviceGet");
  if (context == nullptr) {
    CheckDriver(driver.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
    CheckDriver(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
  }
  std::lock_guard<std::mutex> lock(mutex);
  auto it = facts.find(index);
  if (it == facts.end()) {
    constexpr int kMultiprocessorCount = 16;
    constexpr int kMajor = 75;
    constexpr int kMinor = 76;
    DeviceFacts f;
    int major = 0;
    int minor = 0;
    CheckDriver(driver.cuDeviceGetAttribute(&f.processors, kMultiprocessorCount, device),
                "cuDeviceGetAttribute");
    CheckDriver(driver.cuDeviceGetAttribute(&major, kMajor, device), "cuDeviceGetAttribute");
    CheckDriver(driver.cuDeviceGetAttribute(&minor, kMinor, device), "cuDeviceGetAttribute");
    f.sm = major * 10 + minor;
    it = facts.emplace(index, f).first;
  }
  return it->second;
}

class CudaKernel : public LoadedKernel {
 public:
  explicit CudaKernel(cuda::CUfunction function) : function(function) {}
  cuda::CUfunction function;
};

class CudaTarget : public KernelTarget {
 public:
  explicit CudaTarget(c10::Device device) : device_(device) {}

  const KernelDialect& dialect() const override {
    return CudaDialect();
  }
  c10::Device device() const override {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(Index()));
  }
  // The SM count never changes; Load, which precedes every first launch,
  // reads it, so launches bind the context once (in Launch), as before.
  LaunchLimits limits() override {
    LaunchLimits limits;
    limits.processors = processors_ > 0 ? processors_ : PrepareDevice(Index()).processors;
    return limits;
  }

  std::shared_ptr<LoadedKernel> Load(const KernelSource& source) override {
    const DeviceFacts& facts = PrepareDevice(Index());
    processors_ = facts.processors;
    auto compiled = cuda::CompileKernel(source.source, source.name, facts.sm);
    const cuda::DriverApi& driver = cuda::Driver();
    cuda::CUmodule module = nullptr;
    CheckDriver(driver.cuModuleLoadData(&module, compiled->binary.c_str()), "cuModuleLoadData");
    cuda::CUfunction function = nullptr;
    CheckDriver(driver.cuModuleGetFunction(&function, module, source.name.c_str()),
                "cuModuleGetFunction");
    return std::make_shared<CudaKernel>(function);
  }

  at::Tensor NewOutput(const std::vector<int64_t>& sizes, at::ScalarType dtype) override {
    return at::empty(sizes, at::TensorOptions().dtype(dtype).device(device()));
  }

  void Launch(const LoadedKernel& kernel,
              const KernelSource& /*source*/,
              const LaunchConfig& config,
              void** params,
              const LaunchTensors& /*tensors*/) override {
    const c10::Device device = this->device();
    PrepareDevice(device.index());
    c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device);
    CheckDriver(cuda::Driver().cuLaunchKernel(static_cast<const CudaKernel&>(kernel).function,
                                              static_cast<unsigned int>(config.grid),
                                              1,
                                              1,
                                              static_cast<unsigned int>(config.block),
                                              1,
                                              1,
                                              0,
                                              stream.native_handle(),
                                              params,
                                              nullptr),
                "cuLaunchKernel");
  }

 private:
  int Index() const {
    if (device_.has_index()) {
      return device_.index();
    }
    return c10::impl::getDeviceGuardImpl(c10::kCUDA)->getDevice().index();
  }

  c10::Device device_;
  int processors_ = 0;
};

}  // namespace

std::shared_ptr<KernelTarget> MakeCudaTarget(c10::Device device) {
  return std::make_shared<CudaTarget>(device);
}

}  // namespace lazyfuse
