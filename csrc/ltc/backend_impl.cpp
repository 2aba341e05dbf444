#include "ltc/backend_impl.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "fusion/planner.h"
#include "fusion/transposed_matmuls.h"
#include "ltc/backend_data.h"
#include "ltc/backing_ops_guard.h"
#include "ltc/config.h"
#include "ltc/device_data.h"
#include "ltc/graph_executor.h"
#include "ltc/pending_run.h"
#include "ltc/pending_run_failures.h"
#include "ltc/run_results.h"
#include "ltc/step_replay.h"
#include "ops/collective_call.h"
#include "ops/ir_builder.h"
#include "program/compile_log.h"
#include "program/executor.h"
#include "program/lowering_context.h"
#include "runtime/cpu/stream.h"
#include "runtime/cpu/target.h"
#include "runtime/cuda/target.h"
#include "runtime/emulated/target.h"
#include "runtime/fused_program.h"
#include "runtime/result_aliases.h"

namespace lazyfuse {
namespace {

const LazyFuseBackendData& AsLazyFuseData(const torch::lazy::BackendDataPtr& data) {
  const auto* ours = dynamic_cast<const LazyFuseBackendData*>(data.get());
  TORCH_CHECK(ours != nullptr, "lazyfuse: data belongs to another LTC backend");
  return *ours;
}

// By argument, whether the graph may write over its memory: nothing but the
// graph reads the data afterwards, and no other tensor shares the memory.
// Arguments may share one tensor (a parameter's value and its detached view,
// kept as one tensor by runtime/result_aliases.h); they are donated together, when
// every one of them may be overwritten, and the run overwrites the memory
// only at the last read of any of them (StartProgram).
std::vector<bool> DonatedArguments(c10::ArrayRef<torch::lazy::BackendDataPtr> arguments) {
  std::vector<bool> donated(arguments.size(), false);
  if (!DonationEnabled()) {
    return donated;
  }
  // By tensor: how many arguments hold it, and whether each may be overwritten.
  std::unordered_map<const c10::TensorImpl*, std::pair<long, bool>> sharing;
  for (const auto& argument : arguments) {
    const LazyFuseBackendData& data = AsLazyFuseData(argument);
    if (data.pending() || data.is_host_scalar()) {
      continue;
    }
    auto& [holders, overwritable] =
        sharing.try_emplace(data.tensor().unsafeGetTensorImpl(), 0, true).first->second;
    ++holders;
    // A capture reads its frozen inputs after the run (DDP's buckets, which
    // only C++ holds): overwritten, the next call's would agree with them.
    overwritable = overwritable && GraphMayOverwrite(argument) && !CaptureFreezes(argument);
  }
  for (size_t k = 0; k < arguments.size(); ++k) {
    const LazyFuseBackendData& data = AsLazyFuseData(arguments[k]);
    if (data.pending() || data.is_host_scalar()) {
      continue;
    }
    const at::Tensor& tensor = data.tensor();
    const auto& [holders, overwritable] = sharing.at(tensor.unsafeGetTensorImpl());
    donated[k] = overwritable && tensor.use_count() == holders && tensor.has_storage() &&
                 tensor.storage().use_count() == 1 && tensor.device() == BackingDevice();
  }
  return donated;
}

// A graph reading data that has no value for good (LazyFuseBackendData::
// Failed) raises that failure before anything runs. The sync then leaves the
// results that need it without a value too, and gives the others their IR
// back, so the next sync runs them and does not raise again.
void RefuseFailedArguments(const Program& program,
                           c10::ArrayRef<torch::lazy::BackendDataPtr> arguments) {
  std::vector<bool> failed(arguments.size(), false);
  const LazyFuseBackendData* first = nullptr;
  for (size_t k = 0; k < arguments.size(); ++k) {
    const LazyFuseBackendData& data = AsLazyFuseData(arguments[k]);
    if (data.failed()) {
      failed[k] = true;
      first = first != nullptr ? first : &data;
    }
  }
  if (first != nullptr) {
    NoteResultsNeedingFailedStep(ResultsNeedingParameters(program, failed));
    first->RaiseFailure();
  }
}

// Whether this graph may run on the CPU stream, mark_step returning before
// it has: asynchronous execution is on, a mark_step that does not wait runs
// it, on the CPU, and it is no step capture. `groups`: its collectives' groups,
// if it holds any and they may run there (GroupsForAnotherThread).
bool MayRunOnCpuStream(const Program& program, std::shared_ptr<const CollectiveGroups>* groups) {
  if (!AsyncExecutionEnabled() || !SyncMayReturnEarly() || !BackingDevice().is_cpu() ||
      Capturing()) {
    return false;
  }
  if (std::none_of(program.steps.begin(), program.steps.end(), [](const Step& step) {
        return step.kind == StepKind::kCollective;
      })) {
    return true;
  }
  *groups = GroupsForAnotherThread(program);
  return *groups != nullptr;
}

struct LazyFuseDeviceType : torch::lazy::BackendDeviceType {
  explicit LazyFuseDeviceType(c10::DeviceType backing) {
    type = static_cast<int8_t>(backing);
  }
  std::string toString() const override {
    return c10::DeviceTypeName(static_cast<c10::DeviceType>(type));
  }
};

// The target fused kernels of a graph compiled now run on.
std::shared_ptr<KernelTarget> KernelTargetNow() {
  if (BackingDevice().is_cuda()) {
    return MakeCudaTarget(BackingDevice());
  }
  const KernelSettings& settings = GetKernelSettings();
  if (!settings.emulate_cuda) {
    return MakeCpuTarget();
  }
  EmulationLimits limits;
  limits.block = settings.emulated_block;
  limits.grid = settings.emulated_grid;
  return MakeEmulatedTarget(limits);
}

std::mutex g_last_program_mutex;
std::shared_ptr<const Program> g_last_program;
std::vector<std::shared_ptr<FusedKernel>> g_last_kernels;

class LazyFuseBackendImpl : public torch::lazy::BackendImplInterface {
 public:
  void PrepareToExit() const override {}

  void SetRngSeed(size_t /*seed*/) const override {}

  const torch::lazy::IrBuilder* GetIrBuilder() const override {
    static const LazyFuseIrBuilder builder;
    return &builder;
  }

  torch::lazy::BackendDataPtr MakeComputationDataFromTensor(
      const at::Tensor& tensor,
      const torch::lazy::Shape& shape,
      const torch::lazy::BackendDevice& device) const override {
    const BackingOpsGuard backing_ops;
    // 0-dim CPU values stay on the host (see LazyFuseBackendData); anything
    // else is copied, so later writes to the source never leak into the graph.
    const bool host_scalar = tensor.dim() == 0 && tensor.is_cpu();
    at::Tensor value = host_scalar
                           ? CopyHostScalar(tensor)
                           : tensor.to(BackingDevice(), /*non_blocking=*/false, /*copy=*/true);
    auto data = std::make_shared<LazyFuseBackendData>(device, shape, std::move(value));
    if (Capturing()) {
      NoteTransfer(data, tensor);
    }
    return data;
  }

  torch::lazy::BackendDataPtr MakeComputationDataFromScalar(
      const at::Scalar& scalar, const torch::lazy::BackendDevice& device) const override {
    const BackingOpsGuard backing_ops;
    at::Tensor value = at::scalar_tensor(scalar, at::TensorOptions().dtype(scalar.type()));
    torch::lazy::Shape shape(value.scalar_type(), {});
    auto data = std::make_shared<LazyFuseBackendData>(device, std::move(shape), std::move(value));
    if (Capturing()) {
      NoteScalar(data);
    }
    return data;
  }

  torch::lazy::BackendDataPtr CreateDataPlaceholder(
      const torch::lazy::BackendDevice& device, const torch::lazy::Shape& shape) const override {
    return std::make_shared<LazyFuseBackendData>(device, shape);
  }

  torch::lazy::BackendDataPtr GetComputationDataFromNode(
      const torch::lazy::Node* node) const override {
    const DeviceData* device_data = DeviceData::Cast(node);
    return device_data ? device_data->data() : nullptr;
  }

  at::Tensor MakeTensorFromComputationData(
      const torch::lazy::BackendDataPtr data,
      std::optional<at::ScalarType> logical_scalar_type) const override {
    const BackingOpsGuard backing_ops;
    const at::Tensor& tensor = AsLazyFuseData(data).tensor();
    if (logical_scalar_type && *logical_scalar_type != tensor.scalar_type()) {
      return tensor.to(*logical_scalar_type);
    }
    return tensor;
  }

  std::unique_ptr<torch::lazy::LoweringContext> CreateLoweringContext(
      const std::string& name,
      torch::lazy::BackendDevice device,
      c10::ArrayRef<const torch::lazy::Node*> post_order,
      torch::lazy::Util::EmissionMap emit_status) const override {
    return std::make_unique<LazyFuseLoweringContext>(
        name, std::move(device), post_order, std::move(emit_status));
  }

  std::unique_ptr<torch::lazy::LoweringContext> CreateLoweringContext(
      const std::string& name, torch::lazy::BackendDevice device) const override {
    return std::make_unique<LazyFuseLoweringContext>(name, std::move(device));
  }

  std::vector<std::string> GetCompilationDevices(
      const std::string& device, c10::ArrayRef<std::string> devices) const override {
    return devices.empty() ? std::vector<std::string>{device} : devices.vec();
  }

  std::vector<torch::lazy::ComputationPtr> Compile(
      std::vector<torch::lazy::ComputationPtr> instances) const override {
    // A new graph's host cost past lowering: its Program's rewrites, the
    // plan and the fused Program (bench/new_shapes.py splits it out).
    TORCH_LAZY_TIMED("LazyFuseCompile");
    // A sync inside a functorch transform or a TorchDispatchMode compiles
    // there too: the meta tensors of planning must not be wrapped or seen.
    const BackingOpsGuard backing_ops;
    // Only the CUDA backing device, or the CPU emulating it, turns fused
    // groups into kernels; elsewhere lazyfuse.debug.fusion_plan() plans the
    // last Program when asked.
    const bool fuse = FusedKernelsEnabled();
    for (auto& instance : instances) {
      const auto* computation = dynamic_cast<const LazyFuseComputation*>(instance.get());
      TORCH_CHECK(computation != nullptr, "lazyfuse: cannot compile a foreign computation");
      auto derived = std::make_shared<Program>(*computation->program());
      if (TransposedMatmulsEnabled()) {
        TransposeMatmulsReadTransposed(*derived);
      }
      DeriveBaseResults(*derived);
      const std::shared_ptr<const Program> program = std::move(derived);
      RecordCompile(*program,
                    program->steps.size() + program->parameters.size() + program->constants.size());
      std::vector<std::shared_ptr<FusedKernel>> kernels;
      if (!fuse) {
        instance = std::make_shared<LazyFuseComputation>(program);
      } else {
        instance = std::make_shared<LazyFuseComputation>(
            std::make_shared<const Program>(BuildFusedProgram(program,
                                                              PlanFusion(*program),
                                                              KernelTargetNow(),
                                                              GetKernelSettings().strict,
                                                              &kernels)));
      }
      std::lock_guard<std::mutex> lock(g_last_program_mutex);
      g_last_program = program;
      g_last_kernels = std::move(kernels);
    }
    TORCH_LAZY_COUNTER("LazyFuseCompiles", instances.size());
    return instances;
  }

  std::vector<torch::lazy::BackendDataPtr> ExecuteComputation(
      torch::lazy::ComputationPtr computation,
      c10::ArrayRef<torch::lazy::BackendDataPtr> arguments,
      const torch::lazy::BackendDevice& device) const override {
    const auto* ours = dynamic_cast<const LazyFuseComputation*>(computation.get());
    TORCH_CHECK(ours != nullptr, "lazyfuse: cannot execute a foreign computation");
    const BackingOpsGuard backing_ops;
    const std::shared_ptr<const Program>& program = ours->program();
    RefuseFailedArguments(*program, arguments);
    std::shared_ptr<const CollectiveGroups> groups;
    const bool on_stream = MayRunOnCpuStream(*program, &groups);
    if (on_stream) {
      SettleStreamResults(arguments);
    } else {
      SynchronizeCpuStream();  // the CPU kernels' runtime serves one run at a time
    }
    const std::vector<bool> donated = DonatedArguments(arguments);
    std::vector<at::Tensor> parameters;
    parameters.reserve(arguments.size());
    for (const auto& argument : arguments) {
      parameters.push_back(AsLazyFuseData(argument).tensor());
    }
    auto run = std::make_shared<ProgramRun>(StartProgram(program, std::move(parameters), donated));
    if (!Capturing()) {  // a step capture reads its frozen inputs after the run
      run->let_go_of_parameter = [arguments = arguments.vec()](size_t k) {
        std::static_pointer_cast<LazyFuseBackendData>(arguments[k])->LetGo();
      };
    }
    std::vector<torch::lazy::BackendDataPtr> results;
    if (on_stream) {
      results = ResultsRunOnCpuStream(std::move(run), device, arguments.vec(), std::move(groups));
      NoteExecution(computation, arguments, results, device);
      return results;
    }
    std::vector<at::Tensor> outputs;
    try {
      outputs = ContinueProgram(*run);
    } catch (...) {
      if (!run->overwrote_parameter && run->ran_collective.empty()) {
        NoteResultsNeedingFailedStep(ResultsNeedingStep(*program, run->next_step));
        throw;  // nothing overwritten: the sync puts the tensors' IR back, or undoes them
      }
      FailWithResultsPending(std::current_exception(), WhyResultsPending(*run));
      run->let_go_of_parameter = nullptr;  // it holds this call's arguments
      results =
          ResultsFinishedOnRead(std::move(run), device, arguments.vec(), std::current_exception());
      NoteExecution(computation, arguments, results, device);
      return results;
    }
    run.reset();  // its buffers would keep each view below alive beside its copy
    results = ResultsOfFinishedRun(std::move(outputs), *program, device);
    NoteExecution(computation, arguments, results, device);
    return results;
  }

  std::shared_ptr<torch::lazy::BackendDeviceType> GetDefaultDeviceType() const override {
    return std::make_shared<LazyFuseDeviceType>(BackingDevice().type());
  }

  void SetDefaultDeviceType(int8_t /*type*/) override {
    TORCH_CHECK(false, "lazyfuse: set the backing device with LAZYFUSE_DEVICE before import");
  }

  int64_t GetDefaultDeviceOrdinal() const override {
    return default_ordinal_;
  }

  void SetDefaultDeviceOrdinal(int64_t ordinal) override {
    default_ordinal_ = ordinal;
  }

  at::DeviceType EagerFallbackDeviceType() const override {
    return BackingDevice().type();
  }

  std::vector<torch::lazy::BackendDevice> GetBackendDevices() const override {
    return {torch::lazy::BackendDevice(GetDefaultDeviceType(), 0)};
  }

  torch::lazy::BackendDevice GetBackendDevice(c10::Device device) const override {
    return torch::lazy::BackendDevice(GetDefaultDeviceType(),
                                      device.has_index() ? device.index() : 0);
  }

  std::string GetComputationBackendText(
      const torch::lazy::ComputationPtr computation) const override {
    return computation->to_string();
  }

 private:
  int64_t default_ordinal_ = 0;
};

}  // namespace

torch::lazy::BackendImplInterface* GetLazyFuseBackendImpl() {
  static LazyFuseBackendImpl* backend = new LazyFuseBackendImpl();
  return backend;
}

std::shared_ptr<const Program> LastCompiledProgram() {
  std::lock_guard<std::mutex> lock(g_last_program_mutex);
  return g_last_program;
}

std::string LastFusionPlan() {
  const std::shared_ptr<const Program> program = LastCompiledProgram();
  return program ? PlanFusion(*program).ToString(*program) : std::string();
}

std::vector<KernelRecord> LastKernels() {
  std::vector<std::shared_ptr<FusedKernel>> kernels;
  {
    std::lock_guard<std::mutex> lock(g_last_program_mutex);
    kernels = g_last_kernels;
  }
  std::vector<KernelRecord> out;
  for (const auto& kernel : kernels) {
    for (auto& record : kernel->Records()) {
      out.push_back(std::move(record));
    }
  }
  return out;
}

}  // namespace lazyfuse
