// The index algebra behind view chains in kernels (kernels/index_algebra):
// what cancels, and that every simplified quotient and remainder equals the
// plain arithmetic for every value its atoms take.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/index_algebra.h"

namespace lazyfuse {
namespace {

TEST(IndexAlgebraTest, AttentionsSplitOfATransposedProjectionCancels) {
  // l = 1024*x1 + 32*x0 + x2, x0 and x2 < 32: the linear index of a
  // transposed [L, B*H, head_dim] read back as [L, B, E] with E = 128.
  AffineIndex l = AffineIndex::Atom("x1", 32).Scaled(1024);
  l = l.Plus(AffineIndex::Atom("x0", 32).Scaled(32)).Plus(AffineIndex::Atom("x2", 32));
  EXPECT_EQ(FloorDiv(l, 1024).Text(), "x1");
  EXPECT_EQ(Mod(FloorDiv(l, 128), 8).Text(), "((x0) / 4)");
  EXPECT_EQ(Mod(l, 128).Text(), "((x0) % 4) * 32 + x2");
}

TEST(IndexAlgebraTest, WhatDoesNotCancelStaysTheOperation) {
  const AffineIndex i = AffineIndex::Atom("i", 1000);
  EXPECT_EQ(FloorDiv(i, 32).Text(), "((i) / 32)");
  EXPECT_EQ(Mod(FloorDiv(i, 32), 8).Text(), "((((i) / 32)) % 8)");
  EXPECT_EQ(FloorDiv(i, 1000).Text(), "0");
  EXPECT_EQ(Mod(i, 1000).Text(), "i");
}

// Random sums of three atoms through chains of divisions and remainders,
// checked against plain arithmetic over every value of the atoms.
TEST(IndexAlgebraTest, EveryResultEqualsPlainArithmetic) {
  std::mt19937 random(7);
  auto pick = [&](int low, int high) {
    return std::uniform_int_distribution<int>(low, high)(random);
  };
  const std::vector<std::string> names = {"a", "b", "c"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int64_t> bounds;
    AffineIndex index = AffineIndex::Constant(pick(0, 3) == 0 ? pick(0, 50) : 0);
    for (const auto& name : names) {
      bounds.push_back(pick(1, 9));
      const int64_t coefficient = pick(0, 2) == 0 ? pick(0, 12) : (int64_t{1} << pick(0, 7));
      index = index.Plus(AffineIndex::Atom(name, bounds.back()).Scaled(coefficient));
    }
    struct Op {
      bool divide;
      int64_t by;
    };
    std::vector<Op> ops;
    for (int k = pick(1, 3); k > 0; --k) {
      ops.push_back({pick(0, 1) == 0, pick(0, 1) == 0 ? pick(1, 24) : (int64_t{1} << pick(0, 6))});
    }
    AffineIndex result = index;
    for (const Op& op : ops) {
      result = op.divide ? FloorDiv(result, op.by) : Mod(result, op.by);
    }
    for (int64_t a = 0; a < bounds[0]; ++a) {
      for (int64_t b = 0; b < bounds[1]; ++b) {
        for (int64_t c = 0; c < bounds[2]; ++c) {
          auto value_of = [&](const std::string& name) {
            return name == "a" ? a : name == "b" ? b : c;
          };
          int64_t expected = index.Evaluate(value_of);
          for (const Op& op : ops) {
            expected = op.divide ? expected / op.by : expected % op.by;
          }
          ASSERT_EQ(result.Evaluate(value_of), expected)
              << "trial " << trial << ": " << index.Text() << " -> " << result.Text();
          ASSERT_LE(result.Evaluate(value_of), result.Max()) << result.Text();
        }
      }
    }
  }
}

}  // namespace
}  // namespace lazyfuse
