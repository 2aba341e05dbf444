#include "ops/max_pool_step.h"

#include <ATen/Functions.h>
#include <ATen/Operators.h>
#include <ATen/Parallel.h>
#include <torch/csrc/lazy/core/metrics.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

namespace lazyfuse {
namespace {

struct Window {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

using Pair = std::pair<int64_t, int64_t>;

// One or two values of a pooling op's int list; `if_empty` for none.
std::optional<Pair> Read(c10::IntArrayRef list, std::optional<Pair> if_empty = std::nullopt) {
  if (list.empty()) {
    return if_empty;
  }
  if (list.size() == 1) {
    return Pair{list[0], list[0]};
  }
  return list.size() == 2 ? std::optional<Pair>(Pair{list[0], list[1]}) : std::nullopt;
}

// ATen's output length of one dim (pooling_output_shape).
int64_t OutputLength(
    int64_t input, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t span = input + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  const int64_t floor = span >= 0 ? span / stride : -((-span + stride - 1) / stride);
  int64_t length = floor + 1;
  if (ceil_mode && (length - 1) * stride >= input + pad) {
    --length;  // the last window starts inside the input
  }
  return length;
}

template <typename T>
struct SameSizeInt;
template <>
struct SameSizeInt<float> {
  using type = int32_t;
};
template <>
struct SameSizeInt<double> {
  using type = int64_t;
};

// Folds element `at` of a window in: the first largest, or the last NaN, as
// ATen's `val > max || isnan(val)`. By masks: compilers made `take ? v : best`
// a branch, which data as random as activations mispredicts half the time.
template <typename T>
inline void Take(const T* in, int64_t at, T& best, int64_t& where) {
  using I = typename SameSizeInt<T>::type;
  const T v = in[at];
  const I take = -static_cast<I>((v > best) | (v != v));  // all ones, or zero
  I value = 0;
  I kept = 0;
  std::memcpy(&value, &v, sizeof(T));
  std::memcpy(&kept, &best, sizeof(T));
  const I chosen = (value & take) | (kept & ~take);
  std::memcpy(&best, &chosen, sizeof(T));
  const auto wide = static_cast<int64_t>(take);
  where = (at & wide) | (where & ~wide);
}

// The taps of one window axis inside [0, size): from `first`, every
// `dilation`, before `end`. A window over the padding starts past it.
struct Taps {
  int64_t first;
  int64_t end;
};
inline Taps TapsInside(int64_t start, int64_t taps, int64_t dilation, int64_t size) {
  const int64_t first = start < 0 ? start + (dilation - 1 - start) / dilation * dilation : start;
  return {first, std::min(start + (taps - 1) * dilation + 1, size)};
}

// An AVX2 copy beside the baseline one, picked when the library loads: the
// build targets every x86-64, and the passes gain most from wide vectors.
// GCC only (clang does not clone templates).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LAZYFUSE_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define LAZYFUSE_AVX2_CLONE
#endif

// A window's extent or stride: `Known` where fixed when compiled, else `runtime`.
template <int Known>
constexpr int64_t Fixed(int64_t runtime) {
  return Known > 0 ? Known : runtime;
}

// `n` outputs of one output row whose windows lie inside the plane; `first`
// is the first one's top left tap, element `first_at` of the plane. One pass
// over the outputs per tap, so the compiler vectorizes each pass: selects
// instead of branches, the outputs themselves the running maxima. The first
// tap's pass starts them, which is ATen's start (-inf, the first tap) after
// its first tap. Taps go row by row, so ties and NaN resolve as ATen's loop
// does.
template <typename T, int KH, int KW, int SW>
LAZYFUSE_AVX2_CLONE void InsideRun(const T* __restrict first,
                                   T* __restrict out,
                                   int64_t* __restrict index,
                                   int64_t first_at,
                                   int64_t n,
                                   int64_t iw,
                                   const Window& w) {
  const int64_t kh = Fixed<KH>(w.kh);
  const int64_t kw = Fixed<KW>(w.kw);
  const int64_t sw = Fixed<SW>(w.sw);
  for (int64_t k = 0; k < n; ++k) {
    out[k] = first[k * sw];
    index[k] = first_at + k * sw;
  }
  for (int64_t i = 0; i < kh; ++i) {
    for (int64_t j = i == 0 ? 1 : 0; j < kw; ++j) {
      const int64_t tap = i * w.dh * iw + j * w.dw;
      const T* taps = first + tap;
      const int64_t at = first_at + tap;
      for (int64_t k = 0; k < n; ++k) {
        const T v = taps[k * sw];
        const bool take = (v > out[k]) | (v != v);
        out[k] = take ? v : out[k];
        index[k] = take ? at + k * sw : index[k];
      }
    }
  }
}

// One plane. KH, KW: the window's size where known when compiled (0: `w`'s),
// so a window inside the plane is a fixed, unrolled loop; SW likewise its
// column stride.
template <typename T, int KH, int KW, int SW>
void PoolPlane(const T* in,
               T* out,
               int64_t* index,
               int64_t ih,
               int64_t iw,
               int64_t oh,
               int64_t ow,
               const Window& w) {
  const int64_t kh = Fixed<KH>(w.kh);
  const int64_t kw = Fixed<KW>(w.kw);
  // The columns whose windows lie inside the plane: [inside_from, inside_to).
  const int64_t inside_from = std::min(ow, (w.pw + w.sw - 1) / w.sw);
  const int64_t last_left = iw - 1 + w.pw - (kw - 1) * w.dw;  // of an inside window, plus pw
  const int64_t inside_to =
      std::max(inside_from, last_left < 0 ? int64_t{0} : std::min(ow, last_left / w.sw + 1));
  for (int64_t y = 0; y < oh; ++y) {
    const int64_t top = y * w.sh - w.ph;
    const Taps rows = TapsInside(top, kh, w.dh, ih);
    // A window over an edge, tap by tap.
    const auto edge = [&](int64_t x) {
      const Taps cols = TapsInside(x * w.sw - w.pw, kw, w.dw, iw);
      T best = -std::numeric_limits<T>::infinity();
      int64_t where = rows.first * iw + cols.first;
      for (int64_t r = rows.first; r < rows.end; r += w.dh) {
        for (int64_t c = cols.first; c < cols.end; c += w.dw) {
          Take(in, r * iw + c, best, where);
        }
      }
      out[y * ow + x] = best;
      index[y * ow + x] = where;
    };
    if (top < 0 || top + (kh - 1) * w.dh >= ih) {
      for (int64_t x = 0; x < ow; ++x) {
        edge(x);
      }
      continue;
    }
    for (int64_t x = 0; x < inside_from; ++x) {
      edge(x);
    }
    if (inside_to > inside_from) {
      const int64_t first_at = top * iw + inside_from * w.sw - w.pw;
      InsideRun<T, KH, KW, SW>(in + first_at,
                               out + y * ow + inside_from,
                               index + y * ow + inside_from,
                               first_at,
                               inside_to - inside_from,
                               iw,
                               w);
    }
    for (int64_t x = inside_to; x < ow; ++x) {
      edge(x);
    }
  }
}

template <typename T>
using PlaneFn = void (*)(const T*, T*, int64_t*, int64_t, int64_t, int64_t, int64_t, const Window&);

template <typename T>
PlaneFn<T> PlaneFor(const Window& w) {
  if (w.kh == 2 && w.kw == 2 && w.sw == 2) {
    return &PoolPlane<T, 2, 2, 2>;
  }
  if (w.kh == 3 && w.kw == 3 && w.sw == 2) {
    return &PoolPlane<T, 3, 3, 2>;
  }
  if (w.kh == 3 && w.kw == 3 && w.sw == 1) {
    return &PoolPlane<T, 3, 3, 1>;
  }
  return &PoolPlane<T, 0, 0, 0>;
}

// Outputs a thread takes at least: below that, threads cost more than the loop.
constexpr int64_t kOutputsPerTask = 4096;

template <typename T>
void Pool(const at::Tensor& in, at::Tensor& out, at::Tensor& index, const Window& w) {
  const int64_t planes = in.dim() == 4 ? in.size(0) * in.size(1) : in.size(0);
  const int64_t ih = in.size(-2);
  const int64_t iw = in.size(-1);
  const int64_t oh = out.size(-2);
  const int64_t ow = out.size(-1);
  const T* src = in.const_data_ptr<T>();
  T* dst = out.data_ptr<T>();
  int64_t* where = index.data_ptr<int64_t>();
  const PlaneFn<T> plane = PlaneFor<T>(w);
  const int64_t grain = std::max<int64_t>(1, kOutputsPerTask / std::max<int64_t>(oh * ow, 1));
  at::parallel_for(0, planes, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      plane(src + p * ih * iw, dst + p * oh * ow, where + p * oh * ow, ih, iw, oh, ow, w);
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> MaxPool2dWithIndicesStep(const at::Tensor& self,
                                                            c10::IntArrayRef kernel_size,
                                                            c10::IntArrayRef stride,
                                                            c10::IntArrayRef padding,
                                                            c10::IntArrayRef dilation,
                                                            bool ceil_mode,
                                                            bool own_loop) {
  const auto kernel = Read(kernel_size);
  const auto step = Read(stride, kernel);
  const auto pad = Read(padding);
  const auto spread = Read(dilation);
  const bool own =
      own_loop && self.device().is_cpu() &&
      (self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble) &&
      (self.dim() == 3 || self.dim() == 4) && self.numel() > 0 && self.is_contiguous() &&
      self.suggest_memory_format() == at::MemoryFormat::Contiguous && kernel && step && pad &&
      spread && kernel->first > 0 && kernel->second > 0 && step->first > 0 && step->second > 0 &&
      spread->first > 0 && spread->second > 0 && pad->first >= 0 && pad->second >= 0 &&
      pad->first <= kernel->first / 2 && pad->second <= kernel->second / 2;
  if (!own) {
    // ATen's call, and its errors.
    return at::_ops::max_pool2d_with_indices::call(
        self, kernel_size, stride, padding, dilation, ceil_mode);
  }
  const Window w{kernel->first,
                 kernel->second,
                 step->first,
                 step->second,
                 pad->first,
                 pad->second,
                 spread->first,
                 spread->second};
  std::vector<int64_t> sizes = self.sizes().vec();
  const size_t h = sizes.size() - 2;
  sizes[h] = OutputLength(sizes[h], w.kh, w.ph, w.sh, w.dh, ceil_mode);
  sizes[h + 1] = OutputLength(sizes[h + 1], w.kw, w.pw, w.sw, w.dw, ceil_mode);
  if (sizes[h] <= 0 || sizes[h + 1] <= 0) {
    return at::_ops::max_pool2d_with_indices::call(
        self, kernel_size, stride, padding, dilation, ceil_mode);
  }
  TORCH_LAZY_COUNTER("LazyFuseOwnMaxPool", 1);
  at::Tensor out = at::empty(sizes, self.options());
  at::Tensor index = at::empty(sizes, self.options().dtype(at::kLong));
  if (self.scalar_type() == at::kFloat) {
    Pool<float>(self, out, index, w);
  } else {
    Pool<double>(self, out, index, w);
  }
  return {std::move(out), std::move(index)};
}

}  // namespace lazyfuse
