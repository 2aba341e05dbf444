#pragma once

// The expression side of the kernel renderer: given an index into a buffer,
// writes the statements that compute that buffer's value there, walking back
// through the group's pointwise steps and views to loads of its inputs.
// Views become index arithmetic; equal (buffer, index) pairs are computed once
// per scope.

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "fusion/planner.h"
#include "fusion/rules.h"
#include "kernels/dialect.h"
#include "kernels/index_algebra.h"
#include "kernels/signature.h"
#include "program/program.h"

namespace lazyfuse {

// An index's arithmetic is in the group's domain's shape (or a row's), or
// in a buffer's (`space` is its id) once a view or a broadcast maps it there.
inline constexpr int64_t kDomainSpace = -1;

// An index into a buffer of `shape`: its row-major linear position, one
// expression per dim, or both. The missing form is derived on demand, and
// shared only within one space: two buffers' shapes may print the same
// arithmetic at one size (a sequence length equal to the head dim) and not
// at another, which would change the kernel's skeleton with the size.
struct KernelIndex {
  std::vector<int64_t> shape;
  std::string linear;
  std::vector<std::string> dims;
  int64_t space = kDomainSpace;
};

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape);

class KernelWriter {
 public:
  KernelWriter(const Program& program,
               const FusionGroup& group,
               const KernelSignature& signature,
               const KernelDialect& dialect,
               std::string index_type,
               bool simplify_indices = false);

  // A name or literal holding buffer `id`'s register value at `index`.
  std::string Value(BufferId id, KernelIndex index);
  // Stores group output `output_slot` at `domain_index`; a buffer smaller
  // than the domain (a broadcast) is stored only where the index is its own.
  void Store(size_t output_slot, const KernelIndex& domain_index);
  // Computes (and remembers) the value Store would write, so a kernel can
  // load everything before its first store: an output written over an input
  // then never precedes a load of that input.
  void ComputeOutput(size_t output_slot, const KernelIndex& domain_index);

  // A buffer whose value is computed elsewhere: a reduction's row result, or
  // a callback rendering a full-shape reduction result at an index.
  void BindRegister(BufferId id, std::string name);
  void BindCustom(BufferId id, std::function<std::string(KernelWriter&, KernelIndex)> render);

  // Within a vector loop: contiguous buffers indexed exactly by `linear_var`
  // read and write element `lane` of per-buffer vector registers.
  void SetVectorLane(std::string linear_var, std::string lane);
  const std::set<size_t>& vector_inputs() const {
    return vector_inputs_;
  }
  const std::set<size_t>& vector_outputs() const {
    return vector_outputs_;
  }
  void ClearVectorUse() {
    vector_inputs_.clear();
    vector_outputs_.clear();
  }
  // A position in the text, and lines put there later: the vector loads a
  // loop needs are known only once its body is written.
  size_t Mark() const {
    return text_.size();
  }
  void InsertAt(size_t mark, const std::string& lines) {
    text_.insert(mark, lines);
  }
  int indent() const {
    return indent_;
  }

  // `var`, a loop's index, takes the values [0, bound): the arithmetic of
  // indices derived from it may then cancel (kernels/index_algebra.h), in a
  // writer that simplifies indices (else this and DefineIndex do nothing).
  void DeclareIndexRange(const std::string& var, int64_t bound);
  // `var` holds `value`; and what is known of an index expression's terms.
  void DefineIndex(const std::string& var, const AffineIndex& value);
  std::optional<AffineIndex> AffineOf(const std::string& text) const;
  std::string Linear(KernelIndex& index);
  const std::vector<std::string>& Dims(KernelIndex& index);
  // The index into buffer `to` of an element at `from`, whose shape `to`
  // broadcasts to.
  KernelIndex Broadcast(KernelIndex from, BufferId to);

  void Line(const std::string& text);
  void Open(const std::string& header);
  void Close();
  std::string NewVar(const char* prefix);
  const std::string& text() const {
    return text_;
  }
  const std::string& index_type() const {
    return index_type_;
  }
  const Program& program() const {
    return program_;
  }
  bool IsContiguousInput(size_t slot) const;
  // Whether some index was split into dims: a view or a broadcast read.
  bool split_an_index() const {
    return split_an_index_;
  }

 private:
  std::string Load(size_t slot, KernelIndex index);
  std::string Compute(const Step& step, BufferId id, KernelIndex index);
  std::string AsCommonDtype(const PointwiseRule& rule, BufferId input, std::string value) const;
  std::string ViewValue(const Step& step, KernelIndex index);
  // A dim's expression: a literal, a name, or a new variable holding it.
  std::string DimExpression(const AffineIndex& dim, int64_t space);
  std::string Lookup(const std::string& key) const;
  void Remember(const std::string& key, const std::string& value);

  const Program& program_;
  const FusionGroup& group_;
  const KernelSignature& signature_;
  const KernelDialect& dialect_;
  std::string index_type_;
  bool simplify_indices_ = false;
  std::unordered_map<BufferId, size_t> input_slot_;
  std::unordered_map<BufferId, size_t> producer_step_;
  std::unordered_map<BufferId, std::string> registers_;
  std::unordered_map<BufferId, std::function<std::string(KernelWriter&, KernelIndex)>> custom_;
  std::vector<std::unordered_map<std::string, std::string>> scopes_;
  // Index expressions and variables as sums of ranged terms, where known.
  std::unordered_map<std::string, AffineIndex> affine_;
  std::string text_;
  int indent_ = 1;
  int next_var_ = 0;
  bool split_an_index_ = false;
  std::string vector_linear_;
  std::string vector_lane_;
  std::set<size_t> vector_inputs_;
  std::set<size_t> vector_outputs_;
};

}  // namespace lazyfuse
