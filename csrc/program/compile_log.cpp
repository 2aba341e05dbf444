#include "program/compile_log.h"

#include <c10/util/irange.h>
#include <torch/csrc/lazy/core/debug_util.h>

#include <cstdlib>
#include <deque>
#include <iostream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "ltc/graph_executor.h"

namespace lazyfuse {
namespace {

constexpr size_t kMaxRecords = 256;

// What a compiled graph looked like, to tell the next compile from the same
// call site what changed.
struct Signature {
  std::vector<std::string> inputs;
  std::vector<std::string> nodes;
};

std::string Describe(const BufferInfo& info) {
  std::ostringstream out;
  out << c10::toString(info.dtype) << "[";
  for (const auto i : c10::irange(info.sizes.size())) {
    out << (i ? "," : "") << info.sizes[i];
  }
  out << "]";
  return out.str();
}

Signature SignatureOf(const Program& program) {
  Signature signature;
  for (BufferId id : program.parameters) {
    signature.inputs.push_back(Describe(program.buffers[id]));
  }
  for (const Step& step : program.steps) {
    std::string node = step.op;
    for (BufferId id : step.outputs) {
      node += " " + Describe(program.buffers[id]);
    }
    signature.nodes.push_back(std::move(node));
  }
  return signature;
}

std::string Cause(const Signature* previous, const Signature& current) {
  if (previous == nullptr) {
    return "first compile at this call site";
  }
  const auto& before = previous->inputs;
  const auto& after = current.inputs;
  for (size_t i = 0; i < std::min(before.size(), after.size()); ++i) {
    if (before[i] != after[i]) {
      const bool same_dtype =
          before[i].substr(0, before[i].find('[')) == after[i].substr(0, after[i].find('['));
      return std::string(same_dtype ? "input shape" : "input dtype") + " changed: input " +
             std::to_string(i) + " was " + before[i] + ", now " + after[i];
    }
  }
  if (before.size() != after.size()) {
    return "number of inputs changed: " + std::to_string(before.size()) + " -> " +
           std::to_string(after.size());
  }
  for (size_t i = 0; i < std::min(previous->nodes.size(), current.nodes.size()); ++i) {
    if (previous->nodes[i] != current.nodes[i]) {
      return "node " + std::to_string(i) + " changed: was " + previous->nodes[i] + ", now " +
             current.nodes[i];
    }
  }
  if (previous->nodes.size() != current.nodes.size()) {
    return "node count changed: " + std::to_string(previous->nodes.size()) + " -> " +
           std::to_string(current.nodes.size());
  }
  return "same ops and shapes, different graph hash (operand wiring or op attributes changed)";
}

std::vector<std::string>& LibraryDirs() {
  static auto* dirs = new std::vector<std::string>();
  return *dirs;
}

bool InLibrary(const std::string& file) {
  for (const auto& dir : LibraryDirs()) {
    if (file.compare(0, dir.size(), dir) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string UserCallSite() {
  auto& frames_fn = torch::lazy::GetPythonFramesFunction();
  if (!frames_fn) {
    return "<no python frame>";
  }
  for (const auto& frame : frames_fn()) {
    if (!InLibrary(frame.file)) {
      return frame.file + ":" + std::to_string(frame.line) + " in " + frame.function;
    }
  }
  return "<no user frame>";
}

void SetLibraryDirs(std::vector<std::string> dirs) {
  LibraryDirs() = std::move(dirs);
}

int DebugLevel() {
  static const int level = [] {
    const char* env = std::getenv("LAZYFUSE_DEBUG");
    return env ? std::atoi(env) : 0;
  }();
  return level;
}

namespace {

struct State {
  std::mutex mutex;
  std::deque<CompileRecord> records;
  std::unordered_map<std::string, Signature> last_by_site;
};

State& GetState() {
  static State* state = new State();
  return *state;
}

}  // namespace

void RecordCompile(const Program& program, size_t node_count) {
  CompileRecord record{PendingGraphHash(), node_count, UserCallSite(), "", &program, {}};
  Signature signature = SignatureOf(program);
  State& state = GetState();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto it = state.last_by_site.find(record.call_site);
    record.cause = Cause(it == state.last_by_site.end() ? nullptr : &it->second, signature);
    state.last_by_site[record.call_site] = std::move(signature);
    state.records.push_back(record);
    if (state.records.size() > kMaxRecords) {
      state.records.pop_front();
    }
  }
  if (DebugLevel() >= 1) {
    std::cerr << "[lazyfuse] compile hash=" << torch::lazy::HashToString(record.hash)
              << " nodes=" << record.node_count << " cause: " << record.cause << " at "
              << record.call_site << std::endl;
  }
}

void NoteGenericKernel(const void* program, std::string note) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  for (auto it = state.records.rbegin(); it != state.records.rend(); ++it) {
    if (it->program == program) {
      it->generic.push_back(std::move(note));
      return;
    }
  }
}

std::vector<CompileRecord> CompileLog() {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  return {state.records.begin(), state.records.end()};
}

void ClearCompileLog() {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.records.clear();
  state.last_by_site.clear();
}

}  // namespace lazyfuse
