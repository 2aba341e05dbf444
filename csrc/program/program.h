#pragma once

// A Program is one lowered lazy graph: an ordered list of steps over numbered
// buffers. It is the unit the executor runs and that the fusion planner
// (issue "Fused CUDA kernels") will group into kernels, so every step carries
// its op, its kind and the dtypes and sizes of everything it touches.

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace lazyfuse {

using BufferId = int32_t;

// kCollective: a torch.distributed collective (ops/collectives.h). Every rank
// must run it exactly once per graph and in program order, so no step kind
// is ever fused with it, skipped or run twice.
enum class StepKind { kPointwise, kReduction, kView, kOpaque, kCollective };

const char* StepKindName(StepKind kind);

// The element count of a tensor of `shape`.
int64_t ShapeNumel(const std::vector<int64_t>& shape);

struct BufferInfo {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes;
  // A Python number or Scalar argument (a 0-dim wrapped number): ATen's type
  // promotion ranks it below every tensor of its category, so a float number
  // meets an integer tensor in the default dtype, not in double.
  bool wrapped_number = false;
};

// Reads a step's inputs in schema order. Generated lowerings consume it with
// one call per argument, so a TensorList argument takes its whole group.
//
// `device` is where the step's ATen kernels run. Host scalars (0-dim values
// kept on the CPU, see LazyFuseBackendData) are tensors of the lazy device to
// the user, so tensor arguments come on `device`: index_select, bucketize and
// many more reject a CPU tensor beside CUDA ones; Python numbers stay CPU
// wrapped numbers, as in eager. Fused kernels take scalars by value and read
// them in place through host_tensor().
class KernelArgs {
 public:
  KernelArgs(const std::vector<at::Tensor>& slots,
             const std::vector<BufferId>& inputs,
             const std::vector<uint32_t>& operand_arity,
             const char* op,
             c10::Device device = c10::Device(c10::kCPU));

  at::Tensor tensor();
  std::optional<at::Tensor> optional_tensor(bool present);
  std::vector<at::Tensor> tensor_list();
  const at::Tensor& host_tensor();
  at::Scalar scalar();
  std::optional<at::Scalar> optional_scalar(bool present);

  // Lets the step write a result into the memory of an input it reads last
  // (`last_read_here`) and that the run owns (`owned`, by buffer); the
  // buffers it overwrote go to `overwritten`. Unset, may_overwrite() is false
  // for every input.
  void AllowOverwrites(const std::vector<uint8_t>& owned,
                       const std::vector<BufferId>& last_read_here,
                       std::vector<BufferId>* overwritten);
  bool may_overwrite(size_t input) const;
  // The step wrote a result into input `input`'s memory.
  void overwrote(size_t input);
  // For a pointwise ATen step with an out= variant: the memory of an input
  // it may overwrite and that fits its `dtype` result of `sizes` exactly,
  // recorded as overwritten; undefined when none fits. Only floating types,
  // whose kernels never fail on values, so no value is lost to a failure
  // halfway through (integer division by zero raises).
  at::Tensor TakeInputFor(at::ScalarType dtype, c10::IntArrayRef sizes);
  // Input `input` itself, for a step whose result is exactly its input
  // (detach, alias), when the step reads it last and the run owns it: a new
  // tensor over the same memory would keep later steps from writing over
  // it. Undefined when the input lives on.
  at::Tensor PassInput(size_t input);
  // Input `input`, for a step that writes a result into it as eager's
  // in-place op would (a scatter into a view of it, functionalization's form
  // of `base[...] = src`; an indexed write; batch norm's running statistics),
  // instead of copying all of it to change it: defined when the run owns it,
  // the step reads it last and through no other operand, and it is alone in
  // a storage of its own. The step records the write (overwrote()) before
  // writing. ScatterInto copies `src` into `view`, a view of that input, and
  // records the overwrite; it returns false, writing nothing, where the
  // scatter's own call must run (and raise).
  at::Tensor InputToWriteInto(size_t input);
  bool ScatterInto(size_t input, const at::Tensor& view, const at::Tensor& src);
  // Every tensor the step reads from here on comes contiguous. ATen's
  // backward kernels may read a tensor their forward made (layer and group
  // norm's mean and rstd) as laid out contiguously; callers that could hand
  // them a view make sure with clone() or contiguous(), which on lazy
  // tensors records nothing, so a view that runs as an alias reached them.
  void ReadContiguous() {
    contiguous_ = true;
  }

 private:
  const at::Tensor& Next();
  at::Tensor OnDevice(const at::Tensor& tensor) const;

  const std::vector<at::Tensor>& slots_;
  const std::vector<BufferId>& inputs_;
  const std::vector<uint32_t>& operand_arity_;
  const char* op_;
  c10::Device device_;
  const std::vector<uint8_t>* owned_ = nullptr;
  const std::vector<BufferId>* last_read_here_ = nullptr;
  std::vector<BufferId>* overwritten_ = nullptr;
  size_t next_input_ = 0;
  size_t next_operand_ = 0;
  bool contiguous_ = false;
};

// Whether a result may be written over `tensor` element for element: it is
// on `device`, contiguous (element i of the result lands on the element i
// read), and alone in its storage (no view of it sees the write).
bool WritableInPlace(const at::Tensor& tensor, c10::Device device);

using StepFn = std::function<std::vector<at::Tensor>(KernelArgs&)>;

// A step's non-tensor arguments by schema name (dim, keepdim, approximate, ...)
// and, for optional tensor operands, whether each is present ("has_<name>").
// The fusion planner and the kernel codegen read them; the StepFn does not.
using StepAttrs = std::vector<std::pair<std::string, c10::IValue>>;

template <typename T>
c10::IValue ToAttr(const T& value) {
  if constexpr (std::is_constructible_v<c10::IValue, const T&>) {
    return c10::IValue(value);
  } else {
    return c10::IValue();
  }
}

struct Step {
  std::string op;
  std::string detail;
  StepKind kind = StepKind::kOpaque;
  std::vector<BufferId> inputs;
  // Buffers per operand; empty when every operand is a single tensor.
  std::vector<uint32_t> operand_arity;
  std::vector<BufferId> outputs;
  StepFn fn;
  StepAttrs attrs;
  // The schema overload ("Tensor" for aten::add.Tensor); LTC's op kind drops it.
  std::string overload;

  // The named attribute, or nullptr when the step has none by that name.
  const c10::IValue* attr(const std::string& name) const;
  // "aten::add.Tensor", or just the op when it has no overload.
  std::string qualified_op() const;
};

// A result the run does not keep: result `result` holds the values of
// result `from`, a permutation of it (p.grad is the transpose of the matmul
// that made it, and functionalization keeps that matmul's output as the
// view's base). It is made from `from` on its first read, placing `from`'s
// elements with `from_strides` in a contiguous tensor (runtime/result_aliases.h).
struct DerivedResult {
  size_t result = 0;
  size_t from = 0;
  std::vector<int64_t> from_sizes;
  std::vector<int64_t> from_strides;
};

struct Program {
  std::vector<BufferInfo> buffers;
  // parameters[k] is the buffer bound to the k-th computation argument.
  std::vector<BufferId> parameters;
  std::vector<std::pair<BufferId, at::Tensor>> constants;
  std::vector<Step> steps;
  std::vector<BufferId> results;
  std::vector<DerivedResult> derived_results;
  // Buffers whose last reader is step i, dropped right after it runs.
  std::vector<std::vector<BufferId>> release_after;
  // Work done before each run, given its parameters: a kernel target that
  // compiles many kernels in one call does so before the first run.
  std::function<void(const std::vector<at::Tensor>&)> before_run;

  std::string ToString() const;
};

// Fills program.release_after from the steps' reads and writes.
void ComputeLifetimes(Program& program);

// By buffer, whether the run returns it: a result that is not derived.
std::vector<bool> KeptResults(const Program& program);

// By buffer, the index of the step that makes it; -1 for parameters and
// constants.
std::vector<int> MakingSteps(const Program& program);

// By result, whether computing it needs step `step` (a step that failed).
std::vector<bool> ResultsNeedingStep(const Program& program, size_t step);
// By result, whether computing it needs a parameter marked in `parameters`
// (by position: one with no value, its graph having failed).
std::vector<bool> ResultsNeedingParameters(const Program& program,
                                           const std::vector<bool>& parameters);

class ProgramBuilder {
 public:
  BufferId AddBuffer(at::ScalarType dtype, std::vector<int64_t> sizes);
  BufferId AddParameter(at::ScalarType dtype,
                        std::vector<int64_t> sizes,
                        bool wrapped_number = false);
  BufferId AddConstant(at::Tensor value);
  void AddStep(Step step);
  size_t AddResult(BufferId buffer);

  const Program& program() const {
    return program_;
  }
  // Computes buffer lifetimes and hands the Program over.
  Program Finish();

 private:
  Program program_;
};

inline std::vector<at::Tensor> AsTensorList(at::Tensor tensor) {
  return {std::move(tensor)};
}
inline std::vector<at::Tensor> AsTensorList(std::vector<at::Tensor> tensors) {
  return tensors;
}
// IR nodes store bool[N] attributes as a vector; ATen takes a std::array.
template <size_t N>
std::array<bool, N> ToBoolArray(const std::vector<bool>& values) {
  std::array<bool, N> out{};
  for (size_t i = 0; i < N && i < values.size(); ++i) {
    out[i] = values[i];
  }
  return out;
}

template <typename... Ts>
std::vector<at::Tensor> AsTensorList(std::tuple<Ts...> tensors) {
  return std::apply([](auto&&... t) { return std::vector<at::Tensor>{t...}; }, std::move(tensors));
}

}  // namespace lazyfuse
