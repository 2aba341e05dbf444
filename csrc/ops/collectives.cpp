#include "ops/collectives.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/ir_builder.h>
#include <torch/csrc/lazy/core/lazy_graph_executor.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <unordered_map>
#include <vector>

#include "ltc/config.h"
#include "ltc/graph_executor.h"
#include "ops/closure_node.h"
#include "ops/collective_call.h"
#include "ops/functional_tensors.h"

namespace lazyfuse {
namespace {

struct CollectiveSpec {
  // By argument position; positions not listed hold no tensor.
  std::map<size_t, Use> uses;
  // A functional collective returns fresh tensors, which wait_tensor
  // completes; the others return their written arguments and a Work.
  bool functional = false;
};

const std::unordered_map<std::string, CollectiveSpec>& Specs() {
  static const auto* specs = new std::unordered_map<std::string, CollectiveSpec>{
      {"c10d::allreduce_", {{{0, Use::kReadWrite}}}},
      {"c10d::broadcast_", {{{0, Use::kReadWrite}}}},
      {"c10d::allgather_", {{{0, Use::kWrite}, {1, Use::kRead}}}},
      {"c10d::_allgather_base_", {{{0, Use::kWrite}, {1, Use::kRead}}}},
      {"c10d::reduce_scatter_", {{{0, Use::kWrite}, {1, Use::kRead}}}},
      {"c10d::_reduce_scatter_base_", {{{0, Use::kWrite}, {1, Use::kRead}}}},
      {"c10d::barrier", {{{0, Use::kDispatch}}}},
      {"_c10d_functional::all_reduce", {{{0, Use::kRead}}, true}},
      {"_c10d_functional::all_gather_into_tensor", {{{0, Use::kRead}}, true}},
      {"_c10d_functional::reduce_scatter_tensor", {{{0, Use::kRead}}, true}},
  };
  return *specs;
}

bool TypeIs(const c10::Argument& argument, const char* name) {
  return argument.type()->str().find(name) != std::string::npos;
}

// The last collective recorded: its token output, an empty tensor, is live
// until a graph runs it, so every sync of live tensors includes it.
struct Token {
  std::mutex mutex;
  torch::lazy::LazyTensorPtr tensor;
  std::atomic<bool> maybe_pending{false};

  // The IR of the last collective not yet run, if any.
  torch::lazy::Value Pending() {
    if (tensor != nullptr) {
      if (torch::lazy::Value value = tensor->CurrentIrValue()) {
        return value;
      }
      tensor.reset();
    }
    maybe_pending = false;
    return torch::lazy::Value();
  }
};

Token& GetToken() {
  static auto* token = new Token();
  return *token;
}

c10::intrusive_ptr<c10d::Work> CompletedWork(const c10::IValue& value) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(value.type());
  future->markCompleted(value);
  return c10d::Work::create_from_future(future);
}

torch::lazy::hash_t HashArgument(const std::string& op,
                                 const c10::Argument& schema,
                                 const c10::IValue& value) {
  if (TypeIs(schema, "c10d.ReduceOp")) {
    const auto reduce = value.toCustomClass<c10d::ReduceOp>();
    TORCH_CHECK(reduce->op_ != c10d::ReduceOp::PREMUL_SUM,
                "lazyfuse: ",
                op,
                ": ReduceOp.PREMUL_SUM is not supported on lazy tensors; scale the tensor, then "
                "reduce with SUM");
    return torch::lazy::Hash(static_cast<int64_t>(reduce->op_));
  }
  if (value.isNone()) {
    return torch::lazy::Hash(std::string("None"));
  }
  if (value.isString()) {
    return torch::lazy::Hash(value.toStringRef());
  }
  if (value.isInt() || value.isBool()) {
    return torch::lazy::Hash(value.isInt() ? value.toInt() : int64_t{value.toBool()});
  }
  if (value.isIntList()) {
    return torch::lazy::Hash(value.toIntVector());
  }
  TORCH_CHECK(false,
              "lazyfuse: ",
              op,
              ": argument '",
              schema.name(),
              "' of type ",
              value.tagKind(),
              " is not supported on lazy tensors");
}

// The output shape of a functional collective.
torch::lazy::Shape FunctionalOutput(const std::string& op,
                                    const at::Tensor& input,
                                    const torch::jit::Stack& arguments) {
  std::vector<int64_t> sizes = input.sizes().vec();
  if (op == "_c10d_functional::all_reduce") {
    return torch::lazy::Shape(input.scalar_type(), sizes);
  }
  TORCH_CHECK(!sizes.empty(), "lazyfuse: ", op, ": the input must have at least one dimension");
  const int64_t group_size =
      arguments.at(op == "_c10d_functional::all_gather_into_tensor" ? 1 : 2).toInt();
  if (op == "_c10d_functional::all_gather_into_tensor") {
    sizes[0] *= group_size;
  } else {
    TORCH_CHECK(group_size > 0 && sizes[0] % group_size == 0,
                "lazyfuse: ",
                op,
                ": the input's first dimension (",
                sizes[0],
                ") must divide evenly among the group's ",
                group_size,
                " ranks");
    sizes[0] /= group_size;
  }
  return torch::lazy::Shape(input.scalar_type(), sizes);
}

// Gives `tensor` (functional or bare) the new lazy value `value`.
void Assign(const std::string& op, const at::Tensor& tensor, const torch::lazy::Value& value) {
  if (at::functionalization::impl::isFunctionalTensor(tensor)) {
    const at::Tensor inner = FromFunctional(tensor);
    TakeWrittenValue(op,
                     tensor,
                     torch::lazy::CreateAtenFromLtcTensor(torch::lazy::LazyTensor::Create(
                         value, torch::lazy::TryGetLtcTensor(inner)->GetDevice())));
  } else {
    torch::lazy::TryGetLtcTensor(tensor)->SetInPlaceIrValue(value);
  }
}

// The kernel of every collective in Specs(), for functional and bare lazy
// tensors alike; other tensors go on as if lazyfuse were not there.
void RecordCollective(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = schema.name();
  const CollectiveSpec& spec = Specs().at(name);
  const size_t num_arguments = schema.arguments().size();
  const size_t begin = stack->size() - num_arguments;

  CollectiveCall call;
  call.op = name;
  call.overload = schema.overload_name();
  call.functional = spec.functional;
  bool lazy = false;
  std::optional<c10::Device> other;
  for (const auto& [position, use] : spec.uses) {
    call.tensors.push_back(Flatten(position, use, (*stack)[begin + position]));
    for (const at::Tensor& tensor : call.tensors.back().tensors) {
      if (IsLazyTensor(tensor)) {
        lazy = true;
      } else if (tensor.defined()) {
        other = tensor.device();
      }
    }
  }
  if (!lazy) {
    CallAsFunctionalizationFallback(op, stack);
    return;
  }
  TORCH_CHECK(!other,
              "lazyfuse: ",
              name,
              ": every tensor must be on the lazy device, but one is on ",
              other ? other->str() : std::string());

  torch::lazy::hash_t hash = torch::lazy::Hash(name);
  for (size_t i = 0; i < num_arguments; ++i) {
    const c10::Argument& argument = schema.arguments()[i];
    c10::IValue value = (*stack)[begin + i];
    if (spec.uses.count(i) != 0) {
      value = c10::IValue();
    } else if (TypeIs(argument, "c10d.ProcessGroup")) {
      const auto group = value.toCustomClass<c10d::ProcessGroup>();
      call.group_position = i;
      call.group_name = group->getGroupName();
      hash = torch::lazy::HashCombine(hash, torch::lazy::Hash(call.group_name));
      hash = torch::lazy::HashCombine(hash, torch::lazy::Hash(int64_t{group->getSize()}));
      value = c10::IValue();
    } else {
      hash = torch::lazy::HashCombine(hash, HashArgument(name, argument, value));
    }
    call.arguments.push_back(std::move(value));
  }

  std::optional<torch::lazy::BackendDevice> device =
      torch::lazy::GetBackendDevice(call.tensors.at(0).tensors.at(0));
  std::vector<torch::lazy::Value> operands;
  std::vector<torch::lazy::Shape> shapes;
  std::vector<at::Tensor> written;
  for (TensorArgument& argument : call.tensors) {
    hash = torch::lazy::HashCombine(hash, torch::lazy::Hash(argument.rows));
    hash = torch::lazy::HashCombine(
        hash,
        torch::lazy::Hash(static_cast<int64_t>(argument.tensors.size() * 8 + argument.depth)));
    for (const at::Tensor& tensor : argument.tensors) {
      const torch::lazy::Shape shape(tensor.scalar_type(), tensor.sizes().vec());
      if (argument.use == Use::kRead || argument.use == Use::kReadWrite) {
        const at::Tensor inner = FromFunctional(tensor);
        const torch::lazy::LazyTensorPtr lazy_tensor = torch::lazy::TryGetLtcTensor(inner);
        TORCH_CHECK(lazy_tensor != nullptr, "lazyfuse: ", name, ": expected a lazy tensor");
        operands.push_back(lazy_tensor->GetIrValue());
      } else {
        call.fresh.push_back(shape);
      }
      if (argument.use == Use::kReadWrite || argument.use == Use::kWrite) {
        shapes.push_back(shape);
        written.push_back(tensor);
      }
    }
  }
  TORCH_CHECK(device, "lazyfuse: ", name, ": no lazy device for its tensors");
  if (spec.functional) {
    shapes.push_back(FunctionalOutput(name, call.tensors.at(0).tensors.at(0), call.arguments));
  }
  for (TensorArgument& argument : call.tensors) {
    argument.tensors.clear();
  }
  shapes.emplace_back(at::kByte, std::vector<int64_t>{0});  // the token

  Token& token = GetToken();
  std::lock_guard<std::mutex> lock(token.mutex);
  if (torch::lazy::Value previous = token.Pending()) {
    operands.push_back(std::move(previous));  // orders the steps; the step never reads it
  }
  const size_t num_outputs = shapes.size();
  StepAttrs attrs;
  if (call.group_position) {
    attrs.emplace_back(kGroupAttr, c10::IValue(call.group_name));
  }
  auto node = torch::lazy::MakeNode<ClosureNode>(
      torch::lazy::OpKind(c10::Symbol::fromQualString(name)),
      operands,
      std::move(shapes),
      hash,
      StepKind::kCollective,
      [call = std::move(call)](KernelArgs& args) { return RunCollective(call, args); },
      std::move(attrs));
  token.tensor =
      torch::lazy::LazyTensor::Create(torch::lazy::Value(node, num_outputs - 1), *device);
  token.maybe_pending = true;

  if (spec.functional) {
    torch::jit::drop(*stack, num_arguments);
    torch::jit::push(*stack,
                     torch::lazy::CreateAtenFromLtcTensor(
                         torch::lazy::LazyTensor::Create(torch::lazy::Value(node, 0), *device)));
    return;
  }
  for (size_t k = 0; k < written.size(); ++k) {
    Assign(name, written[k], torch::lazy::Value(node, k));
  }
  // The op returns its first argument (the tensors it wrote) and a Work.
  const c10::IValue result = (*stack)[begin];
  torch::jit::drop(*stack, num_arguments);
  if (schema.returns().size() == 2) {
    torch::jit::push(*stack, result);
  }
  torch::jit::push(*stack, CompletedWork(schema.returns().size() == 2 ? result : c10::IValue()));
}

// wait_tensor: a recorded collective is complete once its graph runs.
at::Tensor WaitTensor(const at::Tensor& tensor) {
  return torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(torch::lazy::TryGetLtcTensor(tensor)->GetIrValue(),
                                      torch::lazy::TryGetLtcTensor(tensor)->GetDevice()));
}

// AnyTensorIn, and the Tensor[][] some collectives take (allgather_'s outputs).
bool HoldsLazyTensor(const c10::IValue& value) {
  if (value.isList() && !value.isTensorList() && !value.isOptionalTensorList()) {
    const c10::ArrayRef<c10::IValue> elements = value.toListRef();
    return std::any_of(elements.begin(), elements.end(), HoldsLazyTensor);
  }
  return AnyTensorIn(value, IsLazyTensor);
}

std::function<void()>& WaitForGraphCollectives() {
  static auto* wait = new std::function<void()>();
  return *wait;
}

// Every c10d op, before its backend's kernel: a collective on eager tensors
// waits for the collectives of graphs still running on another thread, so
// that each rank issues its collectives in the order its program called them.
void OrderAfterGraphCollectives(const c10::OperatorHandle& op,
                                c10::DispatchKeySet keys,
                                torch::jit::Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  const bool lazy = std::any_of(
      stack->end() - static_cast<std::ptrdiff_t>(num_arguments), stack->end(), HoldsLazyTensor);
  if (!lazy && WaitForGraphCollectives()) {
    WaitForGraphCollectives()();
  }
  op.redispatchBoxed(
      keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect),
      stack);
}

}  // namespace

void RegisterCollectives(std::function<void()> wait_for_graph_collectives) {
  WaitForGraphCollectives() = std::move(wait_for_graph_collectives);
  static auto* c10d_ordered = new torch::Library(
      torch::Library::IMPL, "c10d", c10::DispatchKey::BackendSelect, __FILE__, __LINE__);
  for (const c10::OperatorName& op : c10::Dispatcher::singleton().getAllOpNames()) {
    const auto space = op.getNamespace();
    if (!space || *space != "c10d") {
      continue;
    }
    std::string name = op.name.substr(op.name.find("::") + 2);
    if (!op.overload_name.empty()) {
      name += "." + op.overload_name;
    }
    c10d_ordered->impl(name.c_str(),
                       torch::CppFunction::makeFromBoxedFunction<&OrderAfterGraphCollectives>());
  }
  static auto* c10d_functionalize = new torch::Library(
      torch::Library::IMPL, "c10d", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  static auto* c10d_lazy =
      new torch::Library(torch::Library::IMPL, "c10d", c10::DispatchKey::Lazy, __FILE__, __LINE__);
  static auto* functional_lazy = new torch::Library(
      torch::Library::IMPL, "_c10d_functional", c10::DispatchKey::Lazy, __FILE__, __LINE__);
  for (const auto& [qualified, spec] : Specs()) {
    const std::string name = qualified.substr(qualified.find("::") + 2);
    if (spec.functional) {
      functional_lazy->impl(name.c_str(),
                            torch::CppFunction::makeFromBoxedFunction<&RecordCollective>());
    } else {
      c10d_functionalize->impl(name.c_str(),
                               torch::CppFunction::makeFromBoxedFunction<&RecordCollective>());
      c10d_lazy->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&RecordCollective>());
    }
  }
  functional_lazy->impl("wait_tensor", TORCH_FN(WaitTensor));
}

void SyncCollectivesBeforeRead() {
  Token& token = GetToken();
  if (!token.maybe_pending.load()) {
    return;
  }
  std::optional<torch::lazy::BackendDevice> device;
  {
    std::lock_guard<std::mutex> lock(token.mutex);
    if (!token.Pending()) {
      return;
    }
    device = token.tensor->GetDevice();
  }
  torch::lazy::LazyGraphExecutor::Get()->SyncLiveTensorsGraph(&*device, {}, /*wait=*/true);
  EndIrReuseStep(*device);  // every live tensor has its value, as after mark_step
}

}  // namespace lazyfuse
