#include "runtime/cpu/target.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <cstdio>
#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

#include <numeric>
#include <string>
#include <vector>

#include "kernels/dialect.h"
#include "runtime/cpu/output_pool.h"
#include "runtime/host_library.h"
#include "runtime/parallel_compile.h"

namespace lazyfuse {
namespace {

// glibc's vector math library: 222 (sin, cos, exp, log) or 235 (most of
// libm) by the glibc version that has it; 0 without it.
int LibmvecVersion() {
#if defined(__x86_64__) && defined(__GLIBC__)
  void* mvec = ::dlopen("libmvec.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (mvec == nullptr) {
    return 0;
  }
  ::dlclose(mvec);
  int major = 0;
  int minor = 0;
  std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor);
  return major > 2 || minor >= 35 ? 235 : 222;
#else
  return 0;
#endif
}

// -O3 -march=native: vectorized for this machine (the cache key names its
// ISA). -ffp-contract=off: eager rounds a multiply before the add that
// follows it, so no fused multiply-adds. -fno-math-errno lets sqrt be an
// instruction and math calls vectorize; values are the same. -fopenmp-simd:
// the renderer's `omp simd` reductions, without an OpenMP runtime.
// -fwrapv: integers wrap, as in eager's kernels.
const HostBuild& CpuBuild() {
  static const HostBuild build = [] {
    HostBuild b;
    b.flags =
        "-std=c++17 -O3 -march=native -w -fwrapv -ffp-contract=off -fno-math-errno -fopenmp-simd";
    b.subdir = "cpu";
    b.native = true;
    const int mvec = LibmvecVersion();
    if (mvec > 0) {
      b.flags += " -DLF_LIBMVEC=" + std::to_string(mvec);
      b.libraries = "-lmvec";
    }
    return b;
  }();
  return build;
}

// A kernel library exports lf_cpu_entry<i> for its i-th kernel: it runs
// blocks [begin, end) of a grid of `grid` blocks.
constexpr const char* kCpuEntryName = "lf_cpu_entry";
using CpuEntry = void (*)(long long begin, long long end, long long grid, void** args);

// The entry point `entry` runs blocks [begin, end) of kernel `callee`, each
// argument read from its 8-byte slot.
std::string EntryPoint(const std::string& entry,
                       const std::string& callee,
                       const std::vector<std::string>& types) {
  const SlotCall slot_call = CallFromSlots(callee, types);
  return "\nextern \"C\" void " + entry +
         "(long long begin, long long end, long long grid, void** args) {\n" + slot_call.typedefs +
         "  lf_grid = grid;\n  for (long long b = begin; b < end; ++b) {\n    lf_block = b;\n    " +
         slot_call.call + ";\n  }\n}\n";
}

// Where a rendered source's kernel starts, after its prelude.
size_t KernelStart(const KernelSource& source) {
  const size_t start = source.source.rfind("\n" + std::string(CpuDialect().kernel_prefix) +
                                           "void " + source.name + "(");
  TORCH_CHECK(start != std::string::npos, "lazyfuse: CPU kernel ", source.name, " has no body");
  return start + 1;
}

class CpuKernel : public LoadedKernel {
 public:
  std::shared_ptr<HostLibrary> library;
  CpuEntry entry = nullptr;
};

// Below this many bytes moved, a launch runs on the calling thread: waking
// the pool costs more than the work.
constexpr int64_t kParallelBytes = 128 * 1024;

int64_t BytesMoved(const LaunchTensors& tensors) {
  int64_t bytes = 0;
  for (const auto* list : {&tensors.inputs, &tensors.outputs}) {
    for (const at::Tensor& tensor : *list) {
      bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
    }
  }
  return bytes;
}

// A compiler call costs its start, the prelude and a link whatever it
// compiles, so a library takes at least this many kernels.
constexpr size_t kLeastKernelsPerLibrary = 4;

// The batch's kernels, by index, in libraries to compile side by side: one
// per compile thread, each given the longest source left to the one with the
// least text so far, each in batch order (its text, so its cache key, is
// the same for the same batch).
std::vector<std::vector<size_t>> SplitForCompile(const std::vector<KernelSource>& sources) {
  const size_t count =
      std::min(static_cast<size_t>(std::max(CompileThreads(), 1)),
               std::max<size_t>(
                   1, (sources.size() + kLeastKernelsPerLibrary - 1) / kLeastKernelsPerLibrary));
  std::vector<size_t> by_length(sources.size());
  std::iota(by_length.begin(), by_length.end(), 0);
  std::stable_sort(by_length.begin(), by_length.end(), [&](size_t a, size_t b) {
    return sources[a].source.size() > sources[b].source.size();
  });
  std::vector<std::vector<size_t>> libraries(count);
  std::vector<size_t> text(count, 0);
  for (size_t i : by_length) {
    const size_t lightest = std::min_element(text.begin(), text.end()) - text.begin();
    libraries[lightest].push_back(i);
    text[lightest] += sources[i].source.size();
  }
  for (auto& library : libraries) {
    std::sort(library.begin(), library.end());
  }
  libraries.erase(
      std::remove_if(
          libraries.begin(), libraries.end(), [](const auto& library) { return library.empty(); }),
      libraries.end());
  return libraries;
}

// One library of the kernels `which` names: the prelude once, then each
// kernel in a namespace of its own (two kernels may share a name) with its
// entry point. Its kernels, in the order of `which`.
std::vector<std::shared_ptr<LoadedKernel>> LoadLibrary(const std::vector<KernelSource>& sources,
                                                       const std::vector<size_t>& which) {
  const KernelSource& first = sources[which.front()];
  // The first line names the ops; the prelude follows, up to the kernel.
  const size_t prelude_begin = first.source.find('\n') + 1;
  std::string text = first.source.substr(0, KernelStart(first));
  const size_t prelude_size = text.size() - prelude_begin;
  for (size_t i = 0; i < which.size(); ++i) {
    const KernelSource& source = sources[which[i]];
    const std::string space = "lf_k" + std::to_string(i);
    text += "namespace " + space + " {\n" + source.source.substr(KernelStart(source)) + "}\n" +
            EntryPoint(std::string(kCpuEntryName) + std::to_string(i),
                       space + "::" + source.name,
                       source.parameter_types);
  }
  const std::string name = which.size() == 1
                               ? first.name
                               : "lf_batch_" + std::to_string(which.size()) + "_" + first.name;
  auto library = LoadHostLibrary(CpuBuild(), text, name, prelude_begin, prelude_size);
  std::vector<std::shared_ptr<LoadedKernel>> loaded;
  for (size_t i = 0; i < which.size(); ++i) {
    auto kernel = std::make_shared<CpuKernel>();
    kernel->library = library;
    kernel->entry = reinterpret_cast<CpuEntry>(
        library->Symbol((std::string(kCpuEntryName) + std::to_string(i)).c_str()));
    loaded.push_back(std::move(kernel));
  }
  return loaded;
}

class CpuTarget : public KernelTarget {
 public:
  const KernelDialect& dialect() const override {
    return CpuDialect();
  }
  c10::Device device() const override {
    return c10::Device(c10::kCPU);
  }
  LaunchLimits limits() override {
    LaunchLimits limits;
    limits.processors = at::get_num_threads();
    limits.block = 1;
    return limits;
  }

  std::shared_ptr<LoadedKernel> Load(const KernelSource& source) override {
    return LoadLibrary({source}, {0}).front();
  }

  bool batches() const override {
    return true;
  }

  // A few libraries, compiled side by side: each holds the prelude once,
  // then each of its kernels in a namespace of its own (two kernels may
  // share a name) with its entry point. A library whose compile fails
  // leaves its kernels to compile at their launch, which reports why.
  std::vector<std::shared_ptr<LoadedKernel>> LoadBatch(
      const std::vector<KernelSource>& sources) override {
    const std::vector<std::vector<size_t>> libraries = SplitForCompile(sources);
    std::vector<std::shared_ptr<LoadedKernel>> loaded(sources.size());
    ForEachInParallel(libraries.size(), [&](size_t l) {
      try {
        std::vector<std::shared_ptr<LoadedKernel>> kernels = LoadLibrary(sources, libraries[l]);
        for (size_t i = 0; i < kernels.size(); ++i) {
          loaded[libraries[l][i]] = std::move(kernels[i]);
        }
      } catch (const std::exception&) {
        TORCH_LAZY_COUNTER("LazyFuseBatchCompileFailed", 1);
      }
    });
    return loaded;
  }

  at::Tensor NewOutput(const std::vector<int64_t>& sizes, at::ScalarType dtype) override {
    return at::detail::empty_generic(sizes,
                                     CpuOutputAllocator(),
                                     c10::DispatchKeySet(c10::DispatchKey::CPU),
                                     dtype,
                                     std::nullopt);
  }

  void Launch(const LoadedKernel& kernel,
              const KernelSource& /*source*/,
              const LaunchConfig& config,
              void** params,
              const LaunchTensors& tensors) override {
    const CpuEntry entry = static_cast<const CpuKernel&>(kernel).entry;
    const int64_t grid = config.grid;
    if (grid == 1 || BytesMoved(tensors) < kParallelBytes) {
      entry(0, grid, grid, params);
      return;
    }
    at::parallel_for(
        0, grid, 1, [&](int64_t begin, int64_t end) { entry(begin, end, grid, params); });
  }
};

}  // namespace

std::shared_ptr<KernelTarget> MakeCpuTarget() {
  static const auto target = std::make_shared<CpuTarget>();
  return target;
}

}  // namespace lazyfuse
