#include "ops/out_arguments.h"

#include <ATen/ATen.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ltc/config.h"
#include "ltc/eager_fallback.h"
#include "ops/functional_tensors.h"
#include "ops/meta_tensors.h"
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
  return OnMeta(tensor);
}

std::vector<at::Tensor> TensorsIn(const c10::IValue& value) {
  std::vector<at::Tensor> tensors;
  AnyTensorIn(value, [&](const at::Tensor& tensor) {
    tensors.push_back(tensor);
    return false;
  });
  return tensors;
}

std::vector<at::Tensor> TensorsIn(const torch::jit::Stack& values) {
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& value : values) {
    for (const at::Tensor& tensor : TensorsIn(value)) {
      tensors.push_back(tensor);
    }
  }
  return tensors;
}

constexpr const char* kOtherDtype =
    "writes an out= tensor of another dtype than its result, which eager may compute in, so it "
    "runs eagerly";

[[noreturn]] void RaiseNamingOp(const c10::OperatorHandle& op, const std::exception& error) {
  RaiseWrapping(error, c10::toString(op.operator_name()) + ": " + ErrorText(error));
}

// Eager resizes an out= tensor of another shape than its result
// (resize_output, which warns unless it was empty). Functionalization's write
// reshapes a base tensor, but a view is regenerated from its base through its
// view ops, which would still give the old shape: it is resized first, which
// adds the new shape as one more view op. matmul's out= of a vector times a
// matrix does this: mm writes a row into it.
void WriteOut(const std::string& writer,
              const at::Tensor& out,
              const at::Tensor& value,
              bool warn_on_resize) {
  if (out.sizes() != value.sizes()) {
    if (warn_on_resize) {
      at::native::resize_output_check(out, value.sizes());
    }
    if (IsLazyView(out)) {
      TORCH_CHECK(value.numel() <= out.numel(),
                  writer,
                  ": the out= tensor is a view of shape ",
                  out.sizes(),
                  ", and lazyfuse cannot resize a view to the result's larger shape ",
                  value.sizes(),
                  "; pass an out= tensor of that shape");
      out.resize_(value.sizes());
    }
  }
  TakeWrittenValue(writer, out, value);
}

// Runs the call on the backing device, as eager would, then writes each out
// tensor's result into it: a failing op writes nothing.
// `written` lists the out tensors first, as the op returns them.
void RunEagerly(const c10::OperatorHandle& op,
                const std::vector<size_t>& written,
                const char* why,
                torch::jit::Stack* stack) {
  CountEagerRun(op, why);
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
  for (size_t i : written) {
    for (const at::Tensor& out : TensorsIn(arguments[i])) {
      lazy_outs.push_back(out);
    }
    for (const at::Tensor& out : TensorsIn(eager[i])) {
      eager_outs.push_back(out);
    }
  }
  CheckWriteTargets(op.schema().name(), lazy_outs);
  try {
    op.callBoxed(&eager);
  } catch (const std::exception& error) {
    RaiseNamingOp(op, error);
  }
  for (size_t k = 0; k < lazy_outs.size(); ++k) {
    // Resized, if eager resized it (eager's op has warned).
    WriteOut(op.schema().name(),
             lazy_outs[k],
             FromFunctional(eager_outs[k].to(lazy_outs[k].device())),
             /*warn_on_resize=*/false);
  }
  torch::jit::drop(*stack, num_arguments);
  for (size_t r = 0; r < op.schema().returns().size(); ++r) {
    stack->push_back(arguments[written[r]]);
  }
}

bool AllLazy(const torch::jit::Stack& stack, size_t first, const std::vector<size_t>& positions) {
  for (size_t i : positions) {
    if (AnyTensorIn(stack[first + i], [](const at::Tensor& tensor) {
          return tensor.defined() && !IsLazyFunctional(tensor);
        })) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<OutCall> OutCall::For(const c10::OperatorHandle& op) {
  std::vector<size_t> outs;
  std::vector<size_t> written_inputs;
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (arguments[i].is_out()) {
      outs.push_back(i);
    } else if (alias != nullptr && alias->isWrite()) {
      written_inputs.push_back(i);
    }
  }
  const auto& returns = op.schema().returns();
  if (outs.empty() || (!returns.empty() && returns.size() != outs.size())) {
    return std::nullopt;
  }
  std::optional<c10::OperatorHandle> functional = FunctionalVariant(op);
  const bool functional_decomposes =
      functional &&
      functional->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
      !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
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
  return OutCall(std::move(outs),
                 std::move(written_inputs),
                 std::move(functional),
                 functional_decomposes,
                 std::move(decisive),
                 std::move(number));
}

// What decides a call's result dtypes: each tensor's dtype, whether it is a
// 0-dim or CPU scalar (type promotion ranks those lower), each Scalar's kind,
// and the dtype, bool and string arguments (dtype=, half_to_float,
// rounding_mode), and the out tensors' dtypes. Sizes, dims and scalar values
// do not.
std::string OutCall::DtypeKey(const torch::jit::Stack& stack, size_t first) const {
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

bool OutCall::RunsItself(const c10::OperatorHandle& op, torch::jit::Stack* stack) const {
  const size_t num_arguments = op.schema().arguments().size();
  const size_t first = stack->size() - num_arguments;
  if (!AllLazy(*stack, first, outs_) || !AllLazy(*stack, first, written_inputs_)) {
    return false;  // a tensor on another device: eager's own device check applies
  }
  if (!written_inputs_.empty()) {
    if (AutogradRecords(*stack, num_arguments)) {
      return false;  // torch's autograd kernel raises eager's error
    }
    std::vector<size_t> written = outs_;
    written.insert(written.end(), written_inputs_.begin(), written_inputs_.end());
    RunEagerly(op,
               written,
               "writes arguments besides its out= tensors, whose results functionalization "
               "writes into the wrong ones, so it runs eagerly",
               stack);
    return true;
  }
  if (!functional_) {
    return false;
  }
  const OutDtypes dtypes = Decision(*stack, first, num_arguments);
  if (dtypes == OutDtypes::kOther) {
    RunEagerly(op, outs_, kOtherDtype, stack);
    return true;
  }
  if (AutogradRecords(*stack, num_arguments)) {
    return false;  // torch's autograd kernel raises eager's error
  }
  if (dtypes == OutDtypes::kUnknown) {
    RunFunctionalHere(op, /*check_dtypes=*/true, stack);
    return true;
  }
  const std::vector<at::Tensor> outs = Outs(op, *stack);
  if (!functional_decomposes_ && std::none_of(outs.begin(), outs.end(), IsLazyView)) {
    return false;  // torch's functional call and copy give eager's values
  }
  RunFunctionalHere(op, /*check_dtypes=*/false, stack);
  return true;
}

void OutCall::RunFunctionalHere(const c10::OperatorHandle& op,
                                bool check_dtypes,
                                torch::jit::Stack* stack) const {
  const size_t num_arguments = op.schema().arguments().size();
  torch::jit::Stack call =
      FunctionalArguments(*stack, stack->size() - num_arguments, num_arguments);
  functional_->callBoxed(&call);
  const std::vector<at::Tensor> results = TensorsIn(call);
  const std::vector<at::Tensor> outs = Outs(op, *stack);
  if (check_dtypes) {
    bool same = results.size() == outs.size();
    for (size_t k = 0; same && k < outs.size(); ++k) {
      same = results[k].scalar_type() == outs[k].scalar_type();
    }
    if (!same) {
      RunEagerly(op, outs_, kOtherDtype, stack);  // the lazy results are dropped
      return;
    }
  }
  TORCH_CHECK(results.size() == outs.size(),
              op.schema().name(),
              ": its functional variant returned ",
              results.size(),
              " tensors for ",
              outs.size(),
              " out tensors");
  CheckWriteTargets(op.schema().name(), outs);
  for (size_t k = 0; k < outs.size(); ++k) {
    WriteOut(op.schema().name(), outs[k], FromFunctional(results[k]), /*warn_on_resize=*/true);
  }
  torch::jit::Stack arguments(stack->end() - num_arguments, stack->end());
  torch::jit::drop(*stack, num_arguments);
  for (size_t r = 0; r < op.schema().returns().size(); ++r) {
    stack->push_back(arguments[outs_[r]]);
  }
}

torch::jit::Stack OutCall::FunctionalArguments(const torch::jit::Stack& stack,
                                               size_t first,
                                               size_t num_arguments) const {
  std::vector<bool> is_out(num_arguments, false);
  for (size_t i : outs_) {
    is_out[i] = true;
  }
  torch::jit::Stack arguments;
  for (size_t i = 0; i < num_arguments; ++i) {
    if (!is_out[i]) {
      arguments.push_back(stack[first + i]);
    }
  }
  return arguments;
}

std::vector<at::Tensor> OutCall::Outs(const c10::OperatorHandle& op,
                                      const torch::jit::Stack& stack) const {
  return OutsFrom(stack, stack.size() - op.schema().arguments().size());
}

std::vector<at::Tensor> OutCall::OutsFrom(const torch::jit::Stack& stack, size_t first) const {
  std::vector<at::Tensor> outs;
  for (size_t i : outs_) {
    for (const at::Tensor& out : TensorsIn(stack[first + i])) {
      outs.push_back(out);
    }
  }
  return outs;
}

void OutCall::KeepResultsInOuts(const c10::OperatorHandle& op,
                                const std::vector<at::Tensor>& outs,
                                torch::jit::Stack* stack) const {
  const size_t num_returns = op.schema().returns().size();
  if (num_returns == 0 || num_returns != outs.size()) {
    return;  // a list of out tensors, written in place
  }
  for (size_t r = 0; r < num_returns; ++r) {
    c10::IValue& returned = (*stack)[stack->size() - num_returns + r];
    if (!returned.isTensor() || returned.toTensor().is_same(outs[r]) ||
        !IsLazyFunctional(outs[r])) {
      continue;
    }
    const at::Tensor result = returned.toTensor();
    if (IsLazyFunctional(result)) {
      TakeWrittenValue(op.schema().name(), outs[r], FromFunctional(result));
    }
    returned = c10::IValue(outs[r]);
  }
}

OutCall::OutDtypes OutCall::Decision(const torch::jit::Stack& stack,
                                     size_t first,
                                     size_t num_arguments) const {
  const std::string key = DtypeKey(stack, first);
  {
    std::lock_guard<std::mutex> lock(decisions_->mutex);
    auto found = decisions_->by_key.find(key);
    if (found != decisions_->by_key.end()) {
      return found->second;
    }
  }
  const OutDtypes decided = DecideOnMeta(stack, first, num_arguments);
  std::lock_guard<std::mutex> lock(decisions_->mutex);
  if (decisions_->by_key.size() > 1024) {
    decisions_->by_key.clear();
  }
  decisions_->by_key.emplace(key, decided);
  return decided;
}

OutCall::OutDtypes OutCall::DecideOnMeta(const torch::jit::Stack& stack,
                                         size_t first,
                                         size_t num_arguments) const {
  const HiddenFromDispatchModes hidden;
  torch::jit::Stack meta = FunctionalArguments(stack, first, num_arguments);
  for (c10::IValue& value : meta) {
    ForEachTensorIn(value, MetaLike);
  }
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    functional_->callBoxed(&meta);
  } catch (const std::exception&) {
    return OutDtypes::kUnknown;  // no meta kernel, or one needing the values (masked_select)
  }
  const std::vector<at::Tensor> results = TensorsIn(meta);
  const std::vector<at::Tensor> outs = OutsFrom(stack, first);
  if (results.size() != outs.size()) {
    return OutDtypes::kUnknown;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (results[i].scalar_type() != outs[i].scalar_type()) {
      return OutDtypes::kOther;
    }
  }
  return OutDtypes::kSame;
}

}  // namespace lazyfuse
