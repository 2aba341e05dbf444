#include "program/memory_meter.h"

#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>

namespace lazyfuse {

void MemoryMeter::reportMemoryUsage(void* /*ptr*/,
                                    int64_t alloc_size,
                                    size_t /*total_allocated*/,
                                    size_t /*total_reserved*/,
                                    c10::Device device) {
  if (enclosing_) {
    enclosing_->reportMemoryUsage(nullptr, alloc_size, 0, 0, device);
  }
  if (device.type() != device_type_) {
    return;
  }
  const int64_t now = allocated_ += alloc_size;
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void MemoryMeter::DescribePeak(std::vector<HeldBuffer> held) {
  std::sort(held.begin(), held.end(), [](const HeldBuffer& a, const HeldBuffer& b) {
    return a.bytes > b.bytes;
  });
  held_at_peak_ = std::move(held);
  described_peak_ = peak_;
}

std::shared_ptr<MemoryMeter> StartMemoryMeter(c10::DeviceType device_type) {
  // torch's profiler uses the same slot: one of the two listens at a time.
  TORCH_CHECK(c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == nullptr ||
                  ActiveMemoryMeter() != nullptr,
              "lazyfuse.metrics.track_memory: torch.profiler is recording on this thread, and "
              "both read allocations through one hook; measure outside the profiler");
  std::shared_ptr<MemoryMeter> enclosing;
  if (ActiveMemoryMeter() != nullptr) {
    enclosing = std::static_pointer_cast<MemoryMeter>(
        c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE));
  }
  auto meter = std::make_shared<MemoryMeter>(device_type, std::move(enclosing));
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, meter);
  return meter;
}

void StopMemoryMeter(const std::shared_ptr<MemoryMeter>& meter) {
  TORCH_CHECK(ActiveMemoryMeter() == meter.get(),
              "lazyfuse.metrics.track_memory: meters must stop in the reverse order they started");
  c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
}

MemoryMeter* ActiveMemoryMeter() {
  return dynamic_cast<MemoryMeter*>(
      c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE));
}

}  // namespace lazyfuse
