#pragma once

// Counts the bytes a device's allocator hands out on this thread while the
// meter is on, and their peak: torch.cuda.max_memory_allocated for any device,
// the CPU included. It listens where torch's profiler does (c10's memory
// reporting hook), so eager and lazyfuse are measured by one rule. While it
// is on, the executor also names the buffers alive at each new peak.

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

struct HeldBuffer {
  std::string what;  // "aten::mm (step 12)", "parameter 3 [256, 784] Float", ...
  int64_t bytes = 0;
};

class MemoryMeter : public c10::MemoryReportingInfoBase {
 public:
  MemoryMeter(c10::DeviceType device_type, std::shared_ptr<MemoryMeter> enclosing)
      : device_type_(device_type), enclosing_(std::move(enclosing)) {}

  void reportMemoryUsage(void* ptr,
                         int64_t alloc_size,
                         size_t total_allocated,
                         size_t total_reserved,
                         c10::Device device) override;
  bool memoryProfilingEnabled() const override {
    return true;
  }

  // Bytes allocated since the meter started, net of what was freed.
  int64_t allocated() const {
    return allocated_;
  }
  int64_t peak() const {
    return peak_;
  }
  // Whether the peak rose since the buffers at the peak were last named.
  bool PeakUndescribed() const {
    return peak_ > described_peak_;
  }
  // The buffers a Program run holds now, named at the current peak.
  void DescribePeak(std::vector<HeldBuffer> held);
  const std::vector<HeldBuffer>& held_at_peak() const {
    return held_at_peak_;
  }
  // The allocated bytes when held_at_peak() was taken.
  int64_t described_peak() const {
    return described_peak_;
  }

 private:
  c10::DeviceType device_type_;
  std::shared_ptr<MemoryMeter> enclosing_;  // a meter started before this one also counts
  // Atomic: a graph on the CPU stream allocates while its caller traces.
  std::atomic<int64_t> allocated_{0};
  std::atomic<int64_t> peak_{0};
  int64_t described_peak_ = 0;
  std::vector<HeldBuffer> held_at_peak_;
};

// Starts a meter for `device_type` on this thread; meters nest.
std::shared_ptr<MemoryMeter> StartMemoryMeter(c10::DeviceType device_type);
// Stops the innermost meter on this thread (`meter` must be it).
void StopMemoryMeter(const std::shared_ptr<MemoryMeter>& meter);
// The meter on this thread, or nullptr.
MemoryMeter* ActiveMemoryMeter();

}  // namespace lazyfuse
