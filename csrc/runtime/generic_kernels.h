#pragma once

// Automatic dynamic shapes for fused kernels (LAZYFUSE_DYNAMIC). Every render
// of a fused group is looked up by its skeleton (kernels/source_literals.h):
// - its first shape, and any further shape within the graph that first
//   rendered it, run specialized: sizes are constants in the source;
// - a new shape from a later graph runs a shape-generic template: the
//   literals that differ among the skeleton's renders become kernel
//   parameters, compiled once; every later render whose other literals
//   agree launches it with its own values, compiling nothing;
// - a render whose fixed parts differ (another vector width, index width or
//   reduction strategy) has another skeleton: a few templates per structure.
//   A reduction takes the strategy of one of them instead, where that is
//   valid and cheap at its sizes (kernels/row_strategy.h).
//   A new skeleton of a kernel seen in an earlier graph starts generic, its
//   integers (but 0 and 1) guessed to vary.
// Renders loaded, specialized or generic, are served from here while some
// graph's kernel holds their binary, so a graph whose kernels are all known
// compiles nothing; once none does, the binary unloads, and its next use
// loads it again.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/signature.h"
#include "runtime/target.h"

namespace lazyfuse {

// LAZYFUSE_DYNAMIC: auto (the default, as above), 0 (every shape compiles
// its own kernels, as torch.compile's dynamic=False), 1 (a template from a
// skeleton's first render on, as dynamic=True). Read at first use; the
// setter serves tests.
enum class DynamicKernels { kAuto, kOff, kOn };
DynamicKernels GetDynamicKernels();
void SetDynamicKernels(DynamicKernels mode);

class GenericTemplate;

// How one render runs.
struct KernelChoice {
  KernelSource rendered;              // the specialized render, launch shape included
  KernelSource source;                // what runs: the render, or a template with its launch shape
  std::vector<ArgSlot> generic_args;  // after every other argument
  std::shared_ptr<LoadedKernel> loaded;      // null until loaded
  std::shared_ptr<GenericTemplate> generic;  // null: `source` is the render
  std::string key;                           // the render's skeleton, to record its binary
  std::vector<std::string> texts;            // the render's literals

  // Records the compiled `source` (null: it failed to compile; a template
  // then never serves again, and the choice falls back to the render).
  void Loaded(std::shared_ptr<LoadedKernel> binary);
};

// Renders the same kernel again, preferring a strategy (kernels/row_strategy.h).
using RenderPreferring = std::function<KernelSource(const RowStrategy&)>;
// Renders the same kernel to run at its own sizes only: its index
// arithmetic simplified (KernelSource::simplified_indices).
using RenderSpecialized = std::function<KernelSource()>;

// The choice for `rendered`, one of the kernels of the graph `program`
// (identity only). A reduction whose strategy is new for its structure is
// rendered again with `rerender`, preferring each strategy the structure
// has a template of, and runs on the first such template that serves it:
// its sizes then compile nothing. A render that runs as itself runs as
// `specialize` renders it, where given; templates and skeletons are made of
// `rendered`, whose text does not depend on the sizes' factors.
KernelChoice ChooseKernel(KernelSource rendered,
                          const void* program,
                          const RenderPreferring& rerender = {},
                          const RenderSpecialized& specialize = {});

// The template LAZYFUSE_DYNAMIC=1 makes from `rendered` at its first render
// (every integer but 0 and 1 a parameter), for compiling ahead of time.
KernelSource GuessedTemplate(const KernelSource& rendered);

struct GenericKernelRecord {
  std::string name;
  size_t literals = 0;    // that a template may turn into parameters
  size_t parameters = 0;  // that this one did
  std::string changes;    // "256 -> 384, 16 -> 24, ..."
  int64_t renders = 0;    // launched through it
  bool failed = false;    // it did not compile; its renders run specialized
};
std::vector<GenericKernelRecord> GenericKernelRecords();
// Forgets every skeleton (tests).
void ClearGenericKernels();

}  // namespace lazyfuse
