#pragma once

// Strategy constants: the numbers a kernel's loops are built on, as opposed
// to its sizes. A vector loop's lane count and a row block's thread count are
// written as `constexpr int` lines, which a shape-generic template keeps as
// constants (kernels/source_literals.h): as template arguments they cost a
// row kernel its 16-byte shared-memory accesses and its unrolling (softmax
// 1.13x its specialized kernel on an H200). Another value is another kernel.

#include <string>

namespace lazyfuse {

inline constexpr const char* kVectorWidthName = "lf_width";
inline constexpr const char* kBlockThreadsName = "lf_threads";

inline std::string StrategyConstant(const char* name, int value) {
  return std::string("constexpr int ") + name + " = " + std::to_string(value) + ";";
}

}  // namespace lazyfuse
