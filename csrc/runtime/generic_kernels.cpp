#include "runtime/generic_kernels.h"

#include <c10/util/Exception.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <mutex>
#include <unordered_map>

#include "kernels/source_literals.h"
#include "program/compile_log.h"

namespace lazyfuse {

class GenericTemplate {
 public:
  std::vector<bool> generic;       // per literal: a parameter
  std::vector<std::string> fixed;  // per literal: its text where it is not one
  KernelSource source;             // the template text and its parameter types
  // Weak: a binary is unloaded when no graph's kernel holds it, and loaded
  // again at its next use, from the kernel caches where they hold its text
  // (a CPU batch library holds several kernels' texts together).
  std::weak_ptr<LoadedKernel> loaded;
  GenericKernelRecord record;

  bool Serves(const std::vector<std::string>& texts) const {
    for (size_t k = 0; k < texts.size(); ++k) {
      if (!generic[k] && texts[k] != fixed[k]) {
        return false;
      }
    }
    return true;
  }
};

namespace {

// Renders loaded as themselves, kept per skeleton: a graph whose kernels are
// all known then loads nothing (a batch of them would compile again).
constexpr size_t kSpecializedPerSkeleton = 16;

struct LoadedRender {
  std::vector<std::string> texts;
  std::weak_ptr<LoadedKernel> loaded;  // as GenericTemplate::loaded
};

// The most kernel structures remembered; past it, all are forgotten.
constexpr size_t kMostSkeletons = 4096;

// The renders' literals each skeleton remembers, to see which vary.
constexpr size_t kSeenPerSkeleton = 32;

struct Skeleton {
  const void* first_program = nullptr;
  std::vector<std::string> first_texts;
  std::deque<std::vector<std::string>> seen;  // the latest renders' literals
  bool generic_from_start = false;
  std::deque<LoadedRender> specialized;
  std::vector<std::shared_ptr<GenericTemplate>> templates;
};

std::mutex g_mutex;
std::unordered_map<std::string, Skeleton> g_skeletons;
std::unordered_map<std::string, const void*> g_first_program_by_name;
std::atomic<int> g_mode{-1};

DynamicKernels ModeFromEnv() {
  const char* env = std::getenv("LAZYFUSE_DYNAMIC");
  const std::string value = env == nullptr ? "" : env;
  if (value.empty() || value == "auto") {
    return DynamicKernels::kAuto;
  }
  if (value == "0") {
    return DynamicKernels::kOff;
  }
  TORCH_CHECK(value == "1", "lazyfuse: LAZYFUSE_DYNAMIC is '", value, "'; use auto, 0 or 1");
  return DynamicKernels::kOn;
}

// LAZYFUSE_DEBUG=2: why a render runs as itself, a binary of its own (the
// kernel caches may hold it).
void SayCompiled(const KernelSource& rendered, const char* why) {
  if (DebugLevel() >= 2) {
    std::cerr << "lazyfuse: kernel " << rendered.name << " runs specialized: " << why << "\n";
  }
}

ArgSlot SlotOf(const SourceLiteral& literal, const std::string& text) {
  ArgSlot slot{};
  switch (literal.type) {
    case LiteralType::kInt:
      slot.i32 = static_cast<int>(std::strtoll(text.c_str(), nullptr, 10));
      break;
    case LiteralType::kLongLong:
      slot.i64 = std::strtoll(text.c_str(), nullptr, 10);
      break;
    case LiteralType::kUnsigned:
      slot.u32 = static_cast<unsigned int>(std::strtoull(text.c_str(), nullptr, 10));
      break;
    case LiteralType::kUnsignedLongLong:
      slot.u64 = std::strtoull(text.c_str(), nullptr, 10);
      break;
    case LiteralType::kFloat:
      slot.f32 = std::strtof(text.c_str(), nullptr);  // as the compiler reads it
      break;
    case LiteralType::kDouble:
      slot.f64 = std::strtod(text.c_str(), nullptr);
      break;
  }
  return slot;
}

bool IsInteger(LiteralType type) {
  return type != LiteralType::kFloat && type != LiteralType::kDouble;
}

// The literals a new template turns into parameters: those where renders of
// the skeleton so far differ, and every one an earlier template took, so
// templates only widen. The rest stay constants: a size that never varied
// (a model's width) divides as fast as in a specialized kernel, where a
// divisor passed as an argument costs an integer division per element.
// Unsigned literals are counts (a split row's chunks, row_split.cpp) and
// always vary. With nothing to compare against (`guess`: LAZYFUSE_DYNAMIC=1, or a
// new structure of a kernel already generic), every integer but 0 and 1
// varies.
std::vector<bool> GenericMask(const Skeleton& skeleton,
                              const SourceShape& shape,
                              const std::vector<std::string>& texts,
                              bool guess) {
  std::vector<bool> mask(texts.size(), false);
  for (size_t k = 0; k < texts.size(); ++k) {
    for (const auto& seen : skeleton.seen) {
      mask[k] = mask[k] || seen[k] != texts[k];
    }
    for (const auto& other : skeleton.templates) {
      mask[k] = mask[k] || other->generic[k];
    }
    const LiteralType type = shape.literals[k].type;
    mask[k] = mask[k] || type == LiteralType::kUnsigned || type == LiteralType::kUnsignedLongLong ||
              (guess && IsInteger(type) && std::strtoll(texts[k].c_str(), nullptr, 10) > 1);
  }
  return mask;
}

std::shared_ptr<GenericTemplate> MakeTemplate(const KernelSource& rendered,
                                              const SourceShape& shape,
                                              const std::vector<std::string>& texts,
                                              const std::vector<std::string>& first_texts,
                                              std::vector<bool> mask) {
  auto made = std::make_shared<GenericTemplate>();
  made->source = rendered;
  made->source.source =
      GenericSource(rendered.source, rendered.name, shape, mask, &made->source.parameter_types);
  made->generic = std::move(mask);
  made->record.name = rendered.name;
  made->record.literals = texts.size();
  int shown = 0;
  for (size_t k = 0; k < texts.size(); ++k) {
    if (made->generic[k]) {
      ++made->record.parameters;
      made->fixed.emplace_back();
      if (texts[k] != first_texts[k] && shown++ < 6) {
        made->record.changes +=
            (made->record.changes.empty() ? "" : ", ") + first_texts[k] + " -> " + texts[k];
      }
    } else {
      made->fixed.push_back(texts[k]);
    }
  }
  TORCH_LAZY_COUNTER("LazyFuseGenericTemplates", 1);
  if (DebugLevel() >= 1) {
    std::cerr << "lazyfuse: kernel " << rendered.name
              << " goes shape-generic: " << made->record.parameters << " of its " << texts.size()
              << " literals become parameters"
              << (made->record.changes.empty() ? "" : " (" + made->record.changes + ")") << "\n";
  }
  return made;
}

void UseTemplate(KernelChoice& choice,
                 const std::shared_ptr<GenericTemplate>& chosen,
                 const SourceShape& shape) {
  choice.generic = chosen;
  choice.source.source = chosen->source.source;
  choice.source.parameter_types = chosen->source.parameter_types;
  for (size_t k = 0; k < shape.literals.size(); ++k) {
    if (chosen->generic[k]) {
      choice.generic_args.push_back(SlotOf(shape.literals[k], shape.literals[k].text));
    }
  }
  choice.loaded = chosen->loaded.lock();
  ++chosen->record.renders;
  TORCH_LAZY_COUNTER("LazyFuseGenericRenders", 1);
}

// Serves `choice` from a template of another strategy of the same kernel:
// its render preferring that strategy must take it all and match the
// template's skeleton, and the template must take its literals as they are.
bool ServeByAnotherStrategy(KernelChoice& choice, const RenderPreferring& rerender) {
  const RowStrategy& own = choice.rendered.strategy;
  if (!rerender || !own.known) {
    return false;
  }
  std::vector<RowStrategy> tried;
  for (auto& [key, skeleton] : g_skeletons) {
    for (const auto& candidate : skeleton.templates) {
      const RowStrategy& theirs = candidate->source.strategy;
      if (candidate->record.failed || candidate->source.name != choice.rendered.name ||
          !theirs.known || theirs == own ||
          std::find(tried.begin(), tried.end(), theirs) != tried.end()) {
        continue;
      }
      tried.push_back(theirs);
      KernelSource again = rerender(theirs);
      if (again.strategy != theirs) {
        continue;
      }
      const SourceShape shape = ScanLiterals(again.source, again.name);
      if (shape.skeleton != key) {
        continue;
      }
      std::vector<std::string> texts;
      for (const SourceLiteral& literal : shape.literals) {
        texts.push_back(literal.text);
      }
      for (const auto& serving : skeleton.templates) {
        if (!serving->record.failed && serving->Serves(texts)) {
          choice.rendered = again;
          choice.source = std::move(again);
          choice.key = key;
          choice.texts = std::move(texts);
          UseTemplate(choice, serving, shape);
          TORCH_LAZY_COUNTER("LazyFuseGenericOtherStrategy", 1);
          if (DebugLevel() >= 2) {
            std::cerr << "lazyfuse: kernel " << choice.rendered.name
                      << " runs the template of another strategy of its structure\n";
          }
          return true;
        }
      }
    }
  }
  return false;
}

}  // namespace

DynamicKernels GetDynamicKernels() {
  int mode = g_mode.load();
  if (mode < 0) {
    mode = static_cast<int>(ModeFromEnv());
    g_mode = mode;
  }
  return static_cast<DynamicKernels>(mode);
}

void SetDynamicKernels(DynamicKernels mode) {
  g_mode = static_cast<int>(mode);
}

namespace {

// ChooseKernel, under g_mutex. `generic`: `rendered` is a render preferring
// another strategy, made to be a template. Sets `as_itself` where the render
// runs as itself, which the caller then renders specialized, unlocked.
KernelChoice ChooseUnderLock(KernelSource rendered,
                             const void* program,
                             const RenderPreferring& rerender,
                             DynamicKernels mode,
                             bool generic,
                             bool& as_itself) {
  KernelChoice choice;
  choice.source = rendered;
  choice.rendered = std::move(rendered);
  const SourceShape shape = ScanLiterals(choice.rendered.source, choice.rendered.name);
  std::vector<std::string> texts;
  for (const SourceLiteral& literal : shape.literals) {
    texts.push_back(literal.text);
  }
  if (g_skeletons.size() >= kMostSkeletons && g_skeletons.count(shape.skeleton) == 0) {
    // Bounded: every structure starts over (binaries stay with their graphs).
    g_skeletons.clear();
    g_first_program_by_name.clear();
  }
  auto [found, first_render] = g_skeletons.try_emplace(shape.skeleton);
  Skeleton& skeleton = found->second;
  choice.key = shape.skeleton;
  choice.texts = texts;
  if (first_render) {
    skeleton.first_program = program;
    skeleton.first_texts = texts;
    // A kernel seen in an earlier graph at another skeleton (another vector
    // width, reduction strategy or row bucket) is a structure whose shape
    // varies: its new skeleton starts generic.
    const auto named = g_first_program_by_name.try_emplace(choice.rendered.name, program).first;
    skeleton.generic_from_start = mode == DynamicKernels::kOn || named->second != program;
  }
  if (std::find(skeleton.seen.begin(), skeleton.seen.end(), texts) == skeleton.seen.end()) {
    skeleton.seen.push_front(texts);
    if (skeleton.seen.size() > kSeenPerSkeleton) {
      skeleton.seen.pop_back();
    }
  }
  for (const LoadedRender& known : skeleton.specialized) {
    if (known.texts == texts) {
      choice.loaded = known.loaded.lock();
      as_itself = true;
      return choice;
    }
  }
  for (const auto& candidate : skeleton.templates) {
    if (!candidate->record.failed && candidate->Serves(texts)) {
      UseTemplate(choice, candidate, shape);
      return choice;
    }
  }
  if (!skeleton.generic_from_start && !generic &&
      (texts == skeleton.first_texts || program == skeleton.first_program)) {
    SayCompiled(choice.rendered,
                first_render ? "its first render" : "a new shape in the graph of its first render");
    as_itself = true;
    return choice;
  }
  if (ServeByAnotherStrategy(choice, rerender)) {
    return choice;
  }
  // Rows short enough for a thread each (under 32 columns) take a block each
  // in a template: one block-per-row template then serves rows of every
  // length, where a thread-per-row one would be slow past a few dozen.
  const RowStrategy& own = choice.rendered.strategy;
  if (rerender && own.known && !own.block) {
    KernelSource again = rerender(RowStrategy{true, true, 32, 1, own.split});
    if (again.strategy.block) {
      bool as_rendered = false;  // another strategy's render runs as rendered, not specialized
      return ChooseUnderLock(std::move(again), program, {}, mode, /*generic=*/true, as_rendered);
    }
  }
  std::vector<bool> mask =
      GenericMask(skeleton,
                  shape,
                  texts,
                  (skeleton.generic_from_start || generic) && skeleton.seen.size() == 1);
  if (std::find(mask.begin(), mask.end(), true) == mask.end()) {
    SayCompiled(choice.rendered, "no literal to vary");
    as_itself = true;
    return choice;
  }
  for (const auto& other : skeleton.templates) {
    if (other->record.failed && other->generic == mask) {
      SayCompiled(choice.rendered, "its template did not compile");
      as_itself = true;
      return choice;
    }
  }
  skeleton.templates.push_back(
      MakeTemplate(choice.rendered, shape, texts, skeleton.first_texts, std::move(mask)));
  const GenericKernelRecord& made = skeleton.templates.back()->record;
  std::string why = mode == DynamicKernels::kOn ? "LAZYFUSE_DYNAMIC=1"
                    : skeleton.generic_from_start
                        ? "a new strategy of a kernel an earlier graph ran"
                        : "a new shape (" + made.changes + ")";
  NoteGenericKernel(program,
                    made.name + ": " + std::to_string(made.parameters) + " of " +
                        std::to_string(made.literals) + " literals as parameters, for " + why);
  UseTemplate(choice, skeleton.templates.back(), shape);
  return choice;
}

}  // namespace

KernelChoice ChooseKernel(KernelSource rendered,
                          const void* program,
                          const RenderPreferring& rerender,
                          const RenderSpecialized& specialize) {
  const DynamicKernels mode = GetDynamicKernels();
  if (mode == DynamicKernels::kOff) {
    KernelChoice choice;
    choice.source = specialize ? specialize() : rendered;
    choice.rendered = std::move(rendered);
    return choice;
  }
  bool as_itself = false;
  KernelChoice choice;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    choice =
        ChooseUnderLock(std::move(rendered), program, rerender, mode, /*generic=*/false, as_itself);
  }
  if (as_itself && specialize) {
    choice.source = specialize();  // a render, which needs no lock
  }
  return choice;
}

KernelSource GuessedTemplate(const KernelSource& rendered) {
  const SourceShape shape = ScanLiterals(rendered.source, rendered.name);
  std::vector<std::string> texts;
  for (const SourceLiteral& literal : shape.literals) {
    texts.push_back(literal.text);
  }
  Skeleton skeleton;
  skeleton.first_texts = texts;
  skeleton.seen.push_front(texts);
  KernelSource out = rendered;
  out.source = GenericSource(rendered.source,
                             rendered.name,
                             shape,
                             GenericMask(skeleton, shape, texts, /*guess=*/true),
                             &out.parameter_types);
  return out;
}

void KernelChoice::Loaded(std::shared_ptr<LoadedKernel> binary) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (generic != nullptr) {
    if (binary != nullptr) {
      if (generic->loaded.expired()) {
        generic->loaded = binary;
      }
      loaded = std::move(binary);
      return;
    }
    // The render runs as itself; the template is never chosen again.
    generic->record.failed = true;
    generic = nullptr;
    generic_args.clear();
    source = rendered;
    loaded = nullptr;
    return;
  }
  loaded = binary;
  const auto found = key.empty() ? g_skeletons.end() : g_skeletons.find(key);
  if (binary == nullptr || found == g_skeletons.end()) {
    return;
  }
  auto& specialized = found->second.specialized;
  for (LoadedRender& known : specialized) {
    if (known.texts == texts) {
      if (known.loaded.expired()) {
        known.loaded = binary;
      }
      return;
    }
  }
  specialized.push_front(LoadedRender{texts, std::move(binary)});
  if (specialized.size() > kSpecializedPerSkeleton) {
    specialized.pop_back();
  }
}

std::vector<GenericKernelRecord> GenericKernelRecords() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<GenericKernelRecord> out;
  for (const auto& entry : g_skeletons) {
    for (const auto& made : entry.second.templates) {
      out.push_back(made->record);
    }
  }
  return out;
}

void ClearGenericKernels() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_skeletons.clear();
  g_first_program_by_name.clear();
}

}  // namespace lazyfuse
