#include "ops/random.h"

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

#include "generated/LazyNativeFunctions.h"
#include "ltc/config.h"
#include "ltc/device_data.h"
#include "ltc/step_replay.h"
#include "ops/closure_node.h"
#include "ops/device_checks.h"
#include "program/lowering_context.h"

namespace lazyfuse {
namespace {

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

// A seeded node over one tensor operand. Checks the arguments first: the
// input must be lazy, and a private generator cannot drive a deferred graph.
torch::lazy::Value MakeRandom(const char* op,
                              const at::Tensor& input,
                              const std::optional<at::Generator>& generator,
                              std::vector<torch::lazy::Shape> shapes,
                              torch::lazy::hash_t attributes_hash,
                              DrawFn draw) {
  const std::string qualified = std::string("aten::") + op;
  CheckNoGenerator(qualified.c_str(), generator);
  CheckOnLazyDevice(qualified.c_str(), "self", input);
  const auto device = torch::lazy::GetBackendDevice(input);
  TORCH_INTERNAL_ASSERT(device);
  std::vector<torch::lazy::Value> operands{
      torch::lazy::TryGetLtcTensor(input)->GetIrValue(),
      torch::lazy::LazyGraphExecutor::Get()->GetIrValueForScalarFromCodegen(at::Scalar(DrawSeed()),
                                                                            *device)};
  if (const DeviceData* seed = DeviceData::Cast(operands.back().node.get()); seed && Capturing()) {
    NoteSeed(seed->data());  // a replay draws a fresh one in its place
  }
  auto node = torch::lazy::MakeNode<ClosureNode>(torch::lazy::OpKind(c10::Symbol::aten(op)),
                                                 operands,
                                                 std::move(shapes),
                                                 attributes_hash,
                                                 StepKind::kOpaque,
                                                 SeededStep(std::move(draw)));
  return torch::lazy::Value(node, 0);
}

at::Tensor LazyOutput(const torch::lazy::Value& value, const at::Tensor& like, size_t index = 0) {
  return torch::lazy::CreateAtenFromLtcTensor(torch::lazy::LazyTensor::Create(
      torch::lazy::Value(value.node, index), torch::lazy::TryGetLtcTensor(like)->GetDevice()));
}

std::vector<torch::lazy::Shape> SameShape(const at::Tensor& tensor) {
  return {torch::lazy::Shape(tensor.scalar_type(), tensor.sizes().vec())};
}

}  // namespace

StepFn SeededStep(DrawFn draw) {
  return [draw = std::move(draw)](KernelArgs& args) {
    const at::Tensor& input = args.tensor();
    return draw(input, SeededGenerator(args.scalar().toLong()));
  };
}

at::Tensor LazyNativeFunctions::uniform(const at::Tensor& self,
                                        double from,
                                        double to,
                                        std::optional<at::Generator> generator) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto draw = [from, to](const at::Tensor& x, at::Generator gen) -> std::vector<at::Tensor> {
    return {at::_ops::uniform::call(x, from, to, gen)};
  };
  return LazyOutput(
      MakeRandom("uniform", self, generator, SameShape(self), torch::lazy::MHash(from, to), draw),
      self);
}

at::Tensor LazyNativeFunctions::normal_functional(const at::Tensor& self,
                                                  double mean,
                                                  double std,
                                                  std::optional<at::Generator> generator) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto draw = [mean, std](const at::Tensor& x, at::Generator gen) -> std::vector<at::Tensor> {
    return {at::_ops::normal_functional::call(x, mean, std, gen)};
  };
  return LazyOutput(MakeRandom("normal_functional",
                               self,
                               generator,
                               SameShape(self),
                               torch::lazy::MHash(mean, std),
                               draw),
                    self);
}

at::Tensor LazyNativeFunctions::bernoulli(const at::Tensor& self,
                                          std::optional<at::Generator> generator) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto draw = [](const at::Tensor& x, at::Generator gen) -> std::vector<at::Tensor> {
    return {at::_ops::bernoulli::call(x, gen)};
  };
  return LazyOutput(
      MakeRandom("bernoulli", self, generator, SameShape(self), torch::lazy::MHash(), draw), self);
}

at::Tensor LazyNativeFunctions::bernoulli(const at::Tensor& self,
                                          double p,
                                          std::optional<at::Generator> generator) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto draw = [p](const at::Tensor& x, at::Generator gen) -> std::vector<at::Tensor> {
    return {at::_ops::bernoulli_p::call(x, p, gen)};
  };
  return LazyOutput(
      MakeRandom("bernoulli", self, generator, SameShape(self), torch::lazy::MHash(p), draw), self);
}

std::tuple<at::Tensor, at::Tensor> LazyNativeFunctions::native_dropout(const at::Tensor& input,
                                                                       double p,
                                                                       std::optional<bool> train) {
  TORCH_LAZY_FN_COUNTER("lazy::");
  auto draw = [p, train](const at::Tensor& x, at::Generator gen) -> std::vector<at::Tensor> {
    if (train.has_value() && !*train) {
      return {x.clone(), at::ones_like(x, x.options().dtype(at::kBool))};
    }
    // ATen's native_dropout, with an explicit generator.
    const double keep = 1.0 - p;
    const double scale = keep == 0 ? 0.0 : 1.0 / keep;
    at::Tensor mask = at::empty_like(x).bernoulli_(keep, gen);
    return {x.mul(mask).mul_(scale), mask.to(at::kBool)};
  };
  torch::lazy::Value node = MakeRandom("native_dropout",
                                       input,
                                       std::nullopt,
                                       torch::lazy::compute_shape_native_dropout(input, p, train),
                                       torch::lazy::MHash(p, train),
                                       draw);
  return std::make_tuple(LazyOutput(node, input, 0), LazyOutput(node, input, 1));
}

}  // namespace lazyfuse
