// CUDA kernels of the index family: gather, the deterministic scatter_add,
// topk and multinomial (contracts: the index section of
// src/backends/kernel_table.h, NOTE [ Index geometry ]). No atomics: a
// scatter runs one thread per line (every coordinate but dim fixed), which
// walks its index entries in order, exactly as the CPU does, so the sums
// are the CPU's bit for bit. topk and multinomial run one thread per line
// or row with the CPU's order and f32 sums: their results equal the CPU's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/kernel_table.h"
#include "src/backends/nn_formulas.h"
#include "src/core/kernel_errors.h"

namespace encore::cuda {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

#define ENCORE_GRID_LOOP(i, n)                                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);          \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

struct Offsets { int64_t index, iter, addr_rest; };

__device__ __forceinline__ Offsets offsets_of(const IndexGeom& g, int64_t i) {
  Offsets o{0, 0, 0};
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t c = i % g.shape[d];
    i /= g.shape[d];
    o.index += c * g.index_stride[d];
    o.iter += c * g.iter_stride[d];
    if (d != g.dim) o.addr_rest += c * g.addr_stride[d];
  }
  return o;
}

// ---- gather ----

template <typename B, typename I>
__global__ void gather_kernel(GatherArgs a) {
  kernel_prologue();
  const IndexGeom& g = a.g;
  const I* index = static_cast<const I*>(a.index);
  B* out = static_cast<B*>(a.out);
  const B* in = static_cast<const B*>(a.in);
  const int64_t addr_dim_stride = g.ndim > 0 ? g.addr_stride[g.dim] : 0;
  ENCORE_GRID_LOOP(i, g.numel) {
    const Offsets o = offsets_of(g, i);
    const int64_t j = static_cast<int64_t>(index[o.index]);
    const bool ok = j >= 0 && j < g.addr_dim_size;
    if (!ok && a.errors != nullptr) {
      atomicOr_system(a.errors, static_cast<uint32_t>(KernelError::kGatherIndex));   // NOTE [ Kernel error words ]
    }
    out[o.iter] = ok ? in[o.addr_rest + j * addr_dim_stride] : B{0};
  }
}

// ---- scatter_add ----

template <typename T>
__device__ __forceinline__ T add_value(T acc, T v) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(acc) + static_cast<U>(v));
  } else {
    return convert<T>(__fadd_rn(to_float(acc), to_float(v)));
  }
}

template <typename T, typename I>
__global__ void scatter_add_kernel(ScatterAddArgs a, int64_t lines, int64_t len) {
  kernel_prologue();
  const IndexGeom& g = a.g;
  const I* index = static_cast<const I*>(a.index);
  const T* src = static_cast<const T*>(a.src);
  T* out = static_cast<T*>(a.out);
  const int64_t index_step = g.ndim > 0 ? g.index_stride[g.dim] : 0;
  const int64_t iter_step = g.ndim > 0 ? g.iter_stride[g.dim] : 0;
  const int64_t addr_step = g.ndim > 0 ? g.addr_stride[g.dim] : 0;
  ENCORE_GRID_LOOP(line, lines) {
    int64_t rest = line, ix = 0, it = 0, ad = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      if (d == g.dim) continue;
      const int64_t c = rest % g.shape[d];
      rest /= g.shape[d];
      ix += c * g.index_stride[d];
      it += c * g.iter_stride[d];
      ad += c * g.addr_stride[d];
    }
    for (int64_t k = 0; k < len; ++k) {
      const int64_t j = static_cast<int64_t>(index[ix + k * index_step]);
      if (j < 0 || j >= g.addr_dim_size) {
        if (a.errors != nullptr) atomicOr_system(a.errors, static_cast<uint32_t>(KernelError::kScatterIndex));
        continue;
      }
      T& dst = out[ad + j * addr_step];
      dst = add_value(dst, src[it + k * iter_step]);
    }
  }
}

// ---- topk: one thread per line, an insertion into the k best so far ----

template <typename C>
__device__ __forceinline__ bool topk_before(C va, int64_t ia, C vb, int64_t ib, bool largest) {
  if constexpr (std::is_floating_point_v<C>) {
    const bool na = isnan(va), nb = isnan(vb);
    if (na || nb) {
      if (na && nb) return ia < ib;
      return largest ? na : nb;
    }
  }
  if (va != vb) return largest ? va > vb : va < vb;
  return ia < ib;
}

template <typename T>
__global__ void topk_kernel(TopkArgs a) {
  kernel_prologue();
  const T* x = static_cast<const T*>(a.x);
  T* values = static_cast<T*>(a.values);
  ENCORE_GRID_LOOP(line, a.outer * a.inner) {
    const int64_t o = line / a.inner, r = line - o * a.inner;
    const T* row = x + o * a.n * a.inner + r;
    T* vals = values + o * a.k * a.inner + r;
    int64_t* idx = a.indices + o * a.k * a.inner + r;
    int64_t count = 0;
    for (int64_t j = 0; j < a.n; ++j) {
      const T v = row[j * a.inner];
      const auto cv = to_compute(v);
      if (count == a.k && !topk_before(cv, j, to_compute(vals[(a.k - 1) * a.inner]), idx[(a.k - 1) * a.inner],
                                        a.largest)) {
        continue;
      }
      int64_t at = count < a.k ? count++ : a.k - 1;
      while (at > 0 && topk_before(cv, j, to_compute(vals[(at - 1) * a.inner]), idx[(at - 1) * a.inner], a.largest)) {
        vals[at * a.inner] = vals[(at - 1) * a.inner];
        idx[at * a.inner] = idx[(at - 1) * a.inner];
        --at;
      }
      vals[at * a.inner] = v;
      idx[at * a.inner] = j;
    }
  }
}

// ---- multinomial: one thread per row, the CPU's scan (backend::multinomial_category) ----

template <typename T>
__device__ bool valid_row(const T* w, int64_t classes, int64_t samples, bool replacement) {
  int64_t positive = 0;
  for (int64_t c = 0; c < classes; ++c) {
    const float v = to_float(w[c]);
    if (!(v >= 0.0f) || isinf(v)) return false;
    positive += v > 0.0f;
  }
  return positive > 0 && (replacement || positive >= samples);
}

template <typename T>
__global__ void multinomial_kernel(MultinomialArgs a) {
  kernel_prologue();
  const T* probs = static_cast<const T*>(a.probs);
  const uint64_t seed = static_cast<uint64_t>(a.state[0]);
  const uint64_t offset = static_cast<uint64_t>(a.state[1]);
  ENCORE_GRID_LOOP(r, a.rows) {
    int64_t* out = a.out + r * a.samples;
    if (!valid_row(probs + r * a.classes, a.classes, a.samples, a.replacement) && a.errors != nullptr) {
      atomicOr_system(a.errors, static_cast<uint32_t>(KernelError::kMultinomialProbs));
    }
    for (int64_t s = 0; s < a.samples; ++s) {
      const float u = multinomial_uniform(seed, offset, r, a.samples, s);
      const T* w = probs + r * a.classes;
      out[s] = multinomial_category([w](int64_t c) { return to_float(w[c]); }, a.classes, u, out,
                                    a.replacement ? 0 : s);
    }
  }
}

// Runs after multinomial_kernel on the same stream: every draw has read the offset.
__global__ void advance_offset_kernel(int64_t* state, int64_t n) {
  kernel_prologue();
  state[1] = static_cast<int64_t>(static_cast<uint64_t>(state[1]) + static_cast<uint64_t>(n));
}

// ---- launchers ----

void gather_launch(const GatherArgs& a) {
  if (a.g.numel == 0) return;
  visit_dtype(a.dtype, [&](auto tag) {
    with_index(a.index_dtype, [&](auto itag) {
      using B = Bits<typename decltype(tag)::type>;
      using I = typename decltype(itag)::type;
      launch_kernel(gather_kernel<B, I>, blocks_for(a.g.numel), kThreads, 0, active_stream(), a);
    });
  });
  check_launch("gather");
}

void scatter_add_launch(const ScatterAddArgs& a) {
  if (a.g.numel == 0) return;
  const int64_t len = a.g.ndim > 0 ? a.g.shape[a.g.dim] : 1;
  const int64_t lines = a.g.numel / len;
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      with_index(a.index_dtype, [&](auto itag) {
        using I = typename decltype(itag)::type;
        launch_kernel(scatter_add_kernel<T, I>, blocks_for(lines), kThreads, 0, active_stream(), a, lines, len);
      });
    }
  });
  check_launch("scatter_add");
}

void topk_launch(const TopkArgs& a) {
  const int64_t lines = a.outer * a.inner;
  if (lines == 0 || a.k == 0) return;
  visit_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      launch_kernel(topk_kernel<T>, blocks_for(lines), kThreads, 0, active_stream(), a);
    }
  });
  check_launch("topk");
}

void multinomial_launch(const MultinomialArgs& a) {
  if (a.rows * a.samples > 0) {
    visit_dtype(a.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_half_v<T> || std::is_same_v<T, float>) {
        launch_kernel(multinomial_kernel<T>, blocks_for(a.rows), kThreads, 0, active_stream(), a);
      }
    });
  }
  launch_kernel(advance_offset_kernel, 1, 1, 0, active_stream(), a.state, a.rows * a.samples);
  check_launch("multinomial");
}

}  // namespace

extern const IndexKernels kIndex = {kernel<&gather_launch>(), kernel<&scatter_add_launch>(), kernel<&topk_launch>(),
                                    kernel<&multinomial_launch>()};

}  // namespace encore::cuda
