// lazyfuse.autocast: CUDA's autocast policy on lazy tensors (autocast.h).

#include "ops/autocast.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace lazyfuse {
namespace {

// Autocast keys exist per backend and none is the lazy backend's. IPU's key
// is borrowed: torch registers nothing on it, and IPU's out-of-tree backend
// is no longer maintained, so nothing else in the process claims it.
constexpr c10::DispatchKey kAutocastKey = c10::DispatchKey::AutocastIPU;

// CUDA's policies (ATen's autocast_mode.h):
enum class Policy {
  kLowerPrecision,   // compute in the region's dtype (matmuls, convolutions)
  kFloat32,          // compute in float32 (losses, norms, exp/log, ...)
  kFloat32OptDtype,  // pass dtype=float32 unless the call gave one (softmax, sum)
  kPromote,          // cast to the widest floating input (addcmul, index_put)
  kBanned,           // refuse: binary_cross_entropy
};

thread_local AutocastState t_state;

bool Eligible(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_lazy() && tensor.is_floating_point() &&
         tensor.scalar_type() != at::kDouble;
}

std::unordered_map<c10::OperatorName, Policy>& Policies() {
  static auto* policies = new std::unordered_map<c10::OperatorName, Policy>();
  return *policies;
}

// Those of Policies() that this torch release has, spelled "aten::op.overload".
std::vector<std::pair<std::string, Policy>>& Registered() {
  static auto* registered = new std::vector<std::pair<std::string, Policy>>();
  return *registered;
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kLowerPrecision:
      return "lower_precision";
    case Policy::kFloat32:
      return "float32";
    case Policy::kFloat32OptDtype:
      return "float32_opt_dtype";
    case Policy::kPromote:
      return "promote";
    case Policy::kBanned:
      return "banned";
  }
  return "unknown";
}

// ATen's lists spell entries "name" or "name, overload".
c10::OperatorName ParseEntry(const std::string& entry) {
  const auto comma = entry.find(',');
  if (comma == std::string::npos) {
    return {"aten::" + entry, ""};
  }
  auto overload = entry.substr(comma + 1);
  overload.erase(0, overload.find_first_not_of(' '));
  return {"aten::" + entry.substr(0, comma), overload};
}

template <typename Fn>
void ForEachTensor(torch::jit::Stack& stack, size_t first, Fn&& fn) {
  for (size_t i = first; i < stack.size(); ++i) {
    c10::IValue& value = stack[i];
    if (value.isTensor()) {
      fn(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList()) {
        fn(tensor);
      }
    } else if (value.isList()) {  // Tensor?[] (index_put's indices)
      for (const c10::IValue& item : value.toListRef()) {
        if (item.isTensor()) {
          fn(item.toTensor());
        }
      }
    }
  }
}

at::Tensor CastIfEligible(const at::Tensor& tensor, at::ScalarType dtype) {
  return Eligible(tensor) && tensor.scalar_type() != dtype ? tensor.to(dtype) : tensor;
}

void CastAll(torch::jit::Stack& stack, size_t first, at::ScalarType dtype) {
  for (size_t i = first; i < stack.size(); ++i) {
    c10::IValue& value = stack[i];
    if (value.isTensor()) {
      value = CastIfEligible(value.toTensor(), dtype);
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> cast;
      for (const at::Tensor& tensor : value.toTensorList()) {
        cast.push_back(CastIfEligible(tensor, dtype));
      }
      value = c10::IValue(cast);
    } else if (value.isList() &&
               value.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
      c10::List<std::optional<at::Tensor>> cast;
      for (const c10::IValue& item : value.toListRef()) {
        cast.push_back(item.isTensor()
                           ? std::optional<at::Tensor>(CastIfEligible(item.toTensor(), dtype))
                           : std::nullopt);
      }
      value = c10::IValue(cast);
    }
  }
}

void AutocastKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard outside_autocast(kAutocastKey);
  const auto policy = Policies().find(op.operator_name());
  const AutocastState state = t_state;
  if (!state.enabled || policy == Policies().end()) {
    op.callBoxed(stack);
    return;
  }
  const size_t num_args = op.schema().arguments().size();
  const size_t first = stack->size() - num_args;
  switch (policy->second) {
    case Policy::kLowerPrecision:
      CastAll(*stack, first, state.dtype);
      break;
    case Policy::kFloat32:
      CastAll(*stack, first, at::kFloat);
      break;
    case Policy::kFloat32OptDtype: {
      const c10::IValue& self = (*stack)[first];
      if (self.isTensor() && Eligible(self.toTensor())) {
        const auto& arguments = op.schema().arguments();
        for (size_t i = 0; i < num_args; ++i) {
          const bool is_dtype = arguments[i].name() == "dtype";
          if (is_dtype && (*stack)[first + i].isNone()) {
            (*stack)[first + i] = c10::IValue(static_cast<int64_t>(at::kFloat));
          }
        }
      }
      break;
    }
    case Policy::kPromote: {
      std::optional<at::ScalarType> widest;
      ForEachTensor(*stack, first, [&](const at::Tensor& tensor) {
        if (Eligible(tensor)) {
          widest = widest ? at::promoteTypes(*widest, tensor.scalar_type()) : tensor.scalar_type();
        }
      });
      if (widest) {
        CastAll(*stack, first, *widest);
      }
      break;
    }
    case Policy::kBanned: {
      bool any_lazy = false;
      ForEachTensor(*stack, first, [&](const at::Tensor& tensor) { any_lazy |= Eligible(tensor); });
      TORCH_CHECK(!any_lazy,
                  op.operator_name().name,
                  ": unsafe to autocast, as under CUDA's autocast. binary_cross_entropy "
                  "and BCELoss take probabilities that a lower-precision sigmoid may round to "
                  "0 or 1; combine the sigmoid and the loss with "
                  "binary_cross_entropy_with_logits or BCEWithLogitsLoss, which are safe.");
      break;
    }
  }
  op.callBoxed(stack);
}

#define LAZYFUSE_AUTOCAST_ENTRY(...) #__VA_ARGS__,

void AddPolicy(const std::vector<const char*>& entries, Policy policy) {
  for (const char* entry : entries) {
    Policies().emplace(ParseEntry(entry), policy);
  }
}

}  // namespace

AutocastState SetAutocast(AutocastState state) {
  const AutocastState previous = t_state;
  TORCH_CHECK(
      !state.enabled || state.dtype == at::kBFloat16 || state.dtype == at::kHalf ||
          state.dtype == at::kFloat,
      "lazyfuse.autocast: dtype must be torch.bfloat16, torch.float16 or torch.float32, got ",
      state.dtype);
  t_state = state;
  c10::impl::tls_set_dispatch_key_included(kAutocastKey, state.enabled);
  c10::impl::tls_set_dispatch_key_excluded(kAutocastKey, !state.enabled);
  return previous;
}

AutocastState CurrentAutocast() {
  return t_state;
}

void RegisterAutocast() {
  AddPolicy({AT_FORALL_LOWER_PRECISION_FP(LAZYFUSE_AUTOCAST_ENTRY)}, Policy::kLowerPrecision);
  AddPolicy({AT_FORALL_FP32(LAZYFUSE_AUTOCAST_ENTRY)}, Policy::kFloat32);
  AddPolicy({AT_FORALL_FP32_SET_OPT_DTYPE(LAZYFUSE_AUTOCAST_ENTRY)}, Policy::kFloat32OptDtype);
  AddPolicy({AT_FORALL_PROMOTE(LAZYFUSE_AUTOCAST_ENTRY)}, Policy::kPromote);
  // CUDA appends dtype=float32 to these; computing them from float32 inputs
  // gives the same dtype and values.
  AddPolicy({"norm, Scalar", "norm, ScalarOpt_dim"}, Policy::kFloat32);
  AddPolicy({"binary_cross_entropy"}, Policy::kBanned);

  // Leaked on purpose: registrations must outlive every dispatcher call.
  static auto* fallthrough =
      new torch::Library(torch::Library::IMPL, "_", kAutocastKey, __FILE__, __LINE__);
  fallthrough->fallback(torch::CppFunction::makeFallthrough());
  static auto* kernels =
      new torch::Library(torch::Library::IMPL, "aten", kAutocastKey, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& [name, policy] : Policies()) {
    // Ops a given torch release lacks are left out.
    if (dispatcher.findOp(name).has_value()) {
      const std::string bare = name.name.substr(name.name.find("::") + 2);
      const std::string full = name.overload_name.empty() ? bare : bare + "." + name.overload_name;
      kernels->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&AutocastKernel>());
      Registered().emplace_back("aten::" + full, policy);
    }
  }
}

std::vector<std::pair<std::string, std::string>> AutocastPolicyEntries() {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& [name, policy] : Registered()) {
    entries.emplace_back(name, PolicyName(policy));
  }
  return entries;
}

}  // namespace lazyfuse
