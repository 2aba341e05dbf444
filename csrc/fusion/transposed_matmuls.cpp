#include "fusion/transposed_matmuls.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_set>

namespace lazyfuse {
namespace {

bool IsTranspose(const Step& step) {
  return step.kind == StepKind::kView && step.qualified_op() == "aten::t_copy" &&
         step.inputs.size() == 1 && step.outputs.size() == 1;
}

bool IsMatmul(const Step& step) {
  return step.kind == StepKind::kOpaque && step.qualified_op() == "aten::mm" &&
         step.inputs.size() == 2 && step.outputs.size() == 1 && step.operand_arity.empty();
}

// The rewritten step list, with what made each buffer and what each buffer
// now stands for.
class Rewriter {
 public:
  Rewriter(Program& program, StepFn transpose_fn)
      : program_(program),
        transpose_fn_(std::move(transpose_fn)),
        made_by_(program.buffers.size(), -1),
        same_as_(program.buffers.size()) {
    for (size_t id = 0; id < same_as_.size(); ++id) {
      same_as_[id] = static_cast<BufferId>(id);
    }
  }

  BufferId Resolve(BufferId id) const {
    return same_as_[id];
  }

  void Keep(Step step) {
    for (BufferId& id : step.inputs) {
      id = Resolve(id);
    }
    if (IsTranspose(step)) {
      const int source = made_by_[step.inputs[0]];
      if (source >= 0 && IsTranspose(steps_[source])) {
        // A transpose of a transpose: its readers read the original.
        same_as_[step.outputs[0]] = steps_[source].inputs[0];
      }
    }
    Add(std::move(step));
  }

  // X = mm(A, B) as Y = mm(t(B), t(A)), X = t(Y).
  void Turn(Step matmul) {
    const BufferId a = Resolve(matmul.inputs[0]);
    const BufferId b = Resolve(matmul.inputs[1]);
    const BufferId x = matmul.outputs[0];
    const BufferInfo info = program_.buffers[x];
    TORCH_INTERNAL_ASSERT(info.sizes.size() == 2, "lazyfuse: mm of a non-matrix");
    const BufferId y = NewBuffer(info.dtype, {info.sizes[1], info.sizes[0]});
    matmul.inputs = {Transposed(b), Transposed(a)};
    matmul.outputs = {y};
    matmul.detail += " (computed transposed: every reader transposes it)";
    Add(std::move(matmul));
    Keep(TransposeStep(y, x));
  }

  // Drops views nothing reads and the program does not return.
  std::vector<Step> Finish() {
    std::vector<bool> read(program_.buffers.size(), false);
    for (BufferId id : program_.results) {
      read[id] = true;
    }
    std::vector<bool> kept(steps_.size(), true);
    for (size_t i = steps_.size(); i-- > 0;) {
      const Step& step = steps_[i];
      const bool dead = step.kind == StepKind::kView &&
                        std::none_of(step.outputs.begin(), step.outputs.end(), [&](BufferId id) {
                          return read[id];
                        });
      if (dead) {
        kept[i] = false;
        continue;
      }
      for (BufferId id : step.inputs) {
        read[id] = true;
      }
    }
    std::vector<Step> steps;
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (kept[i]) {
        steps.push_back(std::move(steps_[i]));
      }
    }
    return steps;
  }

 private:
  void Add(Step step) {
    for (BufferId id : step.outputs) {
      made_by_[id] = static_cast<int>(steps_.size());
    }
    steps_.push_back(std::move(step));
  }

  BufferId NewBuffer(at::ScalarType dtype, std::vector<int64_t> sizes) {
    program_.buffers.push_back(BufferInfo{dtype, std::move(sizes), false});
    const auto id = static_cast<BufferId>(program_.buffers.size() - 1);
    made_by_.push_back(-1);
    same_as_.push_back(id);
    return id;
  }

  Step TransposeStep(BufferId from, BufferId to) const {
    Step step;
    step.op = "aten::t_copy";
    step.detail = "t_copy, of a matmul computed transposed";
    step.kind = StepKind::kView;
    step.inputs = {from};
    step.outputs = {to};
    step.fn = transpose_fn_;
    return step;
  }

  // t(id): a transpose's input, or a new transpose.
  BufferId Transposed(BufferId id) {
    const int source = made_by_[id];
    if (source >= 0 && IsTranspose(steps_[source])) {
      return steps_[source].inputs[0];
    }
    const BufferInfo info = program_.buffers[id];
    const BufferId out = NewBuffer(info.dtype, {info.sizes[1], info.sizes[0]});
    Keep(TransposeStep(id, out));
    return out;
  }

  Program& program_;
  StepFn transpose_fn_;
  std::vector<Step> steps_;
  std::vector<int> made_by_;
  std::vector<BufferId> same_as_;
};

}  // namespace

int TransposeMatmulsReadTransposed(Program& program) {
  std::vector<std::vector<size_t>> readers(program.buffers.size());
  for (size_t i = 0; i < program.steps.size(); ++i) {
    for (BufferId id : program.steps[i].inputs) {
      readers[id].push_back(i);
    }
  }
  std::unordered_set<size_t> turned;
  StepFn transpose_fn;
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const Step& step = program.steps[i];
    if (!IsMatmul(step)) {
      continue;
    }
    const std::vector<size_t>& read_by = readers[step.outputs[0]];
    const bool read_transposed =
        !read_by.empty() && std::all_of(read_by.begin(), read_by.end(), [&](size_t r) {
          return IsTranspose(program.steps[r]);
        });
    if (read_transposed) {
      turned.insert(i);
      transpose_fn = program.steps[read_by[0]].fn;
    }
  }
  if (turned.empty()) {
    return 0;
  }
  Rewriter rewriter(program, std::move(transpose_fn));
  for (size_t i = 0; i < program.steps.size(); ++i) {
    if (turned.count(i) != 0) {
      rewriter.Turn(std::move(program.steps[i]));
    } else {
      rewriter.Keep(std::move(program.steps[i]));
    }
  }
  program.steps = rewriter.Finish();
  ComputeLifetimes(program);
  return static_cast<int>(turned.size());
}

}  // namespace lazyfuse
