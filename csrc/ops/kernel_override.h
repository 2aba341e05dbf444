#pragma once

#include <c10/util/Exception.h>

#include <string>

namespace lazyfuse {

// The dispatcher warns when a kernel replaces another. lazyfuse's
// replacements of torch's Functionalize kernels are deliberate and keep the
// old kernel for every other case, so the warning would only alarm users at
// import; install this around those registrations.
class DropOverrideWarning : public c10::WarningHandler {
 public:
  explicit DropOverrideWarning(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("Overriding a previously registered kernel") == std::string::npos) {
      next_->process(warning);
    }
  }

 private:
  c10::WarningHandler* next_;
};

}  // namespace lazyfuse
