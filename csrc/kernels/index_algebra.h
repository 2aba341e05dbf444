#pragma once

// Index arithmetic as sums of terms whose ranges are known, so the
// divisions and remainders a chain of views writes can cancel: reading
// rows of a transposed projection through reshape, transpose and reshape
// again (attention's q, k and v) otherwise divides each element's index a
// dozen times. A small form of tinygrad's symbolic simplification: only
// sums of non-negative multiples, floor division and remainder.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lazyfuse {

// A variable of index arithmetic: a loop index, or a quotient or remainder
// left as it is. It takes the values [0, bound).
class AffineIndex;
struct IndexAtom {
  std::string text;  // a name, or a parenthesized expression
  int64_t bound = 1;
  // A quotient or remainder: `of` divided by, or modulo, `by`.
  std::shared_ptr<const AffineIndex> of;
  char op = 0;  // '/' or '%'
  int64_t by = 1;
};

// sum of coefficient * atom, plus a constant; every coefficient and the
// constant are non-negative, so the value lies in [0, Max()].
class AffineIndex {
 public:
  static AffineIndex Atom(std::string text, int64_t bound);
  static AffineIndex Constant(int64_t value);

  const std::vector<std::pair<int64_t, IndexAtom>>& terms() const {
    return terms_;
  }
  int64_t constant() const {
    return constant_;
  }
  // The largest value it takes (saturating at INT64_MAX).
  int64_t Max() const;
  // The expression: atoms in the order they were added, then the constant.
  std::string Text() const;
  // A lone atom with coefficient 1 and no constant.
  bool IsAtom() const;
  // Its value, given each named atom's (for tests).
  int64_t Evaluate(const std::function<int64_t(const std::string&)>& value_of) const;

  void Add(int64_t coefficient, const IndexAtom& atom);
  void AddConstant(int64_t value);
  AffineIndex Scaled(int64_t by) const;
  AffineIndex Plus(const AffineIndex& other) const;

 private:
  std::vector<std::pair<int64_t, IndexAtom>> terms_;
  int64_t constant_ = 0;
};

// floor(index / divisor) and index % modulus, exactly, with what cancels
// cancelled; what does not becomes an atom holding the operation's text.
AffineIndex FloorDiv(const AffineIndex& index, int64_t divisor);
AffineIndex Mod(const AffineIndex& index, int64_t modulus);

}  // namespace lazyfuse
