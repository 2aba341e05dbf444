#include "kernels/index_algebra.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

namespace lazyfuse {
namespace {

constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

int64_t SaturatingMulAdd(int64_t sum, int64_t a, int64_t b) {
  if (a != 0 && b > (kSaturated - sum) / a) {
    return kSaturated;
  }
  return sum + a * b;
}

// `index` as factor * quotient + small, small < factor; the quotient's and
// the small part's terms are the index's, split by whether factor divides
// their coefficient.
struct FactorSplit {
  AffineIndex quotient;
  AffineIndex small;
};

std::optional<FactorSplit> SplitByFactor(const AffineIndex& index, int64_t factor) {
  FactorSplit split;
  for (const auto& [coefficient, atom] : index.terms()) {
    if (coefficient % factor == 0) {
      split.quotient.Add(coefficient / factor, atom);
    } else {
      split.small.Add(coefficient, atom);
    }
  }
  split.quotient.AddConstant(index.constant() / factor);
  split.small.AddConstant(index.constant() % factor);
  if (split.small.Max() >= factor) {
    return std::nullopt;
  }
  return split;
}

// The factors of `of` that some coefficient of `index` shares with it,
// largest first: the candidates for SplitByFactor.
std::vector<int64_t> SharedFactors(const AffineIndex& index, int64_t of) {
  std::vector<int64_t> factors;
  for (const auto& term : index.terms()) {
    const int64_t g = std::gcd(term.first, of);
    if (g > 1 && g < of && std::find(factors.begin(), factors.end(), g) == factors.end()) {
      factors.push_back(g);
    }
  }
  std::sort(factors.rbegin(), factors.rend());
  return factors;
}

AffineIndex Opaque(const AffineIndex& index, char op, int64_t by, int64_t bound) {
  IndexAtom atom;
  atom.text = "((" + index.Text() + ") " + op + " " + std::to_string(by) + ")";
  atom.bound = bound;
  atom.of = std::make_shared<const AffineIndex>(index);
  atom.op = op;
  atom.by = by;
  AffineIndex out;
  out.Add(1, atom);
  return out;
}

}  // namespace

AffineIndex AffineIndex::Atom(std::string text, int64_t bound) {
  AffineIndex index;
  index.Add(1, IndexAtom{std::move(text), std::max<int64_t>(bound, 1)});
  return index;
}

AffineIndex AffineIndex::Constant(int64_t value) {
  AffineIndex index;
  index.AddConstant(value);
  return index;
}

int64_t AffineIndex::Max() const {
  int64_t sum = constant_;
  for (const auto& [coefficient, atom] : terms_) {
    sum = SaturatingMulAdd(sum, coefficient, atom.bound - 1);
  }
  return sum;
}

std::string AffineIndex::Text() const {
  std::string text;
  for (const auto& [coefficient, atom] : terms_) {
    text += (text.empty() ? "" : " + ") + atom.text;
    if (coefficient != 1) {
      text += " * " + std::to_string(coefficient);
    }
  }
  if (constant_ != 0 || text.empty()) {
    text += (text.empty() ? "" : " + ") + std::to_string(constant_);
  }
  return text;
}

bool AffineIndex::IsAtom() const {
  return constant_ == 0 && terms_.size() == 1 && terms_.front().first == 1;
}

int64_t AffineIndex::Evaluate(const std::function<int64_t(const std::string&)>& value_of) const {
  int64_t sum = constant_;
  for (const auto& [coefficient, atom] : terms_) {
    int64_t value = 0;
    if (atom.of == nullptr) {
      value = value_of(atom.text);
    } else {
      const int64_t of = atom.of->Evaluate(value_of);
      value = atom.op == '/' ? of / atom.by : of % atom.by;
    }
    sum += coefficient * value;
  }
  return sum;
}

void AffineIndex::Add(int64_t coefficient, const IndexAtom& atom) {
  TORCH_CHECK(coefficient >= 0, "lazyfuse: index algebra: a negative coefficient");
  if (coefficient == 0 || atom.bound <= 1) {
    return;  // an atom of one value is 0
  }
  for (auto& term : terms_) {
    if (term.second.text == atom.text) {
      term.first += coefficient;
      return;
    }
  }
  terms_.emplace_back(coefficient, atom);
}

void AffineIndex::AddConstant(int64_t value) {
  TORCH_CHECK(value >= 0, "lazyfuse: index algebra: a negative constant");
  constant_ += value;
}

AffineIndex AffineIndex::Scaled(int64_t by) const {
  AffineIndex scaled;
  for (const auto& [coefficient, atom] : terms_) {
    scaled.Add(coefficient * by, atom);
  }
  scaled.AddConstant(constant_ * by);
  return scaled;
}

AffineIndex AffineIndex::Plus(const AffineIndex& other) const {
  AffineIndex sum = *this;
  for (const auto& [coefficient, atom] : other.terms_) {
    sum.Add(coefficient, atom);
  }
  sum.AddConstant(other.constant_);
  return sum;
}

// floor((d*Q + R) / d) = Q + floor(R / d); and floor((g*B + t) / d) =
// floor(B / (d/g)) when g divides d and 0 <= t < g.
AffineIndex FloorDiv(const AffineIndex& index, int64_t divisor) {
  TORCH_CHECK(divisor > 0, "lazyfuse: index algebra: division by ", divisor);
  if (divisor == 1) {
    return index;
  }
  const std::optional<FactorSplit> whole = SplitByFactor(index, divisor);
  if (whole) {
    return whole->quotient;
  }
  // The part divisor divides comes out; the rest is what may not cancel.
  AffineIndex out;
  AffineIndex rest;
  for (const auto& [coefficient, atom] : index.terms()) {
    if (coefficient % divisor == 0) {
      out.Add(coefficient / divisor, atom);
    } else {
      rest.Add(coefficient, atom);
    }
  }
  out.AddConstant(index.constant() / divisor);
  rest.AddConstant(index.constant() % divisor);
  for (int64_t factor : SharedFactors(rest, divisor)) {
    if (divisor % factor != 0) {
      continue;
    }
    if (auto split = SplitByFactor(rest, factor)) {
      return out.Plus(FloorDiv(split->quotient, divisor / factor));
    }
  }
  return out.Plus(Opaque(rest, '/', divisor, rest.Max() / divisor + 1));
}

// Terms whose coefficient the modulus divides drop out; (g*B + t) % m =
// g*(B % (m/g)) + t when g divides m and 0 <= t < g.
AffineIndex Mod(const AffineIndex& index, int64_t modulus) {
  TORCH_CHECK(modulus > 0, "lazyfuse: index algebra: remainder by ", modulus);
  AffineIndex rest;
  for (const auto& [coefficient, atom] : index.terms()) {
    rest.Add(coefficient % modulus, atom);
  }
  rest.AddConstant(index.constant() % modulus);
  if (rest.Max() < modulus) {
    return rest;
  }
  for (int64_t factor : SharedFactors(rest, modulus)) {
    if (modulus % factor != 0) {
      continue;
    }
    if (auto split = SplitByFactor(rest, factor)) {
      return Mod(split->quotient, modulus / factor).Scaled(factor).Plus(split->small);
    }
  }
  return Opaque(rest, '%', modulus, modulus);
}

}  // namespace lazyfuse
