// Program building, buffer lifetimes, execution, node hashing and the
// hand-written shape functions, tested without the Python layer.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "ltc/node.h"
#include "ops/shape_inference.h"
#include "program/executor.h"
#include "program/program.h"

namespace lazyfuse {
namespace {

StepFn AddFn() {
  return [](KernelArgs& args) -> std::vector<at::Tensor> {
    const at::Tensor& a = args.tensor();
    const at::Tensor& b = args.tensor();
    return {at::add(a, b)};
  };
}

// y = (p0 + p1) * (p0 + p1) + c, with c = 1 as a host constant.
Program BuildSquarePlusOne() {
  ProgramBuilder b;
  BufferId p0 = b.AddParameter(at::kFloat, {4});
  BufferId p1 = b.AddParameter(at::kFloat, {4});
  BufferId c = b.AddConstant(at::scalar_tensor(1.0));
  BufferId sum = b.AddBuffer(at::kFloat, {4});
  BufferId sq = b.AddBuffer(at::kFloat, {4});
  BufferId out = b.AddBuffer(at::kFloat, {4});
  b.AddStep(Step{"aten::add", "", StepKind::kPointwise, {p0, p1}, {}, {sum}, AddFn()});
  b.AddStep(Step{"aten::mul",
                 "",
                 StepKind::kPointwise,
                 {sum, sum},
                 {},
                 {sq},
                 [](KernelArgs& args) -> std::vector<at::Tensor> {
                   const at::Tensor& x = args.tensor();
                   const at::Tensor& y = args.tensor();
                   return {at::mul(x, y)};
                 }});
  b.AddStep(Step{"aten::add", "", StepKind::kPointwise, {sq, c}, {}, {out}, AddFn()});
  b.AddResult(out);
  return b.Finish();
}

TEST(ProgramTest, BuildsStepsOverNumberedBuffers) {
  Program p = BuildSquarePlusOne();
  EXPECT_EQ(p.buffers.size(), 6u);
  EXPECT_EQ(p.parameters.size(), 2u);
  EXPECT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.results, std::vector<BufferId>{5});
  EXPECT_EQ(p.steps[1].kind, StepKind::kPointwise);
  const std::string text = p.ToString();
  EXPECT_NE(text.find("aten::mul"), std::string::npos) << text;
  EXPECT_NE(text.find("%5:Float[4]"), std::string::npos) << text;
}

TEST(ProgramTest, ReleasesEachBufferAfterItsLastReader) {
  Program p = BuildSquarePlusOne();
  ASSERT_EQ(p.release_after.size(), 3u);
  // Parameters die after the first add, the sum after the mul, the square
  // and the constant after the last add; the result is never released.
  EXPECT_EQ(p.release_after[0], (std::vector<BufferId>{0, 1}));
  EXPECT_EQ(p.release_after[1], (std::vector<BufferId>{3}));
  EXPECT_EQ(p.release_after[2], (std::vector<BufferId>{2, 4}));
}

TEST(ProgramTest, UnusedOutputIsReleasedRightAway) {
  ProgramBuilder b;
  BufferId p0 = b.AddParameter(at::kFloat, {2, 3});
  BufferId values = b.AddBuffer(at::kFloat, {2});
  BufferId indices = b.AddBuffer(at::kLong, {2});
  b.AddStep(Step{"aten::max",
                 "",
                 StepKind::kReduction,
                 {p0},
                 {},
                 {values, indices},
                 [](KernelArgs& args) -> std::vector<at::Tensor> {
                   return AsTensorList(at::max(args.tensor(), 1));
                 }});
  b.AddResult(values);
  Program p = b.Finish();
  EXPECT_EQ(p.release_after[0], (std::vector<BufferId>{0, 2}));
  auto out = RunProgram(p, {at::tensor({1.f, 5.f, 2.f, 7.f, 0.f, 3.f}).view({2, 3})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(at::equal(out[0], at::tensor({5.f, 7.f})));
}

TEST(ProgramTest, ExecutesOnTheBackingDevice) {
  Program p = BuildSquarePlusOne();
  at::Tensor a = at::arange(4, at::kFloat);
  at::Tensor b = at::ones({4});
  auto out = RunProgram(p, {a, b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(at::allclose(out[0], (a + b) * (a + b) + 1));
}

// p0 and p1 read once each, by steps 0 and 1; step 2 notes what the run
// has let go of by the time it runs.
TEST(ProgramTest, LetsGoOfADonatedParameterAfterItsLastReader) {
  std::vector<size_t> let_go;
  size_t let_go_before_last_step = 0;
  ProgramBuilder b;
  BufferId p0 = b.AddParameter(at::kFloat, {4});
  BufferId p1 = b.AddParameter(at::kFloat, {4});
  BufferId negated = b.AddBuffer(at::kFloat, {4});
  BufferId doubled = b.AddBuffer(at::kFloat, {4});
  BufferId out = b.AddBuffer(at::kFloat, {4});
  b.AddStep(
      Step{"aten::neg",
           "",
           StepKind::kPointwise,
           {p0},
           {},
           {negated},
           [](KernelArgs& args) -> std::vector<at::Tensor> { return {at::neg(args.tensor())}; }});
  // Writes over its input and returns it: that memory is the result's, not let go.
  b.AddStep(Step{"aten::mul_",
                 "",
                 StepKind::kPointwise,
                 {p1},
                 {},
                 {doubled},
                 [](KernelArgs& args) -> std::vector<at::Tensor> {
                   at::Tensor x = args.tensor();
                   return {x.mul_(2)};
                 }});
  b.AddStep(Step{"aten::add",
                 "",
                 StepKind::kPointwise,
                 {negated, doubled},
                 {},
                 {out},
                 [&](KernelArgs& args) -> std::vector<at::Tensor> {
                   let_go_before_last_step = let_go.size();
                   const at::Tensor& a = args.tensor();
                   return {at::add(a, args.tensor())};
                 }});
  b.AddResult(out);
  auto program = std::make_shared<const Program>(b.Finish());
  const at::Tensor a = at::arange(4, at::kFloat);
  const at::Tensor expected = -a + a * 2;
  for (const bool donate : {true, false}) {
    let_go.clear();
    ProgramRun run = StartProgram(program, {a.clone(), a.clone()}, {donate, donate});
    run.let_go_of_parameter = [&](size_t k) { let_go.push_back(k); };
    std::vector<at::Tensor> results = ContinueProgram(run);
    EXPECT_TRUE(at::equal(results.at(0), expected));
    EXPECT_EQ(let_go, donate ? std::vector<size_t>{0} : std::vector<size_t>{});
    EXPECT_EQ(let_go_before_last_step, let_go.size());
    // Once an input is let go of, a later failure cannot start the run over.
    EXPECT_EQ(run.overwrote_parameter, donate);
  }
}

TEST(ProgramTest, RejectsWrongParameterCount) {
  Program p = BuildSquarePlusOne();
  EXPECT_THROW(RunProgram(p, {at::ones({4})}), c10::Error);
}

// A kernel whose result disagrees with its node's shape function (a meta
// kernel that gives a 1-d loss one dimension) is a lazyfuse bug, named at the
// step, not a wrong shape handed to the user.
TEST(ProgramTest, RejectsAStepResultOfAnotherShapeOrDtype) {
  for (const at::Tensor& returned : {at::zeros({}), at::zeros({1}, at::kDouble)}) {
    ProgramBuilder b;
    BufferId p0 = b.AddParameter(at::kFloat, {4});
    BufferId loss = b.AddBuffer(at::kFloat, {1});
    b.AddStep(Step{"aten::multilabel_margin_loss_forward",
                   "",
                   StepKind::kOpaque,
                   {p0},
                   {},
                   {loss},
                   [returned](KernelArgs& args) -> std::vector<at::Tensor> {
                     args.tensor();
                     return {returned};
                   }});
    b.AddResult(loss);
    Program p = b.Finish();
    try {
      RunProgram(p, {at::ones({4})});
      ADD_FAILURE() << "a result of shape " << returned.sizes() << " was accepted";
    } catch (const c10::Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("aten::multilabel_margin_loss_forward (step 0 of the graph)"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("where its shape function gave [1] and Float"), std::string::npos)
          << message;
    }
  }
}

TEST(ProgramTest, RejectsStepReadingUnknownBuffer) {
  ProgramBuilder b;
  EXPECT_THROW(b.AddStep(Step{"aten::neg", "", StepKind::kPointwise, {7}, {}, {}, AddFn()}),
               c10::Error);
}

TEST(ProgramTest, TensorListOperandsAreGrouped) {
  ProgramBuilder b;
  BufferId p0 = b.AddParameter(at::kFloat, {2});
  BufferId p1 = b.AddParameter(at::kFloat, {3});
  BufferId out = b.AddBuffer(at::kFloat, {5});
  b.AddStep(Step{
      "aten::cat",
      "",
      StepKind::kOpaque,
      {p0, p1},
      {2},
      {out},
      [](KernelArgs& args) -> std::vector<at::Tensor> { return {at::cat(args.tensor_list())}; }});
  b.AddResult(out);
  auto result = RunProgram(b.Finish(), {at::zeros({2}), at::ones({3})});
  EXPECT_TRUE(at::equal(result[0], at::tensor({0.f, 0.f, 1.f, 1.f, 1.f})));
}

TEST(NodeHashTest, HashCoversOpShapeAndOperands) {
  using torch::lazy::Shape;
  auto leaf = [](std::vector<int64_t> sizes) {
    return std::make_shared<LazyFuseNode>(torch::lazy::OpKind(c10::Symbol::prim("leaf")),
                                          torch::lazy::OpList{},
                                          Shape(at::kFloat, std::move(sizes)),
                                          1,
                                          torch::lazy::hash_t(7));
  };
  auto a = leaf({4});
  auto b = leaf({4});
  auto c = leaf({5});
  EXPECT_EQ(a->hash(), b->hash());
  EXPECT_NE(a->hash(), c->hash());

  auto neg = [](const torch::lazy::NodePtr& input, torch::lazy::hash_t seed) {
    std::vector<Shape> shapes{input->shape()};
    torch::lazy::Value value(input, 0);
    return std::make_shared<LazyFuseNode>(torch::lazy::OpKind(c10::Symbol::aten("neg")),
                                          torch::lazy::OpList{value},
                                          std::move(shapes),
                                          1,
                                          seed);
  };
  EXPECT_EQ(neg(a, 1)->hash(), neg(b, 1)->hash());
  EXPECT_NE(neg(a, 1)->hash(), neg(c, 1)->hash());
  EXPECT_NE(neg(a, 1)->hash(), neg(a, 2)->hash());
}

TEST(NodeHashTest, CountsCreatedNodes) {
  const int64_t before = LazyFuseNode::CreatedCount();
  LazyFuseNode node(torch::lazy::OpKind(c10::Symbol::prim("leaf")),
                    torch::lazy::OpList{},
                    torch::lazy::Shape(at::kFloat, {1}),
                    1,
                    torch::lazy::hash_t(0));
  EXPECT_EQ(LazyFuseNode::CreatedCount(), before + 1);
}

TEST(ShapeInferenceTest, WhereBroadcastsAndPromotes) {
  auto shapes = torch::lazy::compute_shape_where(
      at::empty({3, 1}, at::kBool), at::empty({1, 4}, at::kFloat), at::empty({4}, at::kDouble));
  ASSERT_EQ(shapes.size(), 1u);
  EXPECT_EQ(shapes[0].sizes().vec(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(shapes[0].scalar_type(), at::kDouble);
  EXPECT_THROW(
      torch::lazy::compute_shape_where(at::empty({3}, at::kFloat), at::empty({3}), at::empty({3})),
      c10::Error);
}

// A host scalar beside CUDA tensors made index_select and bucketize fail on
// a GPU; the meta device stands in for it here, since any device but the CPU
// shows whether tensor arguments reach the step on the step's device.
TEST(KernelArgsTest, TensorArgumentsComeOnTheStepsDevice) {
  const std::vector<at::Tensor> slots = {at::scalar_tensor(2.0), at::ones({3})};
  const std::vector<BufferId> inputs = {0, 1, 0, 0, 0};
  const std::vector<uint32_t> arity = {1, 2, 1, 1};
  KernelArgs args(slots, inputs, arity, "aten::test", c10::Device(c10::kMeta));
  EXPECT_TRUE(args.tensor().is_meta());
  const std::vector<at::Tensor> list = args.tensor_list();
  EXPECT_TRUE(list[0].is_meta() && list[1].is_meta());
  EXPECT_TRUE(args.host_tensor().is_cpu());  // fused kernels read it by value
  EXPECT_EQ(args.scalar().toDouble(), 2.0);  // scalars never leave the host

  KernelArgs on_cpu(slots, inputs, arity, "aten::test");
  EXPECT_TRUE(on_cpu.tensor().is_same(slots[0]));
}

TEST(ShapeInferenceTest, FillAndMseLossBackwardKeepInputShape) {
  auto fill = torch::lazy::compute_shape_fill(at::empty({5}, at::kInt), 3);
  EXPECT_EQ(fill[0].scalar_type(), at::kInt);
  auto grad = torch::lazy::compute_shape_mse_loss_backward(
      at::empty({}), at::empty({2, 2}), at::empty({2, 2}), 1);
  EXPECT_EQ(grad[0].sizes().vec(), (std::vector<int64_t>{2, 2}));
}

}  // namespace
}  // namespace lazyfuse
