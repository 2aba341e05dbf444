#include "runtime/cuda/target.h"

#include <ATen/Functions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/hash.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "runtime/cuda/loader.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/module_registry.h"
#include "runtime/parallel_compile.h"

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
  int sm = 0;                         // compute capability, e.g. 90
  int processors = 0;                 // streaming multiprocessors
  cuda::CUcontext context = nullptr;  // the device's primary context, torch's
};

constexpr int kMaxDevices = 64;

// Read once per device, then without a lock or a driver call.
const DeviceFacts& FactsOf(int index) {
  static std::array<std::atomic<const DeviceFacts*>, kMaxDevices> known{};
  TORCH_CHECK(index >= 0 && index < kMaxDevices, "lazyfuse: CUDA device index ", index);
  if (const DeviceFacts* facts = known[index].load(std::memory_order_acquire)) {
    return *facts;
  }
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (const DeviceFacts* facts = known[index].load(std::memory_order_acquire)) {
    return *facts;
  }
  const cuda::DriverApi& driver = cuda::Driver();
  cuda::CUdevice device = 0;
  CheckDriver(driver.cuDeviceGet(&device, index), "cuDeviceGet");
  constexpr int kMultiprocessorCount = 16;
  constexpr int kMajor = 75;
  constexpr int kMinor = 76;
  auto* facts = new DeviceFacts();  // leaked: read by every launch until exit
  int major = 0;
  int minor = 0;
  CheckDriver(driver.cuDeviceGetAttribute(&facts->processors, kMultiprocessorCount, device),
              "cuDeviceGetAttribute");
  CheckDriver(driver.cuDeviceGetAttribute(&major, kMajor, device), "cuDeviceGetAttribute");
  CheckDriver(driver.cuDeviceGetAttribute(&minor, kMinor, device), "cuDeviceGetAttribute");
  facts->sm = major * 10 + minor;
  CheckDriver(driver.cuDevicePrimaryCtxRetain(&facts->context, device), "cuDevicePrimaryCtxRetain");
  known[index].store(facts, std::memory_order_release);
  return *facts;
}

// Makes the device's primary context current for a load, launch or unload:
// modules belong to a context, and the thread's current one may be another
// device's (torch.cuda.set_device). A context that was current is put back,
// since the runtime API reads it as the current device; a thread that had
// none keeps the device's, as torch would bind it.
class ContextScope {
 public:
  explicit ContextScope(const DeviceFacts& facts) {
    const cuda::DriverApi& driver = cuda::Driver();
    CheckDriver(driver.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
    if (previous_ != facts.context) {
      CheckDriver(driver.cuCtxSetCurrent(facts.context), "cuCtxSetCurrent");
      restore_ = previous_ != nullptr;
    }
  }
  ~ContextScope() {
    if (restore_) {
      cuda::Driver().cuCtxSetCurrent(previous_);
    }
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  cuda::CUcontext previous_ = nullptr;
  bool restore_ = false;
};

class CudaModule {
 public:
  CudaModule(const DeviceFacts& facts, const std::string& binary) : facts_(facts) {
    ContextScope scope(facts_);
    CheckDriver(cuda::Driver().cuModuleLoadData(&module, binary.c_str()), "cuModuleLoadData");
  }
  ~CudaModule() {
    ContextScope scope(facts_);
    cuda::Driver().cuModuleUnload(module);  // nothing to do if it fails
  }
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  cuda::CUmodule module = nullptr;

 private:
  const DeviceFacts& facts_;
  LoadedModuleCount counted_;
};

class CudaKernel : public LoadedKernel {
 public:
  CudaKernel(std::shared_ptr<CudaModule> module, cuda::CUfunction function)
      : module(std::move(module)), function(function) {}

  // At most the blocks of `block` threads the SMs hold at once. Every fused
  // kernel loops over its work by the grid, so any grid computes the same,
  // but blocks past one wave start late, when others finish, and run on a
  // fraction of the chip: on an H200, softmax's 4224 blocks of 64 threads
  // ran as 1.33 waves (ncu), 24 blocks an SM where 32 were planned.
  int64_t CapToOneWave(int64_t grid, int64_t block, int processors) const {
    const uint64_t known = wave_.load(std::memory_order_relaxed);
    int64_t per_processor = static_cast<int64_t>(known & 0xffffffffu);
    if (known == 0 || static_cast<int64_t>(known >> 32) != block) {
      int blocks = 0;
      const auto query = cuda::Driver().cuOccupancyMaxActiveBlocksPerMultiprocessor;
      if (query == nullptr || query(&blocks, function, static_cast<int>(block), 0) != 0) {
        blocks = 0;  // unknown: the planned grid stands
      }
      per_processor = blocks;
      wave_.store((static_cast<uint64_t>(block) << 32) | static_cast<uint32_t>(blocks),
                  std::memory_order_relaxed);
    }
    return per_processor > 0 ? std::min(grid, per_processor * processors) : grid;
  }

  std::shared_ptr<CudaModule> module;
  cuda::CUfunction function;

 private:
  mutable std::atomic<uint64_t> wave_{0};  // block size << 32 | blocks an SM holds
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
  LaunchLimits limits() override {
    LaunchLimits limits;
    limits.processors = FactsOf(Index()).processors;
    return limits;
  }

  std::shared_ptr<LoadedKernel> Load(const KernelSource& source) override {
    const int index = Index();
    return LoadCompiled(
        source, cuda::CompileKernel(source.source, source.name, FactsOf(index).sm), index);
  }

  // A graph's kernels compile side by side before its first run. Only
  // NVRTC runs on the helper threads: the device is the caller's, and the
  // modules load on its thread.
  bool batches() const override {
    return true;
  }
  std::vector<std::shared_ptr<LoadedKernel>> LoadBatch(
      const std::vector<KernelSource>& sources) override {
    const int index = Index();
    const int sm = FactsOf(index).sm;
    std::vector<std::shared_ptr<const CompiledKernel>> compiled(sources.size());
    ForEachInParallel(sources.size(), [&](size_t i) {
      try {
        compiled[i] = cuda::CompileKernel(sources[i].source, sources[i].name, sm);
      } catch (const std::exception&) {
        TORCH_LAZY_COUNTER("LazyFuseBatchCompileFailed", 1);  // its launch reports why
      }
    });
    std::vector<std::shared_ptr<LoadedKernel>> loaded(sources.size());
    for (size_t i = 0; i < sources.size(); ++i) {
      try {
        loaded[i] = compiled[i] ? LoadCompiled(sources[i], compiled[i], index) : nullptr;
      } catch (const std::exception&) {
        TORCH_LAZY_COUNTER("LazyFuseBatchCompileFailed", 1);
      }
    }
    return loaded;
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
    const DeviceFacts& facts = FactsOf(device.index());
    ContextScope scope(facts);
    c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device);
    const auto& cuda_kernel = static_cast<const CudaKernel&>(kernel);
    const int64_t grid = cuda_kernel.CapToOneWave(config.grid, config.block, facts.processors);
    CheckDriver(cuda::Driver().cuLaunchKernel(cuda_kernel.function,
                                              static_cast<unsigned int>(grid),
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
  std::shared_ptr<LoadedKernel> LoadCompiled(const KernelSource& source,
                                             const std::shared_ptr<const CompiledKernel>& compiled,
                                             int index) {
    static auto* modules = new ModuleRegistry<CudaModule>();
    const DeviceFacts& facts = FactsOf(index);
    const std::string key = std::to_string(index) + "_" +
                            torch::lazy::HashToString(torch::lazy::Hash(compiled->binary));
    std::shared_ptr<CudaModule> module = modules->GetOrLoad(
        key, [&] { return std::make_shared<CudaModule>(facts, compiled->binary); });
    cuda::CUfunction function = nullptr;
    {
      ContextScope scope(facts);
      CheckDriver(
          cuda::Driver().cuModuleGetFunction(&function, module->module, source.name.c_str()),
          "cuModuleGetFunction");
    }
    return std::make_shared<CudaKernel>(std::move(module), function);
  }

  int Index() const {
    if (device_.has_index()) {
      return device_.index();
    }
    return c10::impl::getDeviceGuardImpl(c10::kCUDA)->getDevice().index();
  }

  c10::Device device_;
};

}  // namespace

std::shared_ptr<KernelTarget> MakeCudaTarget(c10::Device device) {
  return std::make_shared<CudaTarget>(device);
}

}  // namespace lazyfuse
