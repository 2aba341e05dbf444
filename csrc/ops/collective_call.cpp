#include "ops/collective_call.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "ltc/config.h"

namespace lazyfuse {

TensorArgument Flatten(size_t position, Use use, const c10::IValue& value) {
  TensorArgument argument;
  argument.position = position;
  argument.use = use;
  if (value.isTensor()) {
    argument.tensors.push_back(value.toTensor());
  } else if (value.isTensorList()) {
    argument.depth = 1;
    argument.tensors = value.toTensorList().vec();
  } else {
    argument.depth = 2;
    for (const c10::IValue& row : value.toListRef()) {
      std::vector<at::Tensor> tensors = row.toTensorList().vec();
      argument.rows.push_back(tensors.size());
      argument.tensors.insert(argument.tensors.end(), tensors.begin(), tensors.end());
    }
  }
  argument.count = argument.tensors.size();
  return argument;
}

namespace {

c10::IValue Rebuild(const TensorArgument& shape, const std::vector<at::Tensor>& tensors) {
  if (shape.depth == 0) {
    return c10::IValue(tensors.at(0));
  }
  if (shape.depth == 1) {
    return c10::IValue(c10::List<at::Tensor>(tensors));
  }
  c10::List<c10::List<at::Tensor>> rows;
  size_t next = 0;
  for (size_t count : shape.rows) {
    rows.push_back(c10::List<at::Tensor>(
        std::vector<at::Tensor>(tensors.begin() + next, tensors.begin() + next + count)));
    next += count;
  }
  return c10::IValue(rows);
}

thread_local const CollectiveGroups* t_groups = nullptr;

c10::intrusive_ptr<c10d::ProcessGroup> FindGroup(const std::string& name, const std::string& op) {
  if (t_groups != nullptr) {
    if (const auto found = t_groups->by_name.find(name); found != t_groups->by_name.end()) {
      return found->second;
    }
  }
  try {
    return c10d::resolve_process_group(name);
  } catch (const c10::Error& error) {
    TORCH_CHECK(false,
                "lazyfuse: ",
                op,
                ": process group '",
                name,
                "' no longer exists (destroyed before the graph ran?): ",
                error.what_without_backtrace());
  }
}

}  // namespace

std::shared_ptr<const CollectiveGroups> GroupsForAnotherThread(const Program& program) {
  auto groups = std::make_shared<CollectiveGroups>();
  for (const Step& step : program.steps) {
    if (step.kind != StepKind::kCollective) {
      continue;
    }
    const c10::IValue* name = step.attr(kGroupAttr);
    if (name == nullptr) {
      return nullptr;
    }
    c10::intrusive_ptr<c10d::ProcessGroup> group;
    try {
      group = c10d::resolve_process_group(name->toStringRef());
    } catch (const c10::Error&) {
      return nullptr;  // run here, where it fails as it would have
    }
    if (group->getBackendName() != "gloo") {
      return nullptr;
    }
    groups->by_name.emplace(name->toStringRef(), std::move(group));
  }
  return groups;
}

UseCollectiveGroups::UseCollectiveGroups(const CollectiveGroups* groups) : previous_(t_groups) {
  t_groups = groups;
}

UseCollectiveGroups::~UseCollectiveGroups() {
  t_groups = previous_;
}

std::vector<at::Tensor> RunCollective(const CollectiveCall& call, KernelArgs& args) {
  const c10::Device device = BackingDevice();
  const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(call.op.c_str(), call.overload.c_str());
  torch::jit::Stack stack = call.arguments;
  if (call.group_position) {
    stack[*call.group_position] = c10::IValue(FindGroup(call.group_name, call.op));
  }
  std::vector<at::Tensor> results;
  size_t input = 0;
  size_t fresh = 0;
  for (const TensorArgument& shape : call.tensors) {
    std::vector<at::Tensor> tensors;
    for (size_t k = 0; k < shape.count; ++k) {
      if (shape.use == Use::kRead || shape.use == Use::kReadWrite) {
        at::Tensor tensor = args.tensor();
        if (shape.use == Use::kReadWrite) {
          // Written in place by the op: the buffer itself when nothing else
          // reads it any more, else a copy (collectives need contiguous data).
          if (args.may_overwrite(input) && tensor.is_contiguous()) {
            args.overwrote(input);
          } else {
            tensor = tensor.clone(at::MemoryFormat::Contiguous);
          }
          results.push_back(tensor);
        }
        ++input;
        tensors.push_back(std::move(tensor));
      } else {
        const torch::lazy::Shape& like = call.fresh.at(fresh++);
        at::Tensor tensor =
            at::empty(like.sizes(), at::TensorOptions(like.scalar_type()).device(device));
        if (shape.use == Use::kWrite) {
          results.push_back(tensor);
        }
        tensors.push_back(std::move(tensor));
      }
    }
    stack[shape.position] = Rebuild(shape, tensors);
  }
  op.callBoxed(&stack);
  if (call.functional) {
    static const c10::OperatorHandle wait =
        c10::Dispatcher::singleton().findSchemaOrThrow("_c10d_functional::wait_tensor", "");
    for (c10::IValue& value : stack) {
      torch::jit::Stack waited{value};
      wait.callBoxed(&waited);
      results.push_back(waited.at(0).toTensor());
    }
  } else {
    stack.back().toCustomClass<c10d::Work>()->wait();
  }
  results.push_back(at::empty({0}, at::TensorOptions(at::kByte).device(device)));
  return results;
}

}  // namespace lazyfuse
