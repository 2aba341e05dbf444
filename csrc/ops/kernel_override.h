#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <memory>
#include <string>
#include <vector>

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

// Registers `kernel` for `name` at `key` in place of the kernel there, which
// the caller took (getComputedKernelForDispatchKey) to call on. Leaked on
// purpose, as the dispatcher's own registrations are.
template <class Kernel>
void OverrideKernel(const c10::OperatorName& name,
                    c10::DispatchKey key,
                    std::unique_ptr<Kernel> kernel,
                    const char* why) {
  static auto* handles = new std::vector<c10::RegistrationHandleRAII>();
  DropOverrideWarning quiet(c10::WarningUtils::get_warning_handler());
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  handles->push_back(c10::Dispatcher::singleton().registerImpl(
      name,
      key,
      c10::KernelFunction::makeFromBoxedFunctor(std::move(kernel)),
      std::nullopt,
      nullptr,
      why));
}

}  // namespace lazyfuse
