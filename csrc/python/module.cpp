// lazyfuse._C: the small native surface python/lazyfuse builds on.

#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/ir_dump_util.h>
#include <torch/csrc/lazy/core/lazy_graph_executor.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/csrc/utils/pybind.h>

#include "fusion/planner.h"
#include "ltc/backend_data.h"
#include "ltc/backend_impl.h"
#include "ltc/config.h"
#include "ltc/graph_executor.h"
#include "ltc/init.h"
#include "ltc/node.h"
#include "ltc/pending_run.h"
#include "ops/autocast.h"
#include "ops/functionalized_composite.h"
#include "ops/view_layout.h"
#include "program/compile_log.h"
#include "program/memory_meter.h"
#include "program/pending_graph.h"
#include "python/bindings.h"
#include "runtime/cpu/output_pool.h"
#include "runtime/cpu/stream.h"
#include "runtime/cuda/aot_compile.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/emulated/target.h"
#include "runtime/generic_kernels.h"
#include "runtime/host_library.h"
#include "runtime/kernel_cache.h"
#include "runtime/module_registry.h"

namespace lazyfuse {
namespace {

torch::lazy::BackendDevice DefaultBackendDevice() {
  return torch::lazy::getBackend()->GetBackendDevice(c10::Device(c10::kLazy, 0));
}

// A binding that waits for the CPU stream lets go of the GIL while it
// waits: the stream's run may need it and would wait for this thread. It
// drops what Python holds (a saved-tensors hook in the state it runs
// under), or takes a lock whose holder does (a Gloo worker freeing an eager
// collective's tensors, while the run queues its own collective).
void SynchronizeCpuStreamWithoutGil() {
  py::gil_scoped_release release;
  SynchronizeCpuStream();
}

std::vector<const torch::lazy::Node*> RootsOf(const std::vector<at::Tensor>& tensors) {
  std::vector<const torch::lazy::Node*> roots;
  for (const at::Tensor& tensor : tensors) {
    auto lazy = torch::lazy::TryGetLtcTensor(tensor);
    TORCH_CHECK(lazy, "lazyfuse.debug: expected lazy tensors, got one on ", tensor.device());
    torch::lazy::Value value = lazy->CurrentIrValue();
    if (value) {
      roots.push_back(value.node.get());
    }
  }
  return roots;
}

// LazyGraphExecutor::MarkStep counts "MarkStep" itself.
void MarkStep(bool wait) {
  RegisterNewFunctionalizedComposites();
  auto device = DefaultBackendDevice();
  auto* executor = torch::lazy::LazyGraphExecutor::Get();
  executor->SyncLiveTensorsGraph(&device, /*devices=*/{}, wait);
  executor->MarkStep(device);
}

py::dict MetricSummary(const std::string& name) {
  SynchronizeCpuStreamWithoutGil();
  py::dict out;
  torch::lazy::MetricData* data = torch::lazy::GetMetric(name);
  if (data == nullptr) {
    return out;
  }
  double accumulator = 0.0;
  size_t total = 0;
  auto samples = data->Samples(&accumulator, &total);
  std::vector<double> values;
  std::vector<int64_t> timestamps;
  values.reserve(samples.size());
  for (const auto& sample : samples) {
    values.push_back(sample.value);
    timestamps.push_back(sample.timestamp_ns);
  }
  out["timestamps_ns"] = timestamps;
  out["total_samples"] = total;
  out["accumulator"] = accumulator;
  out["samples"] = values;
  return out;
}

}  // namespace
}  // namespace lazyfuse

PYBIND11_MODULE(_C, m) {
  using namespace lazyfuse;
  m.doc() = "lazyfuse native bindings; use the lazyfuse package instead";
  m.def("_init", &InitLazyFuseBackend);
  BindStepReplay(m);
  m.def("_mark_step", &MarkStep, py::arg("wait") = false, py::call_guard<py::gil_scoped_release>());
  m.def(
      "_wait_device_ops",
      [] {
        torch::lazy::LazyGraphExecutor::Get()->WaitDeviceOps({});
        WaitForCpuStreamRuns();
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("_backing_device", [] { return BackingDevice().str(); });
  m.def("_reuse_ir", &ReuseIrEnabled);
  m.def("_set_reuse_ir", &SetReuseIr);
  m.def("_donation", &DonationEnabled);
  m.def(
      "_data_address",
      [](const at::Tensor& tensor) {
        auto lazy = torch::lazy::TryGetLtcTensor(tensor);
        TORCH_CHECK(lazy,
                    "lazyfuse.debug.data_address: expected a lazy tensor, got one on ",
                    tensor.device());
        const auto* data =
            dynamic_cast<const LazyFuseBackendData*>(lazy->CurrentDataHandle().get());
        TORCH_CHECK(
            data != nullptr && data->HasValue(),
            "lazyfuse.debug.data_address: the tensor has no data yet; call mark_step first");
        return reinterpret_cast<uintptr_t>(data->tensor().const_data_ptr());  // waits for its run
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("_set_donation", &SetDonation);
  m.def("_clear_kept_failure", [] { ClearKeptFailure(DefaultBackendDevice()); });
  m.def("_async_execution", &AsyncExecutionEnabled);
  m.def("_set_async_execution", &SetAsyncExecution);
  // At exit: the stream's thread must not be running kernels while the
  // process tears down what they use. Before a fork: see stream.cpp.
  m.def("_synchronize_cpu_stream", &SynchronizeCpuStreamWithoutGil);
  py::class_<MemoryMeter, std::shared_ptr<MemoryMeter>>(m, "_MemoryMeter")
      .def_property_readonly("allocated", &MemoryMeter::allocated)
      .def_property_readonly("peak", &MemoryMeter::peak)
      .def_property_readonly("described_peak", &MemoryMeter::described_peak)
      .def_property_readonly("held_at_peak", [](const MemoryMeter& meter) {
        std::vector<std::pair<std::string, int64_t>> held;
        for (const HeldBuffer& buffer : meter.held_at_peak()) {
          held.emplace_back(buffer.what, buffer.bytes);
        }
        return held;
      });
  m.def("_start_memory_meter", [] { return StartMemoryMeter(BackingDevice().type()); });
  m.def("_stop_memory_meter", [](const std::shared_ptr<MemoryMeter>& meter) {
    SynchronizeCpuStreamWithoutGil();
    StopMemoryMeter(meter);
  });
  m.def("_cpu_output_pool", [] {
    SynchronizeCpuStreamWithoutGil();
    const OutputPoolStats stats = CpuOutputPoolStats();
    py::dict out;
    out["kept_bytes"] = stats.kept_bytes;
    out["in_use_bytes"] = stats.in_use_bytes;
    out["reused"] = stats.reused;
    out["cap_bytes"] = CpuOutputPoolCap();
    return out;
  });
  m.def("_empty_cpu_output_pool", &EmptyCpuOutputPool);
  m.def("_set_cpu_cache_mb", [](int64_t mib) {
    TORCH_CHECK(mib >= 0, "lazyfuse: set_cpu_cache_mb(", mib, "): use a number of MiB, 0 or more");
    SetCpuOutputPoolCap(mib << 20);
  });
  // Metrics count what the steps mark_step started did: a graph on the CPU
  // stream (asynchronous execution) is waited for first.
  m.def("_counter_names", [] {
    SynchronizeCpuStreamWithoutGil();
    return torch::lazy::GetCounterNames();
  });
  m.def("_counter_value", [](const std::string& name) -> int64_t {
    SynchronizeCpuStreamWithoutGil();
    torch::lazy::CounterData* data = torch::lazy::GetCounter(name);
    return data ? data->Value() : 0;
  });
  m.def("_metric_names", [] {
    SynchronizeCpuStreamWithoutGil();
    return torch::lazy::GetMetricNames();
  });
  m.def("_metric_summary", &MetricSummary);
  m.def("_metrics_report", [] {
    SynchronizeCpuStreamWithoutGil();
    return torch::lazy::CreateMetricReport();
  });
  m.def("_last_graph_hash", [] { return torch::lazy::HashToString(PendingGraphHash()); });
  m.def("_clear_counters", [] {
    SynchronizeCpuStreamWithoutGil();
    torch::lazy::MetricsArena::Get()->ResetCounters();
  });
  m.def("_clear_metrics", [] {
    SynchronizeCpuStreamWithoutGil();
    torch::lazy::MetricsArena::Get()->ResetMetrics();
  });
  m.def("_reset_metrics", [] {
    SynchronizeCpuStreamWithoutGil();
    torch::lazy::MetricsArena::Get()->ResetCounters();
    torch::lazy::MetricsArena::Get()->ResetMetrics();
  });
  m.def("_ir_text", [](const std::vector<at::Tensor>& tensors) {
    return torch::lazy::DumpUtil::ToText(RootsOf(tensors));
  });
  m.def("_ir_dot", [](const std::vector<at::Tensor>& tensors) {
    return torch::lazy::DumpUtil::ToDot(RootsOf(tensors));
  });
  m.def("_last_program_text", []() -> std::string {
    auto program = LastCompiledProgram();
    return program ? program->ToString() : std::string();
  });
  m.def("_nodes_created", &LazyFuseNode::CreatedCount);
  m.def("_compile_log", [] {
    py::list out;
    for (const auto& record : CompileLog()) {
      py::dict entry;
      entry["hash"] = torch::lazy::HashToString(record.hash);
      entry["nodes"] = record.node_count;
      entry["call_site"] = record.call_site;
      entry["cause"] = record.cause;
      entry["generic"] = record.generic;
      out.append(entry);
    }
    return out;
  });
  m.def("_clear_compile_log", &ClearCompileLog);
  m.def("_set_library_dirs", &SetLibraryDirs);
  m.def("_set_autocast", [](bool enabled, at::ScalarType dtype) {
    const AutocastState previous = SetAutocast({enabled, dtype});
    return std::make_pair(previous.enabled, previous.dtype);
  });
  m.def("_autocast_policy", &AutocastPolicyEntries);
  m.def("_autocast_state", [] {
    const AutocastState state = CurrentAutocast();
    return std::make_pair(state.enabled, state.dtype);
  });
  m.def("_fusion_plan", [](const std::vector<at::Tensor>& tensors) {
    const PendingGraph graph = LowerPendingGraph(tensors);
    return PlanFusion(*graph.program).ToString(*graph.program);
  });
  m.def("_pending_program_text", [](const std::vector<at::Tensor>& tensors) {
    return LowerPendingGraph(tensors).program->ToString();
  });
  m.def("_last_fusion_plan", &LastFusionPlan);
  m.def("_eager_contiguous", &EagerContiguous);
  m.def("_dynamic_kernels", [] {
    const DynamicKernels mode = GetDynamicKernels();
    return std::string(mode == DynamicKernels::kAuto  ? "auto"
                       : mode == DynamicKernels::kOff ? "0"
                                                      : "1");
  });
  m.def("_set_dynamic_kernels", [](const std::string& mode) {
    TORCH_CHECK(mode == "auto" || mode == "0" || mode == "1",
                "lazyfuse: dynamic kernels are 'auto', '0' or '1', not '",
                mode,
                "'");
    SetDynamicKernels(mode == "auto" ? DynamicKernels::kAuto
                      : mode == "0"  ? DynamicKernels::kOff
                                     : DynamicKernels::kOn);
  });
  m.def("_generic_kernels", [] {
    py::list out;
    for (const auto& record : GenericKernelRecords()) {
      py::dict entry;
      entry["name"] = record.name;
      entry["literals"] = record.literals;
      entry["parameters"] = record.parameters;
      entry["changes"] = record.changes;
      entry["renders"] = record.renders;
      entry["failed"] = record.failed;
      out.append(entry);
    }
    return out;
  });
  m.def("_clear_generic_kernels", &ClearGenericKernels);
  m.def("_last_kernels", [] {
    py::list out;
    for (const auto& record : LastKernels()) {
      py::dict entry;
      entry["name"] = record.name;
      entry["ops"] = record.ops;
      entry["source"] = record.source;
      out.append(entry);
    }
    return out;
  });
  m.def(
      "_compile_cuda",
      [](const std::vector<at::Tensor>& tensors,
         const std::string& arch,
         int sms,
         int block_limit,
         bool generic) {
        const PendingGraph graph = LowerPendingGraph(tensors);
        std::vector<KernelCompileRecord> records;
        {
          py::gil_scoped_release release;
          records = CompileFusedKernels(
              *graph.program, graph.host_scalar_parameters, arch, sms, block_limit, generic);
        }
        py::list out;
        for (const auto& record : records) {
          py::dict entry;
          entry["name"] = record.name;
          entry["ops"] = record.ops;
          entry["source"] = record.source;
          entry["target"] = record.target;
          entry["compiled"] = record.compiled;
          entry["log"] = record.log;
          entry["grid"] = record.grid;
          entry["block"] = record.block;
          entry["launches"] = record.launches;
          out.append(entry);
        }
        return out;
      },
      py::arg("tensors"),
      py::arg("arch"),
      py::arg("sms"),
      py::arg("block_limit") = 0,
      py::arg("generic") = false);
  m.def("_nvrtc", [] {
    std::string where;
    const bool found = NvrtcAvailable(&where);
    py::dict out;
    out["found"] = found;
    out[found ? "path" : "error"] = where;
    out["version"] = found ? cuda::NvrtcVersion() : std::string();
    return out;
  });
  m.def("_kernel_cache_dir", &KernelCacheDir);
  m.def("_loaded_kernel_modules", &LoadedModuleCount::Now);
  m.def("_clear_graph_cache",
        [] { torch::lazy::LazyGraphExecutor::Get()->ClearComputationCache(); });
  m.def("_kernel_settings", [] {
    const KernelSettings& settings = GetKernelSettings();
    std::string compiler;
    const bool found = HostCompilerAvailable(&compiler);
    py::dict out;
    out["emulate_cuda"] = settings.emulate_cuda;
    out["emulated_block"] = settings.emulated_block;
    out["emulated_grid"] = settings.emulated_grid;
    out["strict"] = settings.strict;
    out["cpu_kernels"] = settings.cpu_kernels;
    out[found ? "host_compiler" : "host_compiler_error"] = compiler;
    return out;
  });
  m.def(
      "_set_kernel_settings",
      [](bool emulate_cuda, int emulated_block, int emulated_grid, bool strict, bool cpu_kernels) {
        SetKernelSettings(
            KernelSettings{emulate_cuda, emulated_block, emulated_grid, strict, cpu_kernels});
      },
      py::arg("emulate_cuda"),
      py::arg("emulated_block"),
      py::arg("emulated_grid"),
      py::arg("strict"),
      py::arg("cpu_kernels"));
  m.def("_inject_kernel_faults",
        &InjectKernelFaultsForTesting,
        py::arg("enabled"),
        py::arg("after_launches") = 0,
        py::arg("after_writing") = false);
  m.def("_launch_emulated_source",
        &LaunchEmulatedSource,
        py::arg("source"),
        py::arg("name"),
        py::arg("inputs"),
        py::arg("outputs"),
        py::arg("grid"),
        py::arg("block"),
        py::call_guard<py::gil_scoped_release>());
}
