#include "runtime/cuda/fused_kernel.h"

#include <ATen/Functions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <unordered_map>

#include "kernels/writer.h"
#include "runtime/cuda/kernel_cache.h"
#include "runtime/cuda/loader.h"

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

int DeviceIndexOf(const c10::Device& device) {
  if (device.has_index()) {
    return device.index();
  }
  return c10::impl::getDeviceGuardImpl(c10::kCUDA)->getDevice().index();
}

// Kernel arguments by value: an 8-byte slot each, read at the C type of the
// kernel parameter.
union ArgSlot {
  void* pointer;
  double f64;
  float f32;
  long long i64;
  int i32;
  short i16;
  signed char i8;
  unsigned char u8;
  bool b;
};

ArgSlot HostScalarSlot(const at::Tensor& value) {
  ArgSlot slot{};
  const at::Scalar scalar = value.item();
  switch (value.scalar_type()) {
    case at::kDouble:
      slot.f64 = scalar.toDouble();
      break;
    case at::kFloat:
    case at::kHalf:
    case at::kBFloat16:
      slot.f32 = scalar.toFloat();
      break;
    case at::kLong:
      slot.i64 = scalar.toLong();
      break;
    case at::kInt:
      slot.i32 = scalar.toInt();
      break;
    case at::kShort:
      slot.i16 = scalar.toShort();
      break;
    case at::kChar:
      slot.i8 = scalar.toChar();
      break;
    case at::kByte:
      slot.u8 = scalar.toByte();
      break;
    case at::kBool:
      slot.b = scalar.toBool();
      break;
    default:
      TORCH_CHECK(false, "lazyfuse: a fused kernel cannot take a ", value.scalar_type(), " scalar");
  }
  return slot;
}

std::string FusedStepName(const Program& program, const FusionGroup& group) {
  std::string name = "lazyfuse::fused(";
  for (size_t i = 0; i < group.steps.size(); ++i) {
    name += (i ? ", " : "") + program.steps[group.steps[i]].qualified_op();
  }
  return name + ")";
}

}  // namespace

FusedKernel::FusedKernel(std::shared_ptr<const Program> program,
                         FusionGroup group,
                         c10::Device device)
    : program_(std::move(program)), group_(std::move(group)), device_(device) {
  for (BufferId id : group_.inputs) {
    constant_input_.push_back(std::any_of(program_->constants.begin(),
                                          program_->constants.end(),
                                          [&](const auto& c) { return c.first == id; }));
  }
}

KernelSignature FusedKernel::Bind(const std::vector<at::Tensor>& inputs) const {
  KernelSignature signature;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const at::Tensor& tensor = inputs[k];
    const bool constant = constant_input_[k];
    InputBinding binding;
    if (tensor.dim() == 0 && tensor.is_cpu()) {
      binding.kind = constant ? InputBinding::Kind::kConstant : InputBinding::Kind::kHostScalar;
      if (constant) {
        binding.literal = ConstantLiteral(tensor);
      }
    } else {
      TORCH_CHECK(tensor.is_cuda(),
                  "lazyfuse: fused kernel input ",
                  k,
                  " is on ",
                  tensor.device(),
                  ", expected the CUDA backing device");
      binding.strides = tensor.strides().vec();
      binding.aligned = reinterpret_cast<uintptr_t>(tensor.data_ptr()) % 16 == 0;
    }
    signature.inputs.push_back(std::move(binding));
  }
  return signature;
}

const FusedKernel::Variant& FusedKernel::VariantFor(const KernelSignature& signature) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& variant : variants_) {
    if (variant->signature == signature) {
      return *variant;
    }
  }
  auto variant = std::make_unique<Variant>();
  variant->signature = signature;
  variant->source = GenerateKernel(*program_, group_, signature, CudaDialect());
  const DeviceFacts& facts = PrepareDevice(DeviceIndexOf(device_));
  auto compiled = cuda::CompileKernel(variant->source.source, variant->source.name, facts.sm);
  const cuda::DriverApi& driver = cuda::Driver();
  cuda::CUmodule module = nullptr;
  CheckDriver(driver.cuModuleLoadData(&module, compiled->binary.c_str()), "cuModuleLoadData");
  CheckDriver(driver.cuModuleGetFunction(&variant->function, module, variant->source.name.c_str()),
              "cuModuleGetFunction");
  variants_.push_back(std::move(variant));
  return *variants_.back();
}

std::vector<at::Tensor> FusedKernel::Run(const std::vector<at::Tensor>& inputs) {
  const Variant& variant = VariantFor(Bind(inputs));
  const KernelSource& source = variant.source;
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(DeviceIndexOf(device_)));
  std::vector<at::Tensor> outputs;
  for (BufferId id : group_.outputs) {
    const BufferInfo& info = program_->buffers[id];
    outputs.push_back(at::empty(info.sizes, at::TensorOptions().dtype(info.dtype).device(device)));
  }
  if (source.work_items == 0) {
    return outputs;
  }
  std::vector<ArgSlot> slots;
  for (size_t k = 0; k < inputs.size(); ++k) {
    switch (variant.signature.inputs[k].kind) {
      case InputBinding::Kind::kTensor: {
        ArgSlot slot{};
        slot.pointer = inputs[k].data_ptr();
        slots.push_back(slot);
        break;
      }
      case InputBinding::Kind::kHostScalar:
        slots.push_back(HostScalarSlot(inputs[k]));
        break;
      case InputBinding::Kind::kConstant:
        break;
    }
  }
  for (const at::Tensor& output : outputs) {
    ArgSlot slot{};
    slot.pointer = output.data_ptr();
    slots.push_back(slot);
  }
  std::vector<void*> params;
  for (ArgSlot& slot : slots) {
    params.push_back(&slot);
  }
  const DeviceFacts& facts = PrepareDevice(device.index());
  const int64_t block = source.launch == LaunchShape::kElementwise ? 256 : source.block_size;
  int64_t grid = 0;
  if (source.launch == LaunchShape::kBlockPerRow) {
    grid = std::min<int64_t>(source.work_items, int64_t{facts.processors} * 32);
  } else {
    grid =
        std::min<int64_t>((source.work_items + block - 1) / block, int64_t{facts.processors} * 8);
  }
  grid = std::max<int64_t>(grid, 1);
  c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device);
  CheckDriver(cuda::Driver().cuLaunchKernel(variant.function,
                                            static_cast<unsigned int>(grid),
                                            1,
                                            1,
                                            static_cast<unsigned int>(block),
                                            1,
                                            1,
                                            0,
                                            stream.native_handle(),
                                            params.data(),
                                            nullptr),
              "cuLaunchKernel");
  TORCH_LAZY_COUNTER("LazyFuseKernelLaunches", 1);
  return outputs;
}

std::vector<KernelRecord> FusedKernel::Records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<KernelRecord> out;
  for (const auto& variant : variants_) {
    out.push_back({variant->source.name, variant->source.ops, variant->source.source});
  }
  return out;
}

Program BuildFusedProgram(std::shared_ptr<const Program> program,
                          const FusionPlan& plan,
                          c10::Device device,
                          std::vector<std::shared_ptr<FusedKernel>>* kernels) {
  Program out;
  out.buffers = program->buffers;
  out.parameters = program->parameters;
  out.constants = program->constants;
  out.results = program->results;
  for (const FusionGroup& group : plan.groups) {
    if (group.kind == GroupKind::kAten) {
      out.steps.push_back(program->steps[group.steps.front()]);
      continue;
    }
    auto kernel = std::make_shared<FusedKernel>(program, group, device);
    if (kernels != nullptr) {
      kernels->push_back(kernel);
    }
    Step step;
    step.op = FusedStepName(*program, group);
    step.kind = group.kind == GroupKind::kPointwise ? StepKind::kPointwise : StepKind::kReduction;
    step.inputs = group.inputs;
    step.outputs = group.outputs;
    step.fn = [kernel](KernelArgs& args) {
      std::vector<at::Tensor> inputs;
      for (size_t k = 0; k < kernel->input_count(); ++k) {
        inputs.push_back(args.tensor());
      }
      return kernel->Run(inputs);
    };
    out.steps.push_back(std::move(step));
  }
  ComputeLifetimes(out);
  return out;
}

}  // namespace lazyfuse
