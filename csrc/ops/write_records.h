#pragma once

namespace lazyfuse {

// Each aten op that writes a tensor argument and that lazyfuse does not
// functionalize itself (copy_, batch norm's running statistics, out= ops)
// gets an AutogradLazy kernel that runs torch's own path and then links
// each lazy tensor it wrote to the value that tensor held before
// (ltc/prior_values.h), as lazyfuse's own writes do. Called once from the
// backend's init, after every other AutogradLazy registration.
void RegisterWriteRecords();

}  // namespace lazyfuse
