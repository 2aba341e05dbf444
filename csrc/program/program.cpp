#include "program/program.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

namespace lazyfuse {

int64_t ShapeNumel(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

const char* StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kPointwise:
      return "pointwise";
    case StepKind::kReduction:
      return "reduction";
    case StepKind::kView:
      return "view";
    case StepKind::kOpaque:
      return "opaque";
    case StepKind::kCollective:
      return "collective";
  }
  return "unknown";
}

KernelArgs::KernelArgs(const std::vector<at::Tensor>& slots,
                       const std::vector<BufferId>& inputs,
                       const std::vector<uint32_t>& operand_arity,
                       const char* op,
                       c10::Device device)
    : slots_(slots), inputs_(inputs), operand_arity_(operand_arity), op_(op), device_(device) {}

void KernelArgs::AllowOverwrites(const std::vector<uint8_t>& owned,
                                 const std::vector<BufferId>& last_read_here,
                                 std::vector<BufferId>* overwritten) {
  owned_ = &owned;
  last_read_here_ = &last_read_here;
  overwritten_ = overwritten;
}

bool KernelArgs::may_overwrite(size_t input) const {
  if (owned_ == nullptr || input >= inputs_.size()) {
    return false;
  }
  const BufferId id = inputs_[input];
  return (*owned_)[id] != 0 &&
         std::find(last_read_here_->begin(), last_read_here_->end(), id) != last_read_here_->end();
}

void KernelArgs::overwrote(size_t input) {
  TORCH_CHECK(
      may_overwrite(input), "lazyfuse: ", op_, " overwrote input ", input, " it does not own");
  overwritten_->push_back(inputs_[input]);
}

bool WritableInPlace(const at::Tensor& tensor, c10::Device device) {
  return tensor.defined() && tensor.device() == device && tensor.is_contiguous() &&
         tensor.has_storage() && tensor.storage().use_count() == 1;
}

at::Tensor KernelArgs::TakeInputFor(at::ScalarType dtype, c10::IntArrayRef sizes) {
  if (owned_ == nullptr || !at::isFloatingType(dtype)) {
    return at::Tensor();
  }
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const at::Tensor& input = slots_[inputs_[k]];
    if (may_overwrite(k) && WritableInPlace(input, device_) && input.scalar_type() == dtype &&
        input.sizes() == sizes && !input.unsafeGetTensorImpl()->is_wrapped_number()) {
      overwrote(k);
      TORCH_LAZY_COUNTER("LazyFuseInPlaceOutputs", 1);
      return input;
    }
  }
  return at::Tensor();
}

at::Tensor KernelArgs::PassInput(size_t input) {
  if (!may_overwrite(input)) {
    return at::Tensor();
  }
  const at::Tensor& tensor = slots_[inputs_[input]];
  if (tensor.device() != device_ || tensor.unsafeGetTensorImpl()->is_wrapped_number()) {
    return at::Tensor();
  }
  return tensor;
}

at::Tensor KernelArgs::InputToWriteInto(size_t input) {
  if (!may_overwrite(input)) {
    return at::Tensor();
  }
  const at::Tensor& base = slots_[inputs_[input]];
  // As the lazy tensor describes it (at offset 0 of a storage of its own),
  // so that an as_strided view means the same on it as on the lazy tensor.
  const bool whole = WritableInPlace(base, device_) && base.storage_offset() == 0 &&
                     base.storage().nbytes() == base.nbytes() &&
                     !base.unsafeGetTensorImpl()->is_wrapped_number();
  if (!whole) {
    return at::Tensor();
  }
  // Read by the step through another operand too (`y.scatter(1, index, y)`,
  // HF's top-p sampling): ATen refuses to write a tensor it also reads. Two
  // buffers may hold one tensor (runtime/result_aliases.h), so compare memory.
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const at::Tensor& other = slots_[inputs_[k]];
    if (k != input && other.defined() && other.has_storage() && other.is_alias_of(base)) {
      return at::Tensor();
    }
  }
  return base;
}

bool KernelArgs::ScatterInto(size_t input, const at::Tensor& view, const at::Tensor& src) {
  // Where ATen's scatter would raise (a src of another size, a view whose
  // elements overlap) or convert (a src of another dtype), its own call runs
  // instead. src never shares the base's memory: the base is alone in its
  // storage, and no other operand of the step is the base.
  if (view.sizes() != src.sizes() || view.scalar_type() != src.scalar_type() ||
      src.device() != view.device() || at::has_internal_overlap(view) == at::MemOverlap::Yes) {
    return false;
  }
  view.copy_(src);
  overwrote(input);
  TORCH_LAZY_COUNTER("LazyFuseInPlaceScatters", 1);
  return true;
}

at::Tensor KernelArgs::OnDevice(const at::Tensor& tensor) const {
  // A Python number stays a CPU wrapped number, as in eager: on the device
  // it would promote as a 0-dim tensor (int_tensor + 2.5 in double).
  if (device_.is_cpu() || !tensor.defined() || !tensor.is_cpu() ||
      tensor.unsafeGetTensorImpl()->is_wrapped_number()) {
    return contiguous_ && tensor.defined() ? tensor.contiguous() : tensor;
  }
  return contiguous_ ? tensor.to(device_).contiguous() : tensor.to(device_);
}

const at::Tensor& KernelArgs::Next() {
  TORCH_CHECK(next_input_ < inputs_.size(),
              "lazyfuse: ",
              op_,
              ": lowering reads more inputs than the step has (",
              inputs_.size(),
              ")");
  ++next_operand_;
  return slots_[inputs_[next_input_++]];
}

at::Tensor KernelArgs::tensor() {
  return OnDevice(Next());
}

const at::Tensor& KernelArgs::host_tensor() {
  return Next();
}

std::optional<at::Tensor> KernelArgs::optional_tensor(bool present) {
  if (!present) {
    return std::nullopt;
  }
  return OnDevice(Next());
}

std::vector<at::Tensor> KernelArgs::tensor_list() {
  TORCH_CHECK(next_operand_ < operand_arity_.size(),
              "lazyfuse: ",
              op_,
              ": step has no tensor-list operand at position ",
              next_operand_);
  const uint32_t count = operand_arity_[next_operand_++];
  std::vector<at::Tensor> list;
  list.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    list.push_back(OnDevice(slots_[inputs_[next_input_++]]));
  }
  return list;
}

at::Scalar KernelArgs::scalar() {
  // Host scalars live on the CPU, so item() here never waits on a device.
  return Next().item();
}

std::optional<at::Scalar> KernelArgs::optional_scalar(bool present) {
  if (!present) {
    return std::nullopt;
  }
  return scalar();
}

const c10::IValue* Step::attr(const std::string& name) const {
  for (const auto& entry : attrs) {
    if (entry.first == name) {
      return &entry.second;
    }
  }
  return nullptr;
}

std::string Step::qualified_op() const {
  return overload.empty() ? op : op + "." + overload;
}

namespace {

std::string FormatBuffer(const Program& program, BufferId id) {
  const BufferInfo& info = program.buffers.at(id);
  std::ostringstream out;
  out << "%" << id << ":" << c10::toString(info.dtype) << "[";
  for (const auto i : c10::irange(info.sizes.size())) {
    out << (i ? "," : "") << info.sizes[i];
  }
  out << "]";
  return out.str();
}

std::string FormatBufferList(const Program& program, const std::vector<BufferId>& ids) {
  std::ostringstream out;
  for (const auto i : c10::irange(ids.size())) {
    out << (i ? ", " : "") << FormatBuffer(program, ids[i]);
  }
  return out.str();
}

}  // namespace

std::string Program::ToString() const {
  std::ostringstream out;
  out << "program(" << buffers.size() << " buffers, " << steps.size() << " steps)\n";
  for (const auto k : c10::irange(parameters.size())) {
    out << "  param " << k << ": " << FormatBuffer(*this, parameters[k]) << "\n";
  }
  for (const auto& constant : constants) {
    out << "  const: " << FormatBuffer(*this, constant.first) << " = ";
    if (constant.second.numel() == 1) {
      const at::Scalar value = constant.second.item();
      if (value.isFloatingPoint()) {
        out << value.toDouble();
      } else if (value.isBoolean()) {
        out << (value.toBool() ? "true" : "false");
      } else {
        out << value.toLong();
      }
    } else {
      out << "<tensor>";
    }
    out << "\n";
  }
  for (const auto i : c10::irange(steps.size())) {
    const Step& step = steps[i];
    out << "  " << i << ": " << FormatBufferList(*this, step.outputs) << " = "
        << step.qualified_op() << "(" << FormatBufferList(*this, step.inputs) << ") ["
        << StepKindName(step.kind) << "]";
    if (!release_after.empty() && !release_after[i].empty()) {
      out << " frees";
      for (BufferId id : release_after[i]) {
        out << " %" << id;
      }
    }
    out << "\n";
  }
  out << "  results: " << FormatBufferList(*this, results) << "\n";
  for (const DerivedResult& entry : derived_results) {
    out << "  derived: result " << entry.result << " from result " << entry.from << "\n";
  }
  return out.str();
}

BufferId ProgramBuilder::AddBuffer(at::ScalarType dtype, std::vector<int64_t> sizes) {
  program_.buffers.push_back(BufferInfo{dtype, std::move(sizes)});
  return static_cast<BufferId>(program_.buffers.size() - 1);
}

BufferId ProgramBuilder::AddParameter(at::ScalarType dtype,
                                      std::vector<int64_t> sizes,
                                      bool wrapped_number) {
  BufferId id = AddBuffer(dtype, std::move(sizes));
  program_.buffers[id].wrapped_number = wrapped_number;
  program_.parameters.push_back(id);
  return id;
}

BufferId ProgramBuilder::AddConstant(at::Tensor value) {
  BufferId id = AddBuffer(value.scalar_type(), value.sizes().vec());
  program_.buffers[id].wrapped_number = value.unsafeGetTensorImpl()->is_wrapped_number();
  program_.constants.emplace_back(id, std::move(value));
  return id;
}

void ProgramBuilder::AddStep(Step step) {
  for (BufferId id : step.inputs) {
    TORCH_CHECK(id >= 0 && static_cast<size_t>(id) < program_.buffers.size(),
                "lazyfuse: step ",
                step.op,
                " reads unknown buffer %",
                id);
  }
  program_.steps.push_back(std::move(step));
}

size_t ProgramBuilder::AddResult(BufferId buffer) {
  program_.results.push_back(buffer);
  return program_.results.size() - 1;
}

void ComputeLifetimes(Program& p) {
  constexpr int kNever = -1;
  constexpr int kKeep = std::numeric_limits<int>::max();
  // last_use[b]: index of the last step that reads or writes b.
  std::vector<int> last_use(p.buffers.size(), kNever);
  for (const auto i : c10::irange(p.steps.size())) {
    for (BufferId id : p.steps[i].inputs) {
      last_use[id] = static_cast<int>(i);
    }
    for (BufferId id : p.steps[i].outputs) {
      last_use[id] = std::max(last_use[id], static_cast<int>(i));
    }
  }
  const std::vector<bool> kept = KeptResults(p);
  for (const auto id : c10::irange(p.buffers.size())) {
    if (kept[id]) {
      last_use[id] = kKeep;
    }
  }
  p.release_after.assign(p.steps.size(), {});
  for (const auto id : c10::irange(p.buffers.size())) {
    const int last = last_use[id];
    if (last != kNever && last != kKeep) {
      p.release_after[last].push_back(static_cast<BufferId>(id));
    }
  }
}

std::vector<int> MakingSteps(const Program& program) {
  std::vector<int> making_step(program.buffers.size(), -1);
  for (size_t s = 0; s < program.steps.size(); ++s) {
    for (BufferId id : program.steps[s].outputs) {
      making_step[id] = static_cast<int>(s);
    }
  }
  return making_step;
}

namespace {

// By result, whether it reads a buffer marked in `needs`, through the steps
// from `first_step` on.
std::vector<bool> ResultsReading(const Program& program,
                                 std::vector<bool> needs,
                                 size_t first_step) {
  for (size_t s = first_step; s < program.steps.size(); ++s) {
    const Step& current = program.steps[s];
    const bool reads = std::any_of(
        current.inputs.begin(), current.inputs.end(), [&](BufferId id) { return needs[id]; });
    if (reads) {
      for (BufferId id : current.outputs) {
        needs[id] = true;
      }
    }
  }
  std::vector<bool> results(program.results.size());
  for (size_t k = 0; k < program.results.size(); ++k) {
    results[k] = needs[program.results[k]];
  }
  for (const DerivedResult& entry : program.derived_results) {
    results[entry.result] = results[entry.result] || results[entry.from];
  }
  return results;
}

}  // namespace

std::vector<bool> ResultsNeedingStep(const Program& program, size_t step) {
  std::vector<bool> needs(program.buffers.size(), false);
  for (BufferId id : program.steps.at(step).outputs) {
    needs[id] = true;
  }
  return ResultsReading(program, std::move(needs), step + 1);
}

std::vector<bool> ResultsNeedingParameters(const Program& program,
                                           const std::vector<bool>& parameters) {
  std::vector<bool> needs(program.buffers.size(), false);
  for (size_t k = 0; k < parameters.size() && k < program.parameters.size(); ++k) {
    if (parameters[k]) {
      needs[program.parameters[k]] = true;
    }
  }
  return ResultsReading(program, std::move(needs), 0);
}

std::vector<bool> KeptResults(const Program& program) {
  std::vector<bool> kept(program.buffers.size(), false);
  std::vector<bool> derived(program.results.size(), false);
  for (const DerivedResult& entry : program.derived_results) {
    derived[entry.result] = true;
  }
  for (size_t k = 0; k < program.results.size(); ++k) {
    kept[program.results[k]] = kept[program.results[k]] || !derived[k];
  }
  return kept;
}

Program ProgramBuilder::Finish() {
  ComputeLifetimes(program_);
  return std::move(program_);
}

}  // namespace lazyfuse
