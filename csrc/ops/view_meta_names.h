#pragma once

#include <ATen/FunctionalStorageImpl.h>

#include <string_view>
#include <typeinfo>

namespace lazyfuse {

// Whether functionalization recorded `meta` for a view op whose name holds
// `op`. torch names each generated ViewMeta class after its op
// (at::functionalization::unfold_ViewMeta, unsqueeze_ViewMeta) and installs
// no header for them, so the class's type name is what identifies the op.
inline bool ViewMetaNames(const at::functionalization::ViewMeta& meta, std::string_view op) {
  return std::string_view(typeid(meta).name()).find(op) != std::string_view::npos;
}

}  // namespace lazyfuse
