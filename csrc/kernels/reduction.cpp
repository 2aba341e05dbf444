// Reduction kernels: one reduction (sum, mean, amax, amin, var, softmax,
// log_softmax, layer_norm) with its pointwise prologue, computed at the
// reduction's input index, and its epilogue. Each reduced row runs through
// phases: loops over the row's columns that accumulate, each ending in a
// reduction, then the row's results and the per-element outputs are written.
// Rows whose reduced dims are innermost get a block each (warp shuffles and a
// block reduction); other rows get a thread each with a serial loop, or on
// the CPU, where rows are adjacent in memory, a tile of them (column_tiles.h).
//
// Few long rows are split into chunks so they still fill a GPU (row_split.h).
// Rows reduced in several passes (var, layer norm, softmax) are kept in
// shared memory after the first when they fit, so global memory is read once.

#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "fusion/rules.h"
#include "kernels/codegen.h"
#include "kernels/column_tiles.h"
#include "kernels/row_loops.h"
#include "kernels/row_outputs.h"
#include "kernels/row_split.h"
#include "kernels/row_statistics.h"
#include "kernels/row_strategy.h"
#include "kernels/row_vectors.h"
#include "kernels/strategy_constants.h"
#include "kernels/writer.h"

namespace lazyfuse {
namespace {

// Shorter uncached rows keep their extra passes: cheap at that length, and
// without the rounding one-pass statistics (online softmax, Welford) add.
constexpr int64_t kOnePassMinColumns = 1024;

class ReductionKernel {
 public:
  ReductionKernel(const Program& program,
                  const FusionGroup& group,
                  const KernelSignature& signature,
                  const KernelDialect& dialect,
                  KernelSource& out,
                  const RowStrategy* prefer)
      : program_(program),
        group_(group),
        dialect_(dialect),
        out_(out),
        step_(program.steps[*group.reduction]),
        rule_(*ReductionRuleFor(step_, program)),
        idx_(out.index64 ? "long long" : "int"),
        w_(program, group, signature, dialect, idx_, out.simplified_indices),
        prefer_(prefer) {
    const auto& shape = group.domain;
    SplitDims(shape, rule_.dims, kept_shape_, reduced_shape_);
    rows_ = ShapeNumel(kept_shape_);
    cols_ = ShapeNumel(reduced_shape_);
    // Innermost: the reduced dims are the trailing ones, so a row is contiguous.
    inner_ = !rule_.dims.empty() && rule_.dims.back() == static_cast<int64_t>(shape.size()) - 1 &&
             rule_.dims.front() == static_cast<int64_t>(shape.size() - rule_.dims.size());
    block_ = inner_ && !dialect.serial_blocks && BlockPerRow(prefer, cols_);
    // Reductions that pass over a row more than once keep it in shared memory
    // when it fits, so global memory (and the prologue) is read once.
    multi_pass_ = rule_.kind == ReductionKind::kVar || rule_.kind == ReductionKind::kLayerNorm ||
                  rule_.kind == ReductionKind::kSoftmax || rule_.kind == ReductionKind::kLogSoftmax;
    // sum(x, dtype=torch.float64) of a float tensor accumulates in double.
    const at::ScalarType in_dtype = program.buffers[step_.inputs[0]].dtype;
    const at::ScalarType out_dtype = program.buffers[step_.outputs[0]].dtype;
    acc_ = in_dtype == at::kDouble || out_dtype == at::kDouble ? "double" : "float";
    // Moments accumulate in double: float partial sums of squares were 2 ulp
    // off on 512 threads, and a row far from zero lost its mean (12-100x eager).
    const bool moments =
        rule_.kind == ReductionKind::kVar || rule_.kind == ReductionKind::kLayerNorm;
    stat_ = moments ? "double" : acc_;
    const bool combinable = rule_.kind == ReductionKind::kSum ||
                            rule_.kind == ReductionKind::kMean ||
                            rule_.kind == ReductionKind::kMax || rule_.kind == ReductionKind::kMin;
    block_limit_ = signature.block_limit > 0 ? signature.block_limit : 1024;
    const Splitting how = !multi_pass_ ? combinable ? Splitting::kOneLaunch : Splitting::kNever
                          : rule_.kind == ReductionKind::kVar ? Splitting::kTwoLaunchesRow
                                                              : Splitting::kTwoLaunches;
    split_.emplace(
        w_, dialect, idx_, stat_, rows_, cols_, block_, how, std::min(512, block_limit_));
    if (split() && PrefersWholeRows(prefer, split_->chunks())) {
      split_.emplace(w_, dialect, idx_, stat_, rows_, cols_, block_, Splitting::kNever, 0);
    }
    if (multi_pass_ && block_ && !split()) {
      row_cache_ = PreferredRowArray(prefer, RowArrayLength(cols_, acc_ == "double" ? 8 : 4));
    }
    if (block_ && inner_ && !split()) {
      vector_width_ =
          PreferredVectorWidth(prefer, RowVectorWidth(program, group, signature, cols_));
    }
    if (RendersColumnTiles(dialect, shape, rule_.dims, rule_.kind, split())) {
      tiles_.emplace(w_, dialect, idx_, kept_shape_, reduced_shape_);
    }
    reduction_index_ = *group.reduction;
  }

  std::string Body() {
    out_.launch = block_ ? LaunchShape::kBlockPerRow : LaunchShape::kThreadPerRow;
    out_.work_items = tiles_ ? tiles_->work_items() : rows_;
    const RowBlockNeeds needs{
        rows_, cols_, vector_width_, block_limit_, multi_pass_, !OnlineSoftmax() && !Welford()};
    out_.block_size = block_ ? RowBlockThreads(prefer_, needs) : 128;
    if (vector_width_ > 1) {
      vector_.emplace(w_, group_, dialect_, idx_, cols_, vector_width_);
    }
    if (split()) {
      DeclareStatistics();
      split_->OpenLoop(out_, Welford() ? 3 : OnlineSoftmax() ? 2 : 1);
    } else if (block_) {
      w_.Line(StrategyConstant(kBlockThreadsName, out_.block_size));
      w_.Line("__shared__ " + stat_ + " lf_smem[32];");
      if (row_cache_ > 0) {
        w_.Line("__shared__ " + acc_ + " lf_row[" + std::to_string(row_cache_) + "];");
      } else {
        DeclareStatistics();
      }
    }
    if (tiles_) {
      tiles_->OpenTiles();  // each loop over a tile's rows defines its row dims
    } else {
      if (!split()) {
        OpenRows(w_, dialect_, idx_, rows_, block_);
      }
      DefineRowDims();
    }
    EmitPhases();
    if (split()) {
      split_->CloseRow();
    }
    if (tiles_) {
      w_.Close();  // the tile's results; the tile loop is next
    }
    w_.Close();
    out_.strategy =
        RowStrategy{true, block_, block_ ? out_.block_size : 0, vector_width_, split(), row_cache_};
    return w_.text();
  }

 private:
  using Update = RowSplit::Update;

  bool split() const {
    return split_->active();
  }

  void DefineRowDims() {
    if (tiles_) {
      row_dims_ = tiles_->RowDims();
      return;
    }
    KernelIndex kept{kept_shape_, "row", {}};
    row_dims_ = kept_shape_.empty() ? std::vector<std::string>{} : w_.Dims(kept);
  }

  // The reduction input's index for column `col` of the current row.
  KernelIndex ElementIndex(const std::string& col) {
    if (inner_) {
      return InnerRowElementIndex(w_, group_.domain, cols_, col);
    }
    return RowElementIndex(w_, group_.domain, rule_.dims, reduced_shape_, row_dims_, col);
  }

  std::string ColumnLoop() const {
    if (split()) {
      return split_->ColumnLoop();
    }
    if (block_) {
      return "LF_UNROLL for (" + idx_ + " c = " + dialect_.thread_index + "; c < " +
             std::to_string(cols_) + "; c += " + kBlockThreadsName + ")";
    }
    return "for (" + idx_ + " c = 0; c < " + std::to_string(cols_) + "; ++c)";
  }

  RowInput Reader() {
    return [this](KernelIndex index) { return Input(std::move(index)); };
  }

  // Opens the loop over the row's columns (in vectors when it can); the
  // index of its element.
  KernelIndex OpenColumns() {
    vector_ ? vector_->Open() : w_.Open(ColumnLoop());
    KernelIndex index = ElementIndex("c");
    element_linear_ = index.linear;
    if (vector_) {
      w_.SetVectorLane(index.linear, RowVectorLoop::lane());
    }
    return index;
  }
  void CloseColumns() {
    vector_ ? vector_->Close() : w_.Close();
  }

  // The reduction input at `index`. Once the row cache holds the row, the
  // current element comes from shared memory, not global memory and the
  // prologue again; any other index (an epilogue view) is computed.
  std::string Input(KernelIndex index) {
    if (cache_filled_ && !element_linear_.empty() && index.linear == element_linear_) {
      return "lf_row[c]";
    }
    return "((" + acc_ + ")" + w_.Value(step_.inputs[0], std::move(index)) + ")";
  }

  // Runs one accumulation loop; `update` renders the new accumulator from the
  // element's value. The last loop of the row also writes per-element outputs.
  std::string Accumulate(const std::string& init,
                         const Update& update,
                         const char* combine,
                         bool last_loop) {
    if (tiles_) {
      return AccumulateTiles(init, update, combine);
    }
    const std::string acc = update ? w_.NewVar("a") : std::string();
    if (update) {
      w_.Line(stat_ + " " + acc + " = " + init + ";");
    }
    const std::string lanes =
        dialect_.serial_blocks && update ? OpenSerialLanes(w_, acc, combine) : "";
    KernelIndex index = OpenColumns();
    if (!lanes.empty()) {
      AccumulateInLanes(w_, lanes, acc, combine, Input(index));
    } else if (update) {
      std::string x = Input(index);
      if (row_cache_ > 0 && !cache_filled_) {
        // Each thread reads back only the columns it wrote: no barrier.
        w_.Line("lf_row[c] = " + x + ";");
        x = "lf_row[c]";
      }
      w_.Line(acc + " = " + update(acc, x) + ";");
    }
    if (last_loop) {
      StoreOutputs(index, /*row_level=*/false);
    }
    CloseColumns();
    CloseSerialLanes(
        w_, lanes, acc, stat_, [&] { return Input(OpenColumns()); }, [&] { CloseColumns(); });
    cache_filled_ = cache_filled_ || (row_cache_ > 0 && update);
    if (block_ && combine != nullptr) {
      w_.Line(acc + " = lf_block_reduce(" + acc + ", " + combine + "(), lf_smem);");
    }
    if (split() && combine != nullptr) {
      split_->Combine(acc, init, update, combine);
    }
    return acc;
  }

  // Column tiles' one loop, which also writes the per-element outputs; ends
  // in the loop over the tile's rows that writes their results.
  std::string AccumulateTiles(const std::string& init, const Update& update, const char* combine) {
    const bool sum = std::string(combine) == "lf_sum_op";
    const std::string acc = tiles_->OpenColumns(stat_, w_.NewVar("a"), init, sum);
    DefineRowDims();
    const KernelIndex index = ElementIndex("c");
    w_.Line(acc + " = " + update(acc, Input(index)) + ";");
    StoreOutputs(index, /*row_level=*/false);
    const std::string total = tiles_->CloseColumns();
    tiles_->OpenResults();
    DefineRowDims();
    return total;
  }

  // The loop that writes per-element outputs when no phase loop remains.
  void ElementLoop() {
    Accumulate("0", nullptr, nullptr, /*last_loop=*/true);
  }

  void StoreOutputs(const KernelIndex& index, bool row_level) {
    StoreGroupOutputs(w_, group_, reduction_index_, rule_.kind, index, row_level);
  }

  void StoreRowOutputs() {
    // Split in two launches, the row's first chunk writes its results.
    std::string writes = block_ ? std::string(dialect_.thread_index) + " == 0" : "";
    if (split_->two_launches()) {
      writes += (writes.empty() ? "" : " && ") + std::string("lf_chunk == 0");
    }
    StoreRowResults(w_, group_, reduction_index_, rule_.kind, writes);
  }

  std::string Result(size_t output, const std::string& value) {
    return Rounded(w_, program_.buffers[step_.outputs[output]].dtype, value, "r");
  }

  void EmitPhases() {
    const std::string cols = "(" + stat_ + ")" + std::to_string(cols_);
    const std::string neg_inf = acc_ == "double" ? "-LF_DINF" : "-LF_INF";
    auto sum = [](const std::string& a, const std::string& x) { return a + " + " + x; };
    auto max = [](const std::string& a, const std::string& x) {
      return "lf_max_combine(" + a + ", " + x + ")";
    };
    auto min = [](const std::string& a, const std::string& x) {
      return "lf_min_combine(" + a + ", " + x + ")";
    };
    switch (rule_.kind) {
      case ReductionKind::kSum:
      case ReductionKind::kMean: {
        std::string acc = Accumulate("0", sum, "lf_sum_op", true);
        if (rule_.kind == ReductionKind::kMean) {
          acc = acc + " / " + cols;
        }
        w_.BindRegister(step_.outputs[0], Result(0, acc));
        break;
      }
      case ReductionKind::kMax:
      case ReductionKind::kMin: {
        const bool is_max = rule_.kind == ReductionKind::kMax;
        const std::string init = is_max ? neg_inf : neg_inf.substr(1);
        const std::string acc =
            Accumulate(init, is_max ? max : min, is_max ? "lf_max_op" : "lf_min_op", true);
        w_.BindRegister(step_.outputs[0], Result(0, acc));
        break;
      }
      case ReductionKind::kVar:
      case ReductionKind::kLayerNorm: {
        std::string mean;
        std::string m2;
        if (Welford()) {
          std::tie(mean, m2) = WelfordStats(rule_.kind == ReductionKind::kVar);
        } else {
          const std::string total = Accumulate("0", sum, "lf_sum_op", false);
          mean = w_.NewVar("m");
          // Eager's layer norm of an empty row has mean 0 (and rstd NaN).
          const bool empty_norm = cols_ == 0 && rule_.kind == ReductionKind::kLayerNorm;
          w_.Line("const " + stat_ + " " + mean + " = " +
                  (empty_norm ? "(" + stat_ + ")0" : total + " / " + cols) + ";");
        }
        auto squared = [&](const std::string& a, const std::string& x) {
          return a + " + (" + x + " - " + mean + ") * (" + x + " - " + mean + ")";
        };
        const bool var = rule_.kind == ReductionKind::kVar;
        if (m2.empty()) {
          m2 = Accumulate("0", squared, "lf_sum_op", /*last_loop=*/var);
        }
        if (var) {
          std::string correction = "1";
          const c10::IValue* has = step_.attr("has_correction");
          if (has != nullptr && has->toBool()) {
            correction = w_.Value(step_.inputs[1], KernelIndex{{}, "0", {}});
          }
          const std::string dof = w_.NewVar("d");
          w_.Line(stat_ + " " + dof + " = " + cols + " - (" + stat_ + ")" + correction + ";");
          w_.BindRegister(step_.outputs[0],
                          Result(0, m2 + " / (" + dof + " > 0 ? " + dof + " : (" + stat_ + ")0)"));
          break;
        }
        const std::string rstd = w_.NewVar("rstd");
        // As eager: rsqrt(var + eps) in the elements' type, of the accurate var.
        w_.Line("const " + acc_ + " " + rstd + " = lf_rsqrt((" + acc_ + ")(" + m2 + " / " + cols +
                ") + (" + acc_ + ")" + ConstantLiteral(at::scalar_tensor(rule_.eps, at::kDouble)) +
                ");");
        w_.BindRegister(step_.outputs[1], Result(1, mean));
        w_.BindRegister(step_.outputs[2], Result(2, rstd));
        BindLayerNormOutput(w_, step_, rule_, acc_, mean, rstd, Reader());
        ElementLoop();
        break;
      }
      case ReductionKind::kSoftmax:
      case ReductionKind::kLogSoftmax: {
        std::string top;
        std::string total;
        if (!OnlineSoftmax()) {
          top = Accumulate(neg_inf, max, "lf_max_op", false);
          keep_exp_ = inner_ && !split() && rule_.kind == ReductionKind::kSoftmax &&
                      KeepRowExps(w_, dialect_, acc_, cols_);
          auto exp_sum = [&](const std::string& a, const std::string& x) {
            const std::string e = "lf_exp(" + x + " - " + top + ")";
            return a + " + " + (keep_exp_ ? "(lf_e[c] = " + e + ")" : e);
          };
          total = Accumulate("0", exp_sum, "lf_sum_op", false);
        } else {
          std::tie(top, total) = OnlineSoftmaxStats(neg_inf);
        }
        auto kept = [this](const KernelIndex& i) {
          const bool here = keep_exp_ && !element_linear_.empty() && i.linear == element_linear_;
          return here ? std::string("lf_e[c]") : std::string();
        };
        BindSoftmaxOutput(
            w_, step_, rule_.kind == ReductionKind::kLogSoftmax, top, total, Reader(), kept);
        ElementLoop();
        break;
      }
    }
    StoreRowOutputs();
  }

  void DeclareStatistics() {
    if (block_ && (OnlineSoftmax() || Welford())) {
      DeclareRowStatistics(
          w_, stat_, Welford() ? RowStatistics::kWelford : RowStatistics::kSoftmax);
    }
  }

  // One-pass statistics: for uncached long rows, and for split rows, whose
  // chunks merge nothing else.
  bool OnePass() const {
    // A serial row is in the CPU's cache for its next pass, where one pass
    // would pay an exponential or a division per element.
    return split_->two_launches() ||
           (row_cache_ == 0 && cols_ >= kOnePassMinColumns && !dialect_.serial_blocks);
  }
  bool OnlineSoftmax() const {
    return OnePass() &&
           (rule_.kind == ReductionKind::kSoftmax || rule_.kind == ReductionKind::kLogSoftmax);
  }
  bool Welford() const {
    return OnePass() &&
           (rule_.kind == ReductionKind::kVar || rule_.kind == ReductionKind::kLayerNorm);
  }

  // Mean and sum of squared deviations of a row that is not cached, in one
  // read of it. For var that read is the last, so it also writes per-element
  // outputs; layer norm reads the row again for its own.
  std::pair<std::string, std::string> WelfordStats(bool last_loop) {
    const std::string k = w_.NewVar("k");
    w_.Line("const " + stat_ + " " + k + " = lf_finite_or_zero((" + stat_ + ")" +
            Input(ElementIndex("0")) + ");");
    const std::string n = w_.NewVar("n");
    const std::string shifted = w_.NewVar("m");
    const std::string m2 = w_.NewVar("q");
    w_.Line(stat_ + " " + n + " = 0, " + shifted + " = 0, " + m2 + " = 0;");
    split_->OpenFirstLaunch();
    KernelIndex index = OpenColumns();
    w_.Line("lf_welford_add(" + n + ", " + shifted + ", " + m2 + ", " + Input(index) + " - " + k +
            ");");
    if (last_loop) {
      StoreOutputs(index, /*row_level=*/false);
    }
    CloseColumns();
    MergeRowStatistics(w_, *split_, block_, RowStatistics::kWelford, {n, shifted, m2});
    const std::string mean = w_.NewVar("m");
    w_.Line("const " + stat_ + " " + mean + " = " + k + " + " + shifted + ";");
    return {mean, m2};
  }

  // A row that is not cached is read twice, not three times: max and sum of
  // exponentials in one pass (rescaling the sum when the max grows), then
  // the outputs.
  std::pair<std::string, std::string> OnlineSoftmaxStats(const std::string& neg_inf) {
    const std::string m = w_.NewVar("m");
    const std::string s = w_.NewVar("e");  // the sum of exponentials
    w_.Line(acc_ + " " + m + " = " + neg_inf + ";");
    w_.Line(acc_ + " " + s + " = 0;");
    split_->OpenFirstLaunch();
    KernelIndex index = OpenColumns();
    w_.Line("lf_softmax_merge(" + m + ", " + s + ", " + Input(index) + ", (" + acc_ + ")1);");
    CloseColumns();
    MergeRowStatistics(w_, *split_, block_, RowStatistics::kSoftmax, {m, s});
    return {m, s};
  }

  const Program& program_;
  const FusionGroup& group_;
  const KernelDialect& dialect_;
  KernelSource& out_;
  const Step& step_;
  ReductionRule rule_;
  std::string idx_;
  KernelWriter w_;
  const RowStrategy* prefer_;  // null: the sizes' own
  std::vector<int64_t> kept_shape_;
  std::vector<int64_t> reduced_shape_;
  std::vector<std::string> row_dims_;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  bool inner_ = false;
  bool block_ = false;
  bool multi_pass_ = false;  // the row is reduced more than once
  int block_limit_ = 1024;
  int vector_width_ = 1;
  std::optional<RowVectorLoop> vector_;
  int64_t row_cache_ = 0;       // lf_row's elements: the row kept in shared memory (0: not)
  bool cache_filled_ = false;   // a loop has filled lf_row
  bool keep_exp_ = false;       // a softmax row's exponentials are in lf_e
  std::string element_linear_;  // the current loop's element index
  std::string acc_;             // the elements' and outputs' C type
  std::string stat_;            // the accumulators'
  size_t reduction_index_ = 0;
  std::optional<RowSplit> split_;
  std::optional<ColumnTiles> tiles_;
};

}  // namespace

std::string ReductionKernelBody(const Program& program,
                                const FusionGroup& group,
                                const KernelSignature& signature,
                                const KernelDialect& dialect,
                                KernelSource& out,
                                const RowStrategy* prefer) {
  return ReductionKernel(program, group, signature, dialect, out, prefer).Body();
}

}  // namespace lazyfuse
