#pragma once

// Shape-generic kernels from rendered text. Two renders of one kernel at
// different shapes differ only in their numeric literals (sizes, strides, row
// counts, 1/n), so a kernel's *skeleton*, its text with those literals taken
// out, names its structure. A template is the text with chosen literals
// turned into trailing kernel parameters (lf_g0, lf_g1, ...); launching it
// with the values of any render of the same skeleton computes exactly what
// that render's own text computes, so a new shape needs a render (cheap) and
// no compile. Literals that must stay constants (array sizes in declarations,
// preprocessor lines, the lane count after "#pragma unroll", constexpr lines)
// stay in the skeleton, and so do comments.

#include <cstddef>
#include <string>
#include <vector>

namespace lazyfuse {

// A literal's C type, which its parameter keeps; part of the skeleton.
enum class LiteralType { kInt, kLongLong, kUnsigned, kUnsignedLongLong, kFloat, kDouble };

const char* LiteralTypeName(LiteralType type);

struct SourceLiteral {
  size_t begin = 0;  // in the source text
  size_t end = 0;
  LiteralType type = LiteralType::kInt;
  std::string text;  // as written, suffix included
};

struct SourceShape {
  std::string skeleton;
  std::vector<SourceLiteral> literals;  // the ones a template may turn into parameters
};

// Scans the kernel named `kernel_name` in `source`. The skeleton keeps the
// source's first line (the dialect's name, and the ops) in place of the
// prelude, which is the dialect's and the same for every kernel.
SourceShape ScanLiterals(const std::string& source, const std::string& kernel_name);

// The source with literal i replaced by parameter lf_g<k> wherever
// `generic[i]`, k counting the generic ones in order; the parameters are
// appended to the kernel's parameter list, and their C types to `types`.
std::string GenericSource(const std::string& source,
                          const std::string& kernel_name,
                          const SourceShape& shape,
                          const std::vector<bool>& generic,
                          std::vector<std::string>* types);

}  // namespace lazyfuse
