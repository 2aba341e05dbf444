#include "runtime/kernel_cache.h"

#include <c10/util/Exception.h>
#include <sys/stat.h>
#include <torch/csrc/lazy/core/hash.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace lazyfuse {
namespace {

constexpr char kMagic[4] = {'L', 'Z', 'F', 'K'};
// 2: the checksum covers the format byte and the target name too.
constexpr uint8_t kFormat = 2;
constexpr size_t kHeader = 4 + 1 + 1 + 8 + 8;
// The memory cache's bound, documented in kernel_cache.h.
constexpr size_t kMemoryCachedKernels = 1024;

uint64_t Fnv1a(const std::string& data, uint64_t hash = 1469598103934665603ull) {
  for (unsigned char c : data) {
    hash = (hash ^ c) * 1099511628211ull;
  }
  return hash;
}

uint64_t EntryChecksum(const CompiledKernel& kernel) {
  return Fnv1a(kernel.target, Fnv1a(kernel.binary, Fnv1a(kernel.cubin ? "c" : "p")));
}

std::shared_ptr<const CompiledKernel> ReadEntry(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return nullptr;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  if (data.size() < kHeader || std::memcmp(data.data(), kMagic, 4) != 0 ||
      static_cast<uint8_t>(data[4]) != kFormat || static_cast<uint8_t>(data[5]) > 1) {
    return nullptr;
  }
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::memcpy(&size, data.data() + 6, 8);
  std::memcpy(&checksum, data.data() + 14, 8);
  if (data.size() - kHeader < size) {
    return nullptr;
  }
  // The target name follows the payload.
  auto entry = std::make_shared<CompiledKernel>();
  entry->binary = data.substr(kHeader, size);
  entry->target = data.substr(kHeader + size);
  entry->cubin = data[5] == 0;
  if (entry->target.empty() || EntryChecksum(*entry) != checksum) {
    return nullptr;
  }
  return entry;
}

void WriteEntry(const std::string& path, const CompiledKernel& kernel) {
  std::string data(kMagic, 4);
  data.push_back(static_cast<char>(kFormat));
  data.push_back(kernel.cubin ? 0 : 1);
  const uint64_t size = kernel.binary.size();
  const uint64_t checksum = EntryChecksum(kernel);
  data.append(reinterpret_cast<const char*>(&size), 8);
  data.append(reinterpret_cast<const char*>(&checksum), 8);
  data += kernel.binary;
  data += kernel.target;
  std::random_device random;
  const std::string temp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(random());
  {
    std::ofstream out(temp, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      std::remove(temp.c_str());
      return;  // a full or read-only disk only costs a recompile next time
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
  }
}

void MakeDirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at == path.size() || path[at] == '/') {
      ::mkdir(path.substr(0, at).c_str(), 0755);
    }
  }
}

}  // namespace

std::string KernelCacheDir() {
  if (const char* env = std::getenv("LAZYFUSE_CACHE_DIR"); env != nullptr && *env != '\0') {
    return std::string(env) == "0" ? std::string() : std::string(env);
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/lazyfuse";
  }
  const char* home = std::getenv("HOME");
  return home != nullptr ? std::string(home) + "/.cache/lazyfuse" : std::string();
}

bool KernelCacheReadOnly() {
  const char* env = std::getenv("LAZYFUSE_CACHE_READONLY");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

std::string KernelScratchDir(const std::string& subdir) {
  std::string root = KernelCacheReadOnly() ? std::string() : KernelCacheDir();
  if (!root.empty()) {
    MakeDirs(root);
    if (::access(root.c_str(), W_OK) != 0) {
      const int error = errno;
      // A read-only home (a container's, a cluster's) must not cost the
      // fused kernels: they are built where they can be, and not kept.
      static std::mutex mutex;
      static auto* warned = new std::unordered_set<std::string>();
      std::lock_guard<std::mutex> lock(mutex);
      if (warned->insert(root).second) {
        TORCH_WARN("lazyfuse: the kernel cache directory ",
                   root,
                   " cannot be written (",
                   std::strerror(error),
                   "); kernels are built in /tmp instead and not kept between runs. Set "
                   "LAZYFUSE_CACHE_DIR to a writable directory, or to 0.");
      }
      root.clear();
    }
  }
  const std::string dir =
      (root.empty() ? std::string("/tmp/lazyfuse-") + std::to_string(::getuid()) : root) + "/" +
      subdir;
  MakeDirs(dir);
  return dir;
}

std::string SaveKernelSource(const std::string& source,
                             const std::string& name,
                             const std::string& subdir,
                             const std::string& extension) {
  const std::string path = KernelScratchDir(subdir) + "/" + name + "_" +
                           torch::lazy::HashToString(torch::lazy::Hash(source)).substr(2, 16) +
                           extension;
  std::ifstream existing(path);
  if (!existing) {
    std::ofstream(path) << source;
  }
  return path;
}

namespace {

// The memory cache: the most recently used binaries, so a graph compiled
// again after LTC evicted it skips even the disk read. Bounded; an entry it
// drops costs a disk read (or a compile) the next time.
class MemoryCache {
 public:
  std::shared_ptr<const CompiledKernel> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      return nullptr;
    }
    order_.splice(order_.begin(), order_, it->second.second);
    return it->second.first;
  }

  std::shared_ptr<const CompiledKernel> Insert(const std::string& key,
                                               std::shared_ptr<const CompiledKernel> entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      return it->second.first;  // another thread compiled it first
    }
    order_.push_front(key);
    entries_.emplace(key, std::make_pair(entry, order_.begin()));
    while (entries_.size() > kMemoryCachedKernels) {
      entries_.erase(order_.back());
      order_.pop_back();
    }
    return entry;
  }

 private:
  std::mutex mutex_;
  std::list<std::string> order_;  // most recently used first
  std::unordered_map<
      std::string,
      std::pair<std::shared_ptr<const CompiledKernel>, std::list<std::string>::iterator>>
      entries_;
};

// The compiles running now, by key, for threads that want the same kernel.
class InFlight {
 public:
  using Result = std::shared_future<std::shared_ptr<const CompiledKernel>>;
  // The running compile of `key`; or nullopt, after registering the caller's
  // `promise` as it: the caller compiles, fulfils it, then calls Finish.
  std::optional<Result> JoinOrStart(const std::string& key,
                                    std::promise<std::shared_ptr<const CompiledKernel>>& promise) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = running_.find(key);
    if (it != running_.end()) {
      return it->second;
    }
    running_.emplace(key, promise.get_future().share());
    return std::nullopt;
  }
  void Finish(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    running_.erase(key);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, Result> running_;
};

}  // namespace

std::shared_ptr<const CompiledKernel> CachedCompile(
    const std::string& source,
    const std::string& compiler_key,
    const std::function<CompiledKernel()>& compile) {
  static auto* memory = new MemoryCache();
  static auto* in_flight = new InFlight();
  const std::string key =
      torch::lazy::HashToString(torch::lazy::Hash(source)).substr(2) + "_" + compiler_key;
  if (std::shared_ptr<const CompiledKernel> hit = memory->Find(key)) {
    return hit;
  }
  // One compile per key at a time: a thread asking for a kernel another is
  // compiling (a repeated layer, compiled side by side) waits for it.
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  if (auto running = in_flight->JoinOrStart(key, promise)) {
    return running->get();
  }
  try {
    const std::string dir = KernelCacheDir();
    const std::string path = dir.empty() ? std::string() : dir + "/kernels/" + key + ".bin";
    std::shared_ptr<const CompiledKernel> entry = path.empty() ? nullptr : ReadEntry(path);
    if (entry) {
      TORCH_LAZY_COUNTER("LazyFuseKernelsLoadedFromDisk", 1);
    } else {
      auto compiled = std::make_shared<CompiledKernel>(compile());
      TORCH_LAZY_COUNTER("LazyFuseKernelsCompiled", 1);
      if (!path.empty() && !KernelCacheReadOnly()) {
        MakeDirs(dir + "/kernels");
        WriteEntry(path, *compiled);
      }
      entry = std::move(compiled);
    }
    entry = memory->Insert(key, std::move(entry));
    promise.set_value(entry);
    in_flight->Finish(key);
    return entry;
  } catch (...) {
    promise.set_exception(std::current_exception());
    in_flight->Finish(key);
    throw;
  }
}

}  // namespace lazyfuse
