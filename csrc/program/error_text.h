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

// Raises `message`, which wraps `cause`, as the same kind of error, so Python
// sees the class eager raises (IndexError for an index out of range).
[[noreturn]] inline void RaiseWrapping(const std::exception& cause, const std::string& message) {
#define LAZYFUSE_RAISE_AS(kind)                            \
  if (dynamic_cast<const c10::kind*>(&cause) != nullptr) { \
    TORCH_CHECK_WITH(kind, false, message);                \
  }
  LAZYFUSE_RAISE_AS(OutOfMemoryError)
  LAZYFUSE_RAISE_AS(IndexError)
  LAZYFUSE_RAISE_AS(ValueError)
  LAZYFUSE_RAISE_AS(TypeError)
  LAZYFUSE_RAISE_AS(NotImplementedError)
  LAZYFUSE_RAISE_AS(LinAlgError)
  LAZYFUSE_RAISE_AS(EnforceFiniteError)
#undef LAZYFUSE_RAISE_AS
  TORCH_CHECK(false, message);
}

// Whether `failure` is running out of memory: a failure that freeing memory
// can cure, so a graph that met it is kept to finish, never undone.
inline bool RanOutOfMemory(const std::exception_ptr& failure) {
  if (failure == nullptr) {
    return false;
  }
  try {
    std::rethrow_exception(failure);
  } catch (const c10::OutOfMemoryError&) {
    return true;
  } catch (const std::exception& error) {
    const std::string text = ErrorText(error);
    return text.find("out of memory") != std::string::npos ||
           text.find("can't allocate memory") != std::string::npos;
  } catch (...) {
  }
  return false;
}

}  // namespace lazyfuse
