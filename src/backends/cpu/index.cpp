// The CPU kernels of the index family: gather, the deterministic
// scatter_add, topk and multinomial (contracts: the index section of
// src/backends/kernel_table.h, NOTE [ Index geometry ]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/kernel_table.h"
#include "src/backends/nn_formulas.h"
#include "src/core/kernel_errors.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// The same-size unsigned integer of a storage type: gather moves bytes.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 1, uint8_t,
                                std::conditional_t<sizeof(T) == 2, uint16_t,
                                                   std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

// Offsets (elements) of flat position i of g's shape in the index, iter and
// addr tensors; the coordinate along dim in *along.
struct Offsets { int64_t index, iter, addr_rest, along; };

inline Offsets offsets_of(const IndexGeom& g, int64_t i) {
  Offsets o{0, 0, 0, 0};
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t c = i % g.shape[d];
    i /= g.shape[d];
    o.index += c * g.index_stride[d];
    o.iter += c * g.iter_stride[d];
    if (d == g.dim) o.along = c;
    else o.addr_rest += c * g.addr_stride[d];
  }
  return o;
}

// Walks flat positions of g's shape in row-major order from a start, keeping
// the three offsets (and the coordinates) up to date without divisions.
struct Odometer {
  const IndexGeom& g;
  int64_t c[kLayoutMaxDims];
  Offsets o;
  Odometer(const IndexGeom& geom, int64_t start) : g(geom), o(offsets_of(geom, start)) {
    for (int d = g.ndim - 1; d >= 0; --d) {
      c[d] = start % g.shape[d];
      start /= g.shape[d];
    }
  }
  // Moves `run` positions along the last dim (run <= what is left of it), then carries.
  void skip(int64_t run) {
    const int d = g.ndim - 1;
    c[d] += run - 1;
    o.index += (run - 1) * g.index_stride[d];
    o.iter += (run - 1) * g.iter_stride[d];
    if (d != g.dim) o.addr_rest += (run - 1) * g.addr_stride[d];
    next();
  }
  void next() {
    for (int d = g.ndim - 1; d >= 0; --d) {
      o.index += g.index_stride[d];
      o.iter += g.iter_stride[d];
      if (d != g.dim) o.addr_rest += g.addr_stride[d];
      if (++c[d] < g.shape[d]) return;
      o.index -= g.shape[d] * g.index_stride[d];
      o.iter -= g.shape[d] * g.iter_stride[d];
      if (d != g.dim) o.addr_rest -= g.shape[d] * g.addr_stride[d];
      c[d] = 0;
    }
  }
};

// ---- gather ----

template <typename T, typename I>
void gather_loop(const GatherArgs& a) {
  using B = Bits<T>;
  const IndexGeom& g = a.g;
  const I* index = static_cast<const I*>(a.index);
  B* out = static_cast<B*>(a.out);
  const B* in = static_cast<const B*>(a.in);
  const int64_t addr_dim_stride = g.ndim > 0 ? g.addr_stride[g.dim] : 0;
  if (g.ndim == 0) {   // one element
    const int64_t j = static_cast<int64_t>(index[0]);
    if (j != 0) report_kernel_error(KernelError::kGatherIndex);
    out[0] = j == 0 ? in[0] : B{0};
    return;
  }
  const int last = g.ndim - 1;
  const int64_t is = g.index_stride[last], ts = g.iter_stride[last];
  const int64_t as = last == g.dim ? 0 : g.addr_stride[last];   // along dim the index moves the address
  parallel_for(g.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    Odometer walk(g, b);
    for (int64_t i = b; i < e;) {   // runs along the last dim
      const int64_t run = std::min(e - i, g.shape[last] - walk.c[last]);
      const Offsets& o = walk.o;
      bool bad = false;
      if (is == 0 && last != g.dim) {   // an expanded index (index_select): one source row per run
        const int64_t j = static_cast<int64_t>(index[o.index]);
        bad = !(j >= 0 && j < g.addr_dim_size);
        const B* row = in + o.addr_rest + (bad ? 0 : j) * addr_dim_stride;
        for (int64_t r = 0; r < run; ++r) out[o.iter + r * ts] = bad ? B{0} : row[r * as];
      } else {
      for (int64_t r = 0; r < run; ++r) {
        const int64_t j = static_cast<int64_t>(index[o.index + r * is]);
        const bool ok = j >= 0 && j < g.addr_dim_size;
        bad |= !ok;
        out[o.iter + r * ts] = ok ? in[o.addr_rest + r * as + j * addr_dim_stride] : B{0};
      }
      }
      if (bad) report_kernel_error(KernelError::kGatherIndex);   // NOTE [ Index checks ]
      i += run;
      walk.skip(run);
    }
  });
}

// ---- scatter_add: one line (every coordinate but dim fixed) at a time ----

template <typename T>
inline T add_value(T acc, T v) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));   // wraps
  } else {
    return T(static_cast<float>(acc) + static_cast<float>(v));
  }
}

template <typename T, typename I>
void scatter_add_loop(const ScatterAddArgs& a) {
  const IndexGeom& g = a.g;
  if (g.numel == 0) return;
  const I* index = static_cast<const I*>(a.index);
  const T* src = static_cast<const T*>(a.src);
  T* out = static_cast<T*>(a.out);
  const int64_t len = g.ndim > 0 ? g.shape[g.dim] : 1;
  const int64_t lines = g.numel / len;
  const int64_t index_step = g.ndim > 0 ? g.index_stride[g.dim] : 0;
  const int64_t iter_step = g.ndim > 0 ? g.iter_stride[g.dim] : 0;
  const int64_t addr_step = g.ndim > 0 ? g.addr_stride[g.dim] : 0;
  // Lines (every coordinate but dim fixed, row-major) in groups that run
  // along the innermost other dim `dl`, so a group's line offsets step by
  // that dim's strides. Each line's entries go in k order (an element's adds
  // all come from its one line), k outermost within a group so that
  // neighbouring lines' entries are read together.
  int dl = g.ndim - 1;
  if (dl == g.dim) --dl;
  const int64_t run_len = dl >= 0 ? g.shape[dl] : 1;
  const int64_t lx = dl >= 0 ? g.index_stride[dl] : 0, lt = dl >= 0 ? g.iter_stride[dl] : 0;
  const int64_t la = dl >= 0 ? g.addr_stride[dl] : 0;
  parallel_for(lines, std::max<int64_t>(1, kGrainElementwise / len), [&](int64_t b, int64_t e) {
    for (int64_t gb = b; gb < e;) {
      // The group's first line: its coordinates, coordinate 0 along dim.
      int64_t rest = gb, ix = 0, it = 0, ad = 0, at_dl = 0;
      for (int d = g.ndim - 1; d >= 0; --d) {
        if (d == g.dim) continue;
        const int64_t c = rest % g.shape[d];
        rest /= g.shape[d];
        if (d == dl) at_dl = c;
        ix += c * g.index_stride[d];
        it += c * g.iter_stride[d];
        ad += c * g.addr_stride[d];
      }
      const int64_t count = std::min(e - gb, run_len - at_dl);
      bool bad = false;
      for (int64_t k = 0; k < len; ++k) {
        const I* ip = index + ix + k * index_step;
        const T* sp = src + it + k * iter_step;
        if (lx == 0) {   // an expanded index (index_select's backward): one destination row per k
          const int64_t j = static_cast<int64_t>(ip[0]);
          if (j < 0 || j >= g.addr_dim_size) {
            bad = true;
            continue;
          }
          T* row = out + ad + j * addr_step;
          for (int64_t l = 0; l < count; ++l) row[l * la] = add_value(row[l * la], sp[l * lt]);
          continue;
        }
        for (int64_t l = 0; l < count; ++l) {
          const int64_t j = static_cast<int64_t>(ip[l * lx]);
          if (j < 0 || j >= g.addr_dim_size) {
            bad = true;
            continue;
          }
          T& dst = out[ad + l * la + j * addr_step];
          dst = add_value(dst, sp[l * lt]);
        }
      }
      if (bad) report_kernel_error(KernelError::kScatterIndex);   // NOTE [ Index checks ]
      gb += count;
    }
  });
}

template <typename T, typename I>
struct GatherEntry {
  static void run(const GatherArgs& a) { gather_loop<T, I>(a); }
};
template <typename T, typename I>
struct ScatterAddEntry {
  static void run(const ScatterAddArgs& a) { scatter_add_loop<T, I>(a); }
};

KernelThunk pick_gather(const GatherArgs& a) {
  return dispatch_all(a.dtype, "gather", [&](auto tag) -> KernelThunk {
    using T = typename decltype(tag)::type;
    return a.index_dtype == DType::kInt32 ? thunk_of<&GatherEntry<T, int32_t>::run>()
                                          : thunk_of<&GatherEntry<T, int64_t>::run>();
  });
}

KernelThunk pick_scatter_add(const ScatterAddArgs& a) {
  return dispatch_numeric(a.dtype, "scatter_add", [&](auto tag) -> KernelThunk {
    using T = typename decltype(tag)::type;
    return a.index_dtype == DType::kInt32 ? thunk_of<&ScatterAddEntry<T, int32_t>::run>()
                                          : thunk_of<&ScatterAddEntry<T, int64_t>::run>();
  });
}

// ---- topk ----

// True when (va, ia) comes before (vb, ib) in the output order (TopkArgs).
template <typename C>
inline bool topk_before(C va, int64_t ia, C vb, int64_t ib, bool largest) {
  if constexpr (std::is_floating_point_v<C>) {
    const bool na = std::isnan(va), nb = std::isnan(vb);
    if (na || nb) {
      if (na && nb) return ia < ib;
      return largest ? na : nb;   // NaN counts as the largest value
    }
  }
  if (va != vb) return largest ? va > vb : va < vb;
  return ia < ib;
}

template <typename T>
void topk_loop(const TopkArgs& a) {
  using C = compute_t<T>;
  const T* x = static_cast<const T*>(a.x);
  T* values = static_cast<T*>(a.values);
  const int64_t lines = a.outer * a.inner;
  parallel_for(lines, std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, a.n)), [&](int64_t b, int64_t e) {
    std::vector<std::pair<C, int64_t>> row(static_cast<size_t>(a.n));
    for (int64_t line = b; line < e; ++line) {
      const int64_t o = line / a.inner, r = line - o * a.inner;
      for (int64_t j = 0; j < a.n; ++j) row[j] = {C(x[(o * a.n + j) * a.inner + r]), j};
      std::partial_sort(row.begin(), row.begin() + a.k, row.end(), [&](const auto& p, const auto& q) {
        return topk_before(p.first, p.second, q.first, q.second, a.largest);
      });
      for (int64_t j = 0; j < a.k; ++j) {
        const int64_t at = (o * a.k + j) * a.inner + r;
        values[at] = x[(o * a.n + row[j].second) * a.inner + r];
        a.indices[at] = row[j].second;
      }
    }
  });
}

template <typename T>
struct TopkEntry {
  static void run(const TopkArgs& a) { topk_loop<T>(a); }
};

// ---- multinomial ----

// Whether a row is a distribution MultinomialArgs can draw from.
template <typename T>
bool valid_row(const T* w, int64_t classes, int64_t samples, bool replacement) {
  int64_t positive = 0;
  for (int64_t c = 0; c < classes; ++c) {
    const float v = static_cast<float>(w[c]);
    if (!(v >= 0.0f) || std::isinf(v)) return false;
    positive += v > 0.0f;
  }
  return positive > 0 && (replacement || positive >= samples);
}

template <typename T>
void multinomial_loop(const MultinomialArgs& a) {
  const T* probs = static_cast<const T*>(a.probs);
  const uint64_t seed = static_cast<uint64_t>(a.state[0]);
  const uint64_t offset = static_cast<uint64_t>(a.state[1]);
  parallel_for(a.rows, std::max<int64_t>(1, kGrainElementwise / std::max<int64_t>(1, a.classes * a.samples)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   int64_t* out = a.out + r * a.samples;
                   if (!valid_row(probs + r * a.classes, a.classes, a.samples, a.replacement)) {
                     report_kernel_error(KernelError::kMultinomialProbs);   // NOTE [ Index checks ]
                   }
                   for (int64_t s = 0; s < a.samples; ++s) {
                     const float u = multinomial_uniform(seed, offset, r, a.samples, s);
                     const T* w = probs + r * a.classes;
                     out[s] = multinomial_category([w](int64_t c) { return static_cast<float>(w[c]); }, a.classes,
                                                   u, out, a.replacement ? 0 : s);
                   }
                 }
               });
  a.state[1] = static_cast<int64_t>(offset + static_cast<uint64_t>(a.rows * a.samples));
}

template <typename T>
struct MultinomialEntry {
  static void run(const MultinomialArgs& a) { multinomial_loop<T>(a); }
};

}  // namespace

extern const IndexKernels kIndex = {
    .gather = specialized_kernel<&pick_gather>(),
    .scatter_add = specialized_kernel<&pick_scatter_add>(),
    .topk = specialized_kernel<&pick_numeric<TopkEntry, TopkArgs>>(),
    .multinomial = specialized_kernel<&pick_float<MultinomialEntry, MultinomialArgs>>(),
};

}  // namespace encore::cpu
