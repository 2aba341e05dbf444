#pragma once

// The text of an error that another message wraps. c10::Error's what() ends in
// a C++ backtrace, which would bury the cause the user needs under frames.

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace lazyfuse {

inline std::string ErrorText(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    return c10_error->what_without_backtrace();
  }
  return error.what();
}

}  // namespace lazyfuse
