#include "lazyfuse/lazyfuse_random.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <torch/csrc/lazy/core/ir_builder.h>
#include <torch/csrc/lazy/core/lazy_graph_executor.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/shape_inference.h>
#include <torch/csrc/lazy/core/tensor.h>

#include <mutex>

#include "lazyfuse/LazyNativeFunctions.h"
#include "lazyfuse/lazyfuse_closure_node.h"
#include "lazyfuse/lazyfuse_config.h"
#include "lazyfuse/lazyfuse_device_checks.h"
#include "lazyfuse/lazyfuse_lowering_context.h"

namespace lazyfuse {
namespace {

int64_t DrawSeed() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  // Non-negative, so it round-trips through a Long host scalar.
  return static_cast<int64_t>(at::check_generator<at::CPUGeneratorImpl>(gen)->random64() >> 1);
}

// A generator of the backing device's kind, seeded for one step.
at::Generator SeededGenerator(int64_t seed) {
  at::Generator gen = at::globalContext().defaultGenerator(BackingDevice()).clone();
  gen.set_current_seed(static_cast<uint64_t>(seed));
  return gen;
}

void CheckNoGenerator(const char* op, const std::optional<at::Generator>& generator) {
  TORCH_CHECK(!generator.has_value(),
              "lazyfuse: ",
              op,
              ": a torch.Generator is not supported on the lazy device; seed with "
              "torch.manual_seed");
}

template <typename... Tensors>
at::Tensor MakeRandom(const char* op,
                      std::vector<torch::lazy::Shape> shapes,
                      torch::lazy::hash_t attributes_hash,
                      DrawFn draw,
                      const Tensors&... inputs) {
  const auto device = torch::lazy::GetBackendDevice(inputs...);
  TORCH_INTERNAL_ASSERT(device);
  std::vector<torch::lazy::Value> operands{
      torch::lazy::GetLtcTensorOrCreateForWrappedNumber(inputs, *device)->GetIrValue()...};
  operands.push_back(torch::lazy::LazyGraphExecutor::Get()->GetIrValueForScalarFromCodegen(
      at::Scalar(DrawSeed()), *device));
  const size_t num_inputs = operands.size() - 1;
  auto node = torch::lazy::MakeNode<ClosureNode>(torch::lazy::OpKind(c10::Symbol::aten(op)),
                                                 operands,
                                                 std::move(shapes),
                                                 attributes_hash,
                                                 StepKind::kOpaque,
                                                 SeededStep(num_inputs, std::move(draw)));
  return torch::lazy::CreateAtenFromLtcTensor(
      torch::lazy::LazyTensor::Create(torch::lazy::Value(node, 0), *device));
}

std::vector<torch::lazy::Shape> SameShape(const at::Tensor& tensor) {
  return {torch::lazy::Shape(tensor.scalar_type(), tensor.sizes().vec())};
}

}  // namespace

StepFn SeededStep(size_t num_inputs, DrawFn draw) {
  return [draw = std::move(draw), num_inputs](KernelArgs& args) {
    std::vector<at::Tensor> inputs;
    inputs.reserve(num_inputs);
    for (size_t i = 0; i < num_inputs; ++i) {
      inputs.push_back(args.tensor());
    }
    return draw(inputs, SeededGenerator(args.scalar().toLong()));
  };
}

at::Tensor LazyNativeFunctions::uniform(const at::Tensor& self,
                                        double from,
                                        double to,
                                        std::optional<at::Generator> generator) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckNoGenerator("aten::uniform", generator);
  CheckOnLazyDevice("aten::uniform", "self", self);
  return MakeRandom(
      "uniform",
      SameShape(self),
      torch::lazy::MHash(from, to),
      [from, to](const std::vector<at::Tensor>& in, at::Generator gen) -> std::vector<at::Tensor> {
        return {at::_ops::uniform::call(in[0], from, to, gen)};
      },
      self);
}

at::Tensor LazyNativeFunctions::normal_functional(const at::Tensor& self,
                                                  double mean,
                                                  double std,
                                                  std::optional<at::Generator> generator) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckNoGenerator("aten::normal_functional", generator);
  CheckOnLazyDevice("aten::normal_functional", "self", self);
  return MakeRandom(
      "normal_functional",
      SameShape(self),
      torch::lazy::MHash(mean, std),
      [mean, std](const std::vector<at::Tensor>& in, at::Generator gen) -> std::vector<at::Tensor> {
        return {at::_ops::normal_functional::call(in[0], mean, std, gen)};
      },
      self);
}

at::Tensor LazyNativeFunctions::bernoulli(const at::Tensor& self,
                                          std::optional<at::Generator> generator) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckNoGenerator("aten::bernoulli", generator);
  CheckOnLazyDevice("aten::bernoulli", "self", self);
  return MakeRandom(
      "bernoulli",
      SameShape(self),
      torch::lazy::MHash(),
      [](const std::vector<at::Tensor>& in, at::Generator gen) -> std::vector<at::Tensor> {
        return {at::_ops::bernoulli::call(in[0], gen)};
      },
      self);
}

at::Tensor LazyNativeFunctions::bernoulli(const at::Tensor& self,
                                          double p,
                                          std::optional<at::Generator> generator) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckNoGenerator("aten::bernoulli.p", generator);
  CheckOnLazyDevice("aten::bernoulli.p", "self", self);
  return MakeRandom(
      "bernoulli",
      SameShape(self),
      torch::lazy::MHash(p),
      [p](const std::vector<at::Tensor>& in, at::Generator gen) -> std::vector<at::Tensor> {
        return {at::_ops::bernoulli_p::call(in[0], p, gen)};
      },
      self);
}

std::tuple<at::Tensor, at::Tensor> LazyNativeFunctions::native_dropout(const at::Tensor& input,
                                                                       double p,
                                                                       std::optional<bool> train) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  CheckOnLazyDevice("aten::native_dropout", "input", input);
  auto shapes = torch::lazy::compute_shape_native_dropout(input, p, train);
  at::Tensor out = MakeRandom(
      "native_dropout",
      std::move(shapes),
      torch::lazy::MHash(p, train),
      [p, train](const std::vector<at::Tensor>& in, at::Generator gen) -> std::vector<at::Tensor> {
        const at::Tensor& x = in[0];
        if (train.has_value() && !*train) {
          return {x.clone(), at::ones_like(x, x.options().dtype(at::kBool))};
        }
        // ATen's native_dropout, with an explicit generator.
        const double keep = 1.0 - p;
        const double scale = keep == 0 ? 0.0 : 1.0 / keep;
        at::Tensor mask = at::empty_like(x).bernoulli_(keep, gen);
        return {x.mul(mask).mul_(scale), mask.to(at::kBool)};
      },
      input);
  auto lazy_out = torch::lazy::TryGetLtcTensor(out);
  torch::lazy::Value node = lazy_out->GetIrValue();
  return std::make_tuple(out,
                         torch::lazy::CreateAtenFromLtcTensor(torch::lazy::LazyTensor::Create(
                             torch::lazy::Value(node.node, 1), lazy_out->GetDevice())));
}

}  // namespace lazyfuse
