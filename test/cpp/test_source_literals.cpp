// The literal scanner behind shape-generic kernels (kernels/source_literals):
// which numbers a template may take as parameters, which stay constants, and
// the template's text.

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/source_literals.h"

namespace lazyfuse {
namespace {

const char* kPrelude =
    "// lazyfuse test kernel: aten::add\n#define LF_N 4\nstatic float lf_table[8] = {1.5f};\n";

std::string Kernel(const std::string& body) {
  return std::string(kPrelude) + "extern \"C\" void lf_k(const float* in0, float* out0) {\n" +
         body + "}\n";
}

std::vector<std::string> Texts(const SourceShape& shape) {
  std::vector<std::string> out;
  for (const auto& literal : shape.literals) {
    out.push_back(literal.text);
  }
  return out;
}

TEST(SourceLiteralsTest, TakesNumbersNotIdentifiersCommentsOrThePrelude) {
  const SourceShape shape = ScanLiterals(
      Kernel("  const int n = 4096; // 77 in a comment\n  float a1 = x0 * 0.5f + 1e-05;\n"
             "  long long v16 = 3000000000;\n  unsigned int c = 2u + 7LL;\n"),
      "lf_k");
  EXPECT_EQ(Texts(shape),
            (std::vector<std::string>{"4096", "0.5f", "1e-05", "3000000000", "2u", "7LL"}));
  EXPECT_EQ(shape.literals[0].type, LiteralType::kInt);
  EXPECT_EQ(shape.literals[1].type, LiteralType::kFloat);
  EXPECT_EQ(shape.literals[2].type, LiteralType::kDouble);
  EXPECT_EQ(shape.literals[3].type, LiteralType::kLongLong);  // too big for an int
  EXPECT_EQ(shape.literals[4].type, LiteralType::kUnsigned);
  EXPECT_EQ(shape.literals[5].type, LiteralType::kLongLong);
  EXPECT_EQ(shape.skeleton.find("lf_table"), std::string::npos);  // the prelude is left out
  EXPECT_NE(shape.skeleton.find("// 77 in a comment"), std::string::npos);
}

TEST(SourceLiteralsTest, ArraySizesPragmasUnrolledLaneLoopsAndConstexprsStayConstants) {
  const std::string source = Kernel(
      "  constexpr int lf_width = 4;\n"
      "  __shared__ float lf_row[256];\n"
      "  union { lf_v16 v; float e[4]; } vo0;\n"
      "  x = lf_partials[row * 64 + 3];\n"
      "  #pragma unroll\n"
      "  for (int j = 0; j < 4; ++j) { y += 9; }\n"
      "  for (int c = 0; c < 300; ++c) {}\n"
      "  int hex = 0x7f;\n");
  const SourceShape shape = ScanLiterals(source, "lf_k");
  // The index is not a declaration: its numbers vary; the loop after the
  // pragma and the constexpr keep their lane counts, and hex numbers stay as
  // written.
  EXPECT_EQ(Texts(shape), (std::vector<std::string>{"64", "3", "0", "300"}));
  EXPECT_NE(shape.skeleton.find("lf_row[256]"), std::string::npos);
  EXPECT_NE(shape.skeleton.find("e[4]"), std::string::npos);
  EXPECT_NE(shape.skeleton.find("j < 4; ++j) { y += 9; }"), std::string::npos);
  EXPECT_NE(shape.skeleton.find("constexpr int lf_width = 4;"), std::string::npos);
}

TEST(SourceLiteralsTest, RendersAtTwoShapesShareASkeleton) {
  const SourceShape a = ScanLiterals(Kernel("  out0[i % 16] = in0[i / 16 * 4096];\n"), "lf_k");
  const SourceShape b = ScanLiterals(Kernel("  out0[i % 17] = in0[i / 17 * 4352];\n"), "lf_k");
  const SourceShape c = ScanLiterals(Kernel("  out0[i % 17] = in0[i / 17 * 4352LL];\n"), "lf_k");
  EXPECT_EQ(a.skeleton, b.skeleton);
  EXPECT_NE(a.skeleton, c.skeleton);  // another literal type is another kernel
}

TEST(SourceLiteralsTest, TemplatesTakeTheChosenLiteralsAsTrailingParameters) {
  const std::string source = Kernel("  const int n = 4096;\n  const float m = 0.25f * 2;\n");
  const SourceShape shape = ScanLiterals(source, "lf_k");
  std::vector<std::string> types;
  const std::string text = GenericSource(source, "lf_k", shape, {true, true, false}, &types);
  EXPECT_EQ(types, (std::vector<std::string>{"int", "float"}));
  EXPECT_NE(text.find("void lf_k(const float* in0, float* out0, int lf_g0, float lf_g1) {"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("const int n = lf_g0;"), std::string::npos);
  EXPECT_NE(text.find("const float m = lf_g1 * 2;"), std::string::npos);
  EXPECT_NE(text.find(kPrelude), std::string::npos);
}

TEST(SourceLiteralsTest, AMissingKernelIsAnError) {
  EXPECT_THROW(ScanLiterals(Kernel(""), "lf_other"), c10::Error);
}

}  // namespace
}  // namespace lazyfuse
