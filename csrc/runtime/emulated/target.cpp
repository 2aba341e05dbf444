#include "runtime/emulated/target.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/hash.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "kernels/dialect.h"
#include "runtime/emulated/launcher.h"
#include "runtime/host_library.h"

namespace lazyfuse {
namespace {

// Bytes before and after every output; a kernel that writes there is caught
// after the launch. A multiple of 16 keeps outputs aligned for vectors.
constexpr int64_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xA5;

// The guard bytes lie outside the storage, so that an output is a storage of
// its own at offset 0, as a GPU output is: what takes only whole tensors
// (a write in place into a step's input, donation) treats both alike.
class GuardedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    // torch's CPU allocator, which reports to the profiler as eager's does.
    auto* raw = new c10::DataPtr(c10::GetCPUAllocator()->allocate(n + 2 * kGuardBytes));
    auto* bytes = static_cast<unsigned char*>(raw->get());
    std::memset(bytes, kGuardByte, n + 2 * kGuardBytes);
    return {bytes + kGuardBytes, raw, &Release, c10::Device(c10::kCPU)};
  }

  void copy_data(void* dest, const void* src, size_t count) const override {
    std::memcpy(dest, src, count);
  }

  static bool Allocated(const c10::Storage& storage) {
    return storage.data_ptr().get_deleter() == &Release;
  }

 private:
  static void Release(void* context) {
    delete static_cast<c10::DataPtr*>(context);
  }
};

c10::Allocator* Guarded() {
  static auto* allocator = new GuardedAllocator;  // outlives every tensor
  return allocator;
}

// The entry point appended after the kernel: binds the thread's env and
// calls the kernel with each argument read from its 8-byte slot.
std::string Trampoline(const std::string& name, const std::vector<std::string>& types) {
  const SlotCall slot_call = CallFromSlots(name, types);
  return "\nextern \"C\" void " + std::string(kEmuEntryName) +
         "(const lf_emu_env* env, void** args) {\n  lf_env = env;\n" + slot_call.typedefs + "  " +
         slot_call.call + ";\n}\n";
}

// CUDA source is C++17, as NVRTC compiles it; -O1 keeps compiles short and
// loops fast enough for the small tensors emulation runs on. -fwrapv:
// signed integers wrap on a GPU (and in eager's kernels); without it the
// host compiler may assume int64 overflow never happens. -ffp-contract=off:
// NVRTC compiles with --fmad=false, so both round every multiply and add.
const HostBuild& EmulatedBuild() {
  static const HostBuild build{
      "-std=c++17 -O1 -w -fwrapv -ffp-contract=off", "", "emulated", false};
  return build;
}

class EmulatedKernel : public LoadedKernel {
 public:
  std::shared_ptr<HostLibrary> library;
  EmuEntry entry = nullptr;
  std::string source_path;
};

std::shared_ptr<EmulatedKernel> LoadLibrary(const std::string& full_source,
                                            const std::string& name) {
  auto kernel = std::make_shared<EmulatedKernel>();
  kernel->library = LoadHostLibrary(EmulatedBuild(), full_source, name);
  kernel->entry = reinterpret_cast<EmuEntry>(kernel->library->Symbol(kEmuEntryName));
  kernel->source_path = kernel->library->source_path();
  return kernel;
}

// The bytes a strided tensor's elements span.
emulated::EmuBuffer Extent(const at::Tensor& tensor, bool writable, std::string name) {
  emulated::EmuBuffer buffer;
  buffer.writable = writable;
  buffer.name = std::move(name);
  if (tensor.numel() == 0) {
    return buffer;
  }
  int64_t low = 0;
  int64_t high = 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    const int64_t span = (tensor.size(d) - 1) * tensor.stride(d);
    (span < 0 ? low : high) += span;
  }
  const auto base = reinterpret_cast<uintptr_t>(tensor.data_ptr());
  const int64_t element = static_cast<int64_t>(tensor.element_size());
  buffer.begin = base + low * element;
  buffer.end = base + (high + 1) * element;
  return buffer;
}

void RunChecked(const EmulatedKernel& kernel,
                const std::string& name,
                int64_t grid,
                int64_t block,
                void** params,
                const std::vector<at::Tensor>& inputs,
                const std::vector<at::Tensor>& outputs,
                const std::vector<at::Tensor>& workspace,
                double timeout) {
  emulated::EmuLaunch launch;
  launch.entry = kernel.entry;
  launch.kernel = name;
  launch.source_path = kernel.source_path;
  launch.grid = grid;
  launch.block = block;
  launch.params = params;
  launch.barrier_timeout_seconds = timeout;
  for (size_t k = 0; k < inputs.size(); ++k) {
    // 0-dim inputs are host scalars or constants, passed by value.
    if (inputs[k].dim() > 0) {
      launch.buffers.push_back(Extent(inputs[k], false, "in" + std::to_string(k)));
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    launch.buffers.push_back(Extent(outputs[k], true, "out" + std::to_string(k)));
    for (emulated::EmuBuffer& input : launch.buffers) {
      if (!input.writable && input.begin == launch.buffers.back().begin &&
          input.begin != input.end) {
        const size_t bytes = input.end - input.begin;
        launch.buffers.back().written.reset(new std::atomic<unsigned char>[bytes]());
        input.written = launch.buffers.back().written;
      }
    }
  }
  for (size_t k = 0; k < workspace.size(); ++k) {
    launch.buffers.push_back(Extent(workspace[k], true, "workspace" + std::to_string(k)));
    launch.buffers.back().readable_too = true;
  }
  emulated::RunEmulatedLaunch(launch);
}

class EmulatedTarget : public KernelTarget {
 public:
  explicit EmulatedTarget(const EmulationLimits& limits) : limits_(limits) {}

  const KernelDialect& dialect() const override {
    return EmulatedCudaDialect();
  }
  c10::Device device() const override {
    return c10::Device(c10::kCPU);
  }
  LaunchLimits limits() override {
    LaunchLimits limits;
    limits.processors = 1;
    limits.block = limits_.block;
    limits.max_grid = limits_.grid;
    return limits;
  }

  std::shared_ptr<LoadedKernel> Load(const KernelSource& source) override {
    return LoadLibrary(source.source + Trampoline(source.name, source.parameter_types),
                       source.name);
  }

  // A graph's kernels compile side by side before its first run.
  bool batches() const override {
    return true;
  }

  at::Tensor NewOutput(const std::vector<int64_t>& sizes, at::ScalarType dtype) override {
    return at::detail::empty_generic(
        sizes, Guarded(), c10::DispatchKeySet(c10::DispatchKey::CPU), dtype, std::nullopt);
  }

  void Launch(const LoadedKernel& kernel,
              const KernelSource& source,
              const LaunchConfig& config,
              void** params,
              const LaunchTensors& tensors) override {
    const auto& emulated = static_cast<const EmulatedKernel&>(kernel);
    RunChecked(emulated,
               source.name,
               config.grid,
               config.block,
               params,
               tensors.inputs,
               tensors.outputs,
               tensors.workspace,
               limits_.barrier_timeout_seconds);
    for (size_t k = 0; k < tensors.outputs.size(); ++k) {
      // An output in an input's memory has no guard bytes of its own.
      const void* data = tensors.outputs[k].const_data_ptr();
      if (std::none_of(tensors.inputs.begin(), tensors.inputs.end(), [&](const at::Tensor& in) {
            return in.dim() > 0 && in.const_data_ptr() == data;
          })) {
        CheckGuards(tensors.outputs[k], source.name, emulated.source_path, "out", k);
      }
    }
    for (size_t k = 0; k < tensors.workspace.size(); ++k) {
      CheckGuards(tensors.workspace[k], source.name, emulated.source_path, "workspace", k);
    }
  }

 private:
  static void CheckGuards(const at::Tensor& output,
                          const std::string& name,
                          const std::string& path,
                          const char* role,
                          size_t k) {
    TORCH_CHECK(GuardedAllocator::Allocated(output.storage()),
                "lazyfuse: emulated kernel ",
                name,
                ": ",
                role,
                k,
                " was not allocated with guard bytes");
    // Through the storage: an empty output's data_ptr() is null, but its
    // guard bytes are still there around it.
    const auto* data = static_cast<const unsigned char*>(output.storage().data());
    const auto bytes = static_cast<int64_t>(output.storage().nbytes());
    for (int64_t i = 1; i <= kGuardBytes; ++i) {
      TORCH_CHECK(data[-i] == kGuardByte && data[bytes + i - 1] == kGuardByte,
                  "lazyfuse: emulated kernel ",
                  name,
                  ": a write outside ",
                  role,
                  k,
                  " (its guard bytes changed)\nsource: ",
                  path);
    }
  }

  EmulationLimits limits_;
};

}  // namespace

std::shared_ptr<KernelTarget> MakeEmulatedTarget(const EmulationLimits& limits) {
  return std::make_shared<EmulatedTarget>(limits);
}

void LaunchEmulatedSource(const std::string& source,
                          const std::string& name,
                          const std::vector<at::Tensor>& inputs,
                          const std::vector<at::Tensor>& outputs,
                          int64_t grid,
                          int64_t block) {
  std::vector<std::string> types;
  std::vector<uint64_t> slots;
  for (const at::Tensor& input : inputs) {
    TORCH_CHECK(input.is_cpu(), "lazyfuse: emulated kernels take CPU tensors");
    if (input.dim() == 0) {
      TORCH_CHECK(RegisterTypeName(input.scalar_type()) == StorageTypeName(input.scalar_type()),
                  "lazyfuse: a ",
                  input.scalar_type(),
                  " host scalar is not supported here");
      types.push_back(RegisterTypeName(input.scalar_type()));
      uint64_t slot = 0;
      std::memcpy(&slot, input.data_ptr(), input.element_size());
      slots.push_back(slot);
    } else {
      types.push_back("const " + std::string(StorageTypeName(input.scalar_type())) + "*");
      slots.push_back(reinterpret_cast<uint64_t>(input.data_ptr()));
    }
  }
  for (const at::Tensor& output : outputs) {
    types.push_back(std::string(StorageTypeName(output.scalar_type())) + "*");
    slots.push_back(reinterpret_cast<uint64_t>(output.data_ptr()));
  }
  std::vector<void*> params;
  for (uint64_t& slot : slots) {
    params.push_back(&slot);
  }
  auto kernel = LoadLibrary(source + Trampoline(name, types), name);
  RunChecked(*kernel, name, grid, block, params.data(), inputs, outputs, {}, 30);
}

}  // namespace lazyfuse
