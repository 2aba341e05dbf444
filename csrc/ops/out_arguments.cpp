#include "ops/out_arguments.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ltc/config.h"
#include "ltc/eager_fallback.h"
#include "ops/functional_tensors.h"
#include "program/error_text.h"

namespace lazyfuse {
namespace {

using OverloadsByName = std::unordered_map<std::string, std::vector<c10::OperatorHandle>>;

const OverloadsByName& FunctionalOverloads() {
  static const OverloadsByName* overloads = [] {
    auto* found = new OverloadsByName();
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
      if (op && op->hasSchema() && IsFunctionalSchema(op->schema())) {
        (*found)[name.name].push_back(*op);
      }
    }
    return found;
  }();
  return *overloads;
}

// `sum.dim_IntList` for `sum.IntList_out`: the overload taking the out= op's
// other arguments, in order.
std::optional<c10::OperatorHandle> FunctionalVariant(const c10::OperatorHandle& op) {
  std::vector<const c10::Argument*> inputs;
  for (const c10::Argument& argument : op.schema().arguments()) {
    if (!argument.is_out()) {
      inputs.push_back(&argument);
    }
  }
  auto found = FunctionalOverloads().find(op.operator_name().name);
  if (found == FunctionalOverloads().end()) {
    return std::nullopt;
  }
  for (const c10::OperatorHandle& functional : found->second) {
    const auto& arguments = functional.schema().arguments();
    bool same = arguments.size() == inputs.size();
    for (size_t i = 0; same && i < inputs.size(); ++i) {
      same = arguments[i].name() == inputs[i]->name() && *arguments[i].type() == *inputs[i]->type();
    }
    if (same) {
      return functional;
    }
  }
  return std::nullopt;
}

// A meta tensor with `tensor`'s metadata.
at::Tensor MetaLike(const at::Tensor& tensor) {
  if (!tensor.defined() || (tensor.dim() == 0 && tensor.device().is_cpu())) {
    return tensor;  // a CPU scalar goes with tensors of any device
  }
  at::Tensor meta =
      at::empty_strided(tensor.sizes(), tensor.strides(), tensor.options().device(at::kMeta));
  return meta;
}

std::vector<at::Tensor> TensorsIn(const c10::IValue& value) {
  std::vector<at::Tensor> tensors;
  AnyTensorIn(value, [&](const at::Tensor& tensor) {
    tensors.push_back(tensor);
    return false;
  });
  return tensors;
}

[[noreturn]] void RaiseNamingOp(const c10::OperatorHandle& op, const std::exception& error) {
  RaiseWrapping(error, c10::toString(op.operator_name()) + ": " + ErrorText(error));
}

// Runs the call on the backing device, as eager would, then writes each out
// tensor's result into it: a failing op writes nothing.
void RunEagerly(const c10::OperatorHandle& op,
                const std::vector<size_t>& out_positions,
                torch::jit::Stack* stack) {
  CountEagerRun(op,
                "writes an out= tensor of another dtype than its result, which eager may compute "
                "in, so it runs eagerly");
  const size_t num_arguments = op.schema().arguments().size();
  const c10::Device device = BackingDevice();
  at::NoGradGuard no_grad;
  torch::jit::Stack arguments(stack->end() - num_arguments, stack->end());
  torch::jit::Stack eager = arguments;
  for (c10::IValue& value : eager) {
    ForEachTensorIn(value, [&](const at::Tensor& tensor) {
      return IsLazyFunctional(tensor) ? tensor.detach().to(device) : tensor;
    });
  }
  std::vector<at::Tensor> lazy_outs;
  std::vector<at::Tensor> eager_outs;
  for (size_t i : out_positions) {
    for (const at::Tensor& out : TensorsIn(arguments[i])) {
      lazy_outs.push_back(out);
    }
    for (const at::Tensor& out : TensorsIn(eager[i])) {
      eager_outs.push_back(out);
    }
  }
  try {
    op.callBoxed(&eager);
  } catch (const std::exception& error) {
    RaiseNamingOp(op, error);
  }
  for (size_t k = 0; k < lazy_outs.size(); ++k) {
    // As functionalization writes an out= result: resized, if eager resized it.
    TakeWrittenValue(lazy_outs[k], FromFunctional(eager_outs[k].to(lazy_outs[k].device())));
  }
  torch::jit::drop(*stack, num_arguments);
  for (size_t r = 0; r < op.schema().returns().size(); ++r) {
    stack->push_back(arguments[out_positions[r]]);
  }
}

}  // namespace

std::optional<OutCallCheck> OutCallCheck::For(const c10::OperatorHandle& op) {
  std::vector<size_t> outs;
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].is_out()) {
      outs.push_back(i);
    }
  }
  std::optional<c10::OperatorHandle> functional = FunctionalVariant(op);
  const size_t num_returns = op.schema().returns().size();
  if (outs.empty() || !functional || (num_returns != 0 && num_returns != outs.size())) {
    return std::nullopt;
  }
  std::vector<bool> decisive;
  std::vector<bool> number;
  for (const c10::Argument& argument : arguments) {
    const c10::TypePtr type = argument.real_type();
    const std::string text = type->str();
    number.push_back(text.find("Scalar") != std::string::npos &&
                     text.find("ScalarType") == std::string::npos);
    decisive.push_back(argument.is_out() ||
                       (number.back() || text.find("Tensor") != std::string::npos ||
                        text.find("ScalarType") != std::string::npos ||
                        text.find("bool") != std::string::npos ||
                        text.find("str") != std::string::npos));
  }
  return OutCallCheck(
      std::move(outs), std::move(*functional), std::move(decisive), std::move(number));
}

// What decides a call's result dtypes: each tensor's dtype, whether it is a
// 0-dim or CPU scalar (type promotion ranks those lower), each Scalar's kind,
// and the dtype, bool and string arguments (dtype=, half_to_float,
// rounding_mode), and the out tensors' dtypes. Sizes, dims and scalar values
// do not.
std::string OutCallCheck::DtypeKey(const torch::jit::Stack& stack, size_t first) const {
  std::string key;
  const auto describe = [&](const at::Tensor& tensor) {
    if (!tensor.defined()) {
      key += 'u';
      return false;
    }
    key += std::to_string(static_cast<int>(tensor.scalar_type()));
    key += tensor.dim() == 0 ? 'z' : 'n';
    key += tensor.device().is_cpu() ? 'c' : 'l';
    key += tensor.unsafeGetTensorImpl()->is_wrapped_number() ? 'w' : ',';
    return false;
  };
  for (size_t i = 0; i < decisive_.size(); ++i) {
    const c10::IValue& value = stack[first + i];
    key += '|';
    if (!decisive_[i]) {
      continue;
    }
    if (value.isBool()) {
      key += value.toBool() ? "T" : "F";
    } else if (value.isScalar()) {
      key += value.isInt() ? "i" : value.isDouble() ? "d" : "c";
      if (!number_[i] && value.isInt()) {
        key += std::to_string(value.toInt());  // a ScalarType
      }
    } else if (value.isString()) {
      key += value.toStringRef();
    } else if (value.isNone()) {
      key += 'n';
    } else {
      AnyTensorIn(value, describe);
    }
  }
  return key;
}

bool OutCallCheck::RunsEagerly(const c10::OperatorHandle& op, torch::jit::Stack* stack) const {
  const size_t num_arguments = op.schema().arguments().size();
  const size_t first = stack->size() - num_arguments;
  for (size_t i : outs_) {
    if (AnyTensorIn((*stack)[first + i],
                    [](const at::Tensor& out) { return !IsLazyFunctional(out); })) {
      return false;  // out on another device: eager's own device check applies
    }
  }
  const std::string key = DtypeKey(*stack, first);
  std::optional<bool> other_dtype;
  {
    std::lock_guard<std::mutex> lock(decisions_->mutex);
    auto found = decisions_->other_dtype.find(key);
    if (found != decisions_->other_dtype.end()) {
      other_dtype = found->second;
    }
  }
  if (!other_dtype) {
    other_dtype = OutHasOtherDtype(*stack, first, num_arguments);
    std::lock_guard<std::mutex> lock(decisions_->mutex);
    if (decisions_->other_dtype.size() > 1024) {
      decisions_->other_dtype.clear();
    }
    decisions_->other_dtype.emplace(key, *other_dtype);
  }
  if (!*other_dtype) {
    return false;  // torch's functional call and copy give eager's values
  }
  RunEagerly(op, outs_, stack);
  return true;
}

bool OutCallCheck::OutHasOtherDtype(const torch::jit::Stack& stack,
                                    size_t first,
                                    size_t num_arguments) const {
  std::vector<at::Tensor> outs;
  std::vector<bool> is_out(num_arguments, false);
  for (size_t i : outs_) {
    is_out[i] = true;
    for (const at::Tensor& out : TensorsIn(stack[first + i])) {
      outs.push_back(out);
    }
  }
  torch::jit::Stack meta;
  for (size_t i = 0; i < num_arguments; ++i) {
    if (!is_out[i]) {
      meta.push_back(stack[first + i]);
      ForEachTensorIn(meta.back(), MetaLike);
    }
  }
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    functional_.callBoxed(&meta);
  } catch (const std::exception&) {
    return false;  // no meta kernel, or a stricter one: the call raises its own error
  }
  std::vector<at::Tensor> results;
  for (const c10::IValue& result : meta) {
    for (const at::Tensor& tensor : TensorsIn(result)) {
      results.push_back(tensor);
    }
  }
  if (outs.empty() || results.size() != outs.size()) {
    return false;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (results[i].scalar_type() != outs[i].scalar_type()) {
      return true;
    }
  }
  return false;
}

}  // namespace lazyfuse
