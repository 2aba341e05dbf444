#pragma once

// Loaded kernel modules (CUDA modules, emulated shared libraries), shared by
// every kernel whose binary and device context match, and unloaded when the
// last kernel holding one is gone: its graphs were evicted from LTC's
// compile cache (FLAGS_torch_lazy_compilation_cache_size graphs). A module
// holds a LoadedModuleCount while it is loaded.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace lazyfuse {

class LoadedModuleCount {
 public:
  LoadedModuleCount() {
    live().fetch_add(1, std::memory_order_relaxed);
  }
  ~LoadedModuleCount() {
    live().fetch_sub(1, std::memory_order_relaxed);
  }
  LoadedModuleCount(const LoadedModuleCount&) = delete;
  LoadedModuleCount& operator=(const LoadedModuleCount&) = delete;

  // Modules loaded now, over every target.
  static int64_t Now() {
    return live().load(std::memory_order_relaxed);
  }

 private:
  static std::atomic<int64_t>& live() {
    static std::atomic<int64_t> count{0};
    return count;
  }
};

template <typename Module>
class ModuleRegistry {
 public:
  // The live module under `key`, or the one `load` makes.
  template <typename Load>
  std::shared_ptr<Module> GetOrLoad(const std::string& key, Load&& load) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = modules_.find(key);
    if (it != modules_.end()) {
      if (std::shared_ptr<Module> live = it->second.lock()) {
        return live;
      }
    }
    std::shared_ptr<Module> module = load();
    modules_[key] = module;
    // Forget unloaded modules now and then, so the map tracks the live set.
    if (modules_.size() > 2 * last_live_ + 64) {
      for (auto entry = modules_.begin(); entry != modules_.end();) {
        entry = entry->second.expired() ? modules_.erase(entry) : std::next(entry);
      }
      last_live_ = modules_.size();
    }
    return module;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<Module>> modules_;
  size_t last_live_ = 0;
};

}  // namespace lazyfuse
