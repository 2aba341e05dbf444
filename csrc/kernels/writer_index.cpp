// The index side of the renderer: an index's linear and per-dim forms, each
// derived from the other on demand, and what is known of their terms'
// ranges, so that arithmetic a chain of views writes may cancel.

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "kernels/writer.h"

namespace lazyfuse {

void KernelWriter::DeclareIndexRange(const std::string& var, int64_t bound) {
  if (!simplify_indices_) {
    return;
  }
  const bool name = std::all_of(var.begin(), var.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
  affine_.insert_or_assign(var, AffineIndex::Atom(name ? var : "(" + var + ")", bound));
}

void KernelWriter::DefineIndex(const std::string& var, const AffineIndex& value) {
  if (!simplify_indices_) {
    return;
  }
  affine_.insert_or_assign(var, value);
}

std::optional<AffineIndex> KernelWriter::AffineOf(const std::string& text) const {
  const auto known = affine_.find(text);
  if (known != affine_.end()) {
    return known->second;
  }
  if (!text.empty() && text.size() < 18 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return AffineIndex::Constant(std::stoll(text));
  }
  return std::nullopt;
}

std::string KernelWriter::DimExpression(const AffineIndex& dim, int64_t space) {
  if (dim.terms().empty()) {
    return std::to_string(dim.constant());
  }
  const std::string text = dim.Text();
  if (dim.IsAtom() && affine_.count(text) != 0) {
    return text;  // a variable already
  }
  const std::string key = "U" + std::to_string(space) + "|" + text;
  std::string var = Lookup(key);
  if (var.empty()) {
    var = NewVar("x");
    Line("const " + index_type_ + " " + var + " = " + text + ";");
    Remember(key, var);
  }
  // A quotient or remainder left whole is named by its variable from now
  // on; a sum stays a sum, so a later division may split it.
  affine_.insert_or_assign(
      var, dim.IsAtom() ? AffineIndex::Atom(var, dim.terms().front().second.bound) : dim);
  return var;
}

std::string KernelWriter::Linear(KernelIndex& index) {
  if (!index.linear.empty()) {
    return index.linear;
  }
  if (index.shape.empty()) {
    index.linear = "0";
    return index.linear;
  }
  TORCH_CHECK(index.dims.size() == index.shape.size(),
              "lazyfuse: kernel codegen: an index with ",
              index.dims.size(),
              " dims into a buffer of rank ",
              index.shape.size());
  const auto strides = ContiguousStrides(index.shape);
  std::string sum;
  std::optional<AffineIndex> affine = AffineIndex::Constant(0);
  for (size_t d = 0; d < index.shape.size(); ++d) {
    if (index.shape[d] == 1 || index.dims[d] == "0") {
      continue;
    }
    const std::string term =
        strides[d] == 1 ? index.dims[d] : index.dims[d] + " * " + std::to_string(strides[d]);
    sum += (sum.empty() ? "" : " + ") + term;
    const auto dim = affine ? AffineOf(index.dims[d]) : std::nullopt;
    affine = dim ? std::optional(affine->Plus(dim->Scaled(strides[d]))) : std::nullopt;
  }
  if (sum.empty()) {
    index.linear = "0";
    return index.linear;
  }
  const std::string key = "R" + std::to_string(index.space) + "|" + sum;
  std::string var = Lookup(key);
  if (var.empty()) {
    var = NewVar("l");
    Line("const " + index_type_ + " " + var + " = " + sum + ";");
    Remember(key, var);
    if (affine) {
      affine_.insert_or_assign(var, *affine);
    }
  }
  index.linear = var;
  return var;
}

const std::vector<std::string>& KernelWriter::Dims(KernelIndex& index) {
  if (!index.dims.empty() || index.shape.empty()) {
    return index.dims;
  }
  const auto strides = ContiguousStrides(index.shape);
  const std::optional<AffineIndex> linear = AffineOf(index.linear);
  split_an_index_ = split_an_index_ || index.shape.size() > 1;
  for (size_t d = 0; d < index.shape.size(); ++d) {
    // An empty buffer is never indexed; its loops do not run.
    if (index.shape[d] <= 1) {
      index.dims.push_back("0");
      continue;
    }
    if (linear) {
      AffineIndex dim = FloorDiv(*linear, strides[d]);
      index.dims.push_back(DimExpression(d > 0 ? Mod(dim, index.shape[d]) : dim, index.space));
      continue;
    }
    std::string expr = "(" + index.linear + ")";
    if (strides[d] != 1) {
      expr += " / " + std::to_string(strides[d]);
    }
    if (d > 0) {
      expr = "(" + expr + ") % " + std::to_string(index.shape[d]);
    }
    const std::string key = "U" + std::to_string(index.space) + "|" + expr;
    std::string var = Lookup(key);
    if (var.empty()) {
      var = NewVar("x");
      Line("const " + index_type_ + " " + var + " = " + expr + ";");
      Remember(key, var);
    }
    index.dims.push_back(var);
  }
  return index.dims;
}

KernelIndex KernelWriter::Broadcast(KernelIndex from, BufferId to_buffer) {
  const std::vector<int64_t>& to_shape = program_.buffers[to_buffer].sizes;
  if (from.shape == to_shape) {
    return from;
  }
  KernelIndex to{to_shape, "", {}, to_buffer};
  if (ShapeNumel(to_shape) == 1) {
    to.linear = "0";
    to.dims.assign(to_shape.size(), "0");
    return to;
  }
  if (ShapeNumel(to_shape) == ShapeNumel(from.shape)) {
    to.linear = Linear(from);
    return to;
  }
  const auto& dims = Dims(from);
  TORCH_CHECK(to_shape.size() <= from.shape.size() && dims.size() == from.shape.size(),
              "lazyfuse: kernel codegen: a buffer of shape ",
              c10::IntArrayRef(to_shape),
              " is read at an index of shape ",
              c10::IntArrayRef(from.shape));
  const size_t offset = from.shape.size() - to_shape.size();
  for (size_t d = 0; d < to_shape.size(); ++d) {
    TORCH_CHECK(to_shape[d] == 1 || to_shape[d] == from.shape[offset + d],
                "lazyfuse: kernel codegen: a buffer of shape ",
                c10::IntArrayRef(to_shape),
                " is read at an index of shape ",
                c10::IntArrayRef(from.shape),
                ", which it does not broadcast to");
    to.dims.push_back(to_shape[d] == 1 ? "0" : dims[offset + d]);
  }
  return to;
}

}  // namespace lazyfuse
