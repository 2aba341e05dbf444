// fusion/transposed_matmuls.h on hand-built Programs: which matmuls turn,
// and that a turned Program computes what the original did.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fusion/transposed_matmuls.h"
#include "program/executor.h"
#include "program/program.h"

namespace lazyfuse {
namespace {

StepFn TransposeFn() {
  return [](KernelArgs& args) -> std::vector<at::Tensor> { return {at::t(args.tensor())}; };
}

StepFn MatmulFn() {
  return [](KernelArgs& args) -> std::vector<at::Tensor> {
    const at::Tensor a = args.tensor();
    const at::Tensor b = args.tensor();
    return {at::mm(a, b)};
  };
}

StepFn DoubleFn() {
  return [](KernelArgs& args) -> std::vector<at::Tensor> { return {at::mul(args.tensor(), 2)}; };
}

// A weight's gradient as autograd records it on lazy tensors:
// grad_w = t(mm(t(x), g)), then read by a pointwise update. With
// `also_read_as_is`, a second reader uses the product untransposed.
Program WeightGradient(bool also_read_as_is) {
  ProgramBuilder b;
  const BufferId x = b.AddParameter(at::kFloat, {3, 4});
  const BufferId g = b.AddParameter(at::kFloat, {3, 5});
  const BufferId xt = b.AddBuffer(at::kFloat, {4, 3});
  const BufferId product = b.AddBuffer(at::kFloat, {4, 5});
  const BufferId grad = b.AddBuffer(at::kFloat, {5, 4});
  const BufferId update = b.AddBuffer(at::kFloat, {5, 4});
  b.AddStep(Step{"aten::t_copy", "", StepKind::kView, {x}, {}, {xt}, TransposeFn()});
  b.AddStep(Step{"aten::mm", "", StepKind::kOpaque, {xt, g}, {}, {product}, MatmulFn()});
  b.AddStep(Step{"aten::t_copy", "", StepKind::kView, {product}, {}, {grad}, TransposeFn()});
  b.AddStep(Step{"aten::mul", "", StepKind::kPointwise, {grad}, {}, {update}, DoubleFn()});
  b.AddResult(update);
  if (also_read_as_is) {
    const BufferId doubled = b.AddBuffer(at::kFloat, {4, 5});
    b.AddStep(Step{"aten::mul", "", StepKind::kPointwise, {product}, {}, {doubled}, DoubleFn()});
    b.AddResult(doubled);
  }
  return b.Finish();
}

TEST(TransposedMatmulsTest, AProductReadOnlyTransposedIsComputedTransposed) {
  const Program original = WeightGradient(false);
  Program turned = original;
  EXPECT_EQ(TransposeMatmulsReadTransposed(turned), 1);
  // mm(t(g), x): the transposes of a transpose fold, so x is read as it is.
  const Step* matmul = nullptr;
  for (const Step& step : turned.steps) {
    if (step.op == "aten::mm") {
      matmul = &step;
    }
  }
  ASSERT_NE(matmul, nullptr) << turned.ToString();
  EXPECT_EQ(turned.buffers[matmul->outputs[0]].sizes, (std::vector<int64_t>{5, 4}));
  EXPECT_EQ(matmul->inputs[1], turned.parameters[0]) << turned.ToString();
  // The update reads the product itself, not a transpose of it.
  EXPECT_EQ(turned.steps.back().inputs[0], matmul->outputs[0]) << turned.ToString();

  const std::vector<at::Tensor> inputs{at::randn({3, 4}), at::randn({3, 5})};
  const at::Tensor expected = RunProgram(original, inputs)[0];
  const at::Tensor got = RunProgram(turned, inputs)[0];
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_TRUE(at::allclose(got, expected)) << got << expected;
}

TEST(TransposedMatmulsTest, AProductAlsoReadAsItIsStays) {
  Program program = WeightGradient(true);
  const std::string before = program.ToString();
  EXPECT_EQ(TransposeMatmulsReadTransposed(program), 0);
  EXPECT_EQ(program.ToString(), before);
}

}  // namespace
}  // namespace lazyfuse
