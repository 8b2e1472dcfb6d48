// CUDA kernels of the nn family: softmax / log_softmax, cross entropy, layer
// norm, embedding, dropout, forward and backward. Kernels, then the kernel
// table entries (contracts: the nn section of src/backends/kernel_table.h;
// host side: src/backends/nn.cpp). All float math
// is f32 whatever the storage type; every reduction has a fixed order for a
// given shape (no float atomics), so replays are bit-identical.
//
// Row reductions run on a "team": one warp per row when the row is short
// (<= kWarpRowMax elements), else one block per row. Teams walk rows with a
// grid-stride loop; every thread of a team walks the same rows, so the
// block-wide barriers inside are uniform.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cmath>
#include <cstdint>

#include "src/backends/cuda/convert.cuh"
#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/cuda/launch.h"
#include "src/backends/kernel_table.h"
#include "src/backends/nn_formulas.h"
#include "src/core/kernel_errors.h"

namespace encore::cuda {

// The device-visible kernel error word of device `index` (runtime.cpp; NOTE
// [ Kernel error words ] in runtime.h, which brings Abseil and stays out of .cu files).
uint32_t* error_word(int index);

namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

constexpr int64_t kWarpRowMax = 1024;   // rows up to this long: one warp per row
constexpr int kTeamThreads = 256;       // threads per block of the row kernels
constexpr int kWarpsPerBlock = kTeamThreads / 32;
constexpr int kReduceThreads = 1024;    // the one-block cross-entropy mean

// ---- reductions ----

struct SumOp { template <typename V> __device__ V operator()(V a, V b) const { return a + b; } };
struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };

template <typename V, typename Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;   // every lane holds the result
}

// Block-wide reduction; every thread gets the result. shm: 32 slots.
// blockDim.x is a multiple of 32; all threads of the block must call it.
template <typename V, typename Op>
__device__ V block_reduce(V v, V identity, V* shm, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();   // shm may still be read by a previous call
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  v = lane < warps ? shm[lane] : identity;
  return warp_reduce(v, op);
}

// A row team: a warp (kWarp) or the whole block. rank/size: this thread's
// place in the team; row/rows_step: the grid-stride walk over rows.
template <bool kWarp>
struct Team {
  int rank, size;
  int64_t row, rows_step;
  float* shm;
  __device__ explicit Team(float* s) : shm(s) {
    if (kWarp) {
      rank = threadIdx.x & 31;
      size = 32;
      row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
      rows_step = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
    } else {
      rank = threadIdx.x;
      size = blockDim.x;
      row = blockIdx.x;
      rows_step = gridDim.x;
    }
  }
  __device__ float sum(float v) const { return kWarp ? warp_reduce(v, SumOp{}) : block_reduce(v, 0.0f, shm, SumOp{}); }
  __device__ float max(float v) const {
    return kWarp ? warp_reduce(v, MaxOp{}) : block_reduce(v, -INFINITY, shm, MaxOp{});
  }
};

// Blocks for a team kernel over `rows` rows (grid-stride beyond the cap).
unsigned team_blocks(int64_t rows, bool warp_rows) {
  const int64_t per_block = warp_rows ? kWarpsPerBlock : 1;
  const int64_t b = (rows + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// Grid-stride loop over [0, n).
#define ENCORE_GRID_LOOP(i, n)                                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);          \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- softmax / log_softmax ----

// Last-dim rows (inner == 1): max, sum of exp, then write. log_softmax is
// (x - max) - log(sum) (NOTE [ Log-sum-exp apart ] in kernel_table.h).
template <typename T, bool kLog, bool kWarp>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n) {
  kernel_prologue();
  __shared__ float shm[32];
  Team<kWarp> team(shm);
  for (int64_t r = team.row; r < rows; r += team.rows_step) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    float m = -INFINITY;
    for (int64_t k = team.rank; k < n; k += team.size) m = fmaxf(m, to_float(xr[k]));
    m = team.max(m);
    float s = 0;
    for (int64_t k = team.rank; k < n; k += team.size) s += expf(to_float(xr[k]) - m);
    s = team.sum(s);
    if (kLog) {
      const float log_sum = logf(s);
      for (int64_t k = team.rank; k < n; k += team.size) yr[k] = convert<T>((to_float(xr[k]) - m) - log_sum);
    } else {
      const float inv = 1.0f / s;
      for (int64_t k = team.rank; k < n; k += team.size) yr[k] = convert<T>(expf(to_float(xr[k]) - m) * inv);
    }
  }
}

// inner > 1: one thread per column (o, j); the n elements are `inner` apart,
// so a warp reads adjacent columns together.
template <typename T, bool kLog>
__global__ void softmax_cols_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                                    int64_t inner) {
  kernel_prologue();
  ENCORE_GRID_LOOP(t, outer * inner) {
    const int64_t o = t / inner, j = t - o * inner;
    const T* xc = x + o * n * inner + j;
    T* yc = y + o * n * inner + j;
    float m = -INFINITY, s = 0;
    for (int64_t k = 0; k < n; ++k) m = fmaxf(m, to_float(xc[k * inner]));
    for (int64_t k = 0; k < n; ++k) s += expf(to_float(xc[k * inner]) - m);
    const float log_sum = logf(s), inv = 1.0f / s;
    for (int64_t k = 0; k < n; ++k) {
      const float v = to_float(xc[k * inner]);
      yc[k * inner] = convert<T>(kLog ? (v - m) - log_sum : expf(v - m) * inv);
    }
  }
}

// softmax: gx = y * (g - sum(g * y)); log_softmax: gx = g - exp(y) * sum(g).
template <bool kLog>
__device__ __forceinline__ float softmax_grad(float g, float y, float s) {
  return kLog ? g - expf(y) * s : y * (g - s);
}

template <typename T, bool kLog, bool kWarp>
__global__ void softmax_backward_rows_kernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ gx,
                                             int64_t rows, int64_t n) {
  kernel_prologue();
  __shared__ float shm[32];
  Team<kWarp> team(shm);
  for (int64_t r = team.row; r < rows; r += team.rows_step) {
    const T* gr = g + r * n;
    const T* yr = y + r * n;
    float s = 0;
    for (int64_t k = team.rank; k < n; k += team.size) s += kLog ? to_float(gr[k]) : to_float(gr[k]) * to_float(yr[k]);
    s = team.sum(s);
    for (int64_t k = team.rank; k < n; k += team.size) gx[r * n + k] = convert<T>(softmax_grad<kLog>(to_float(gr[k]), to_float(yr[k]), s));
  }
}

template <typename T, bool kLog>
__global__ void softmax_backward_cols_kernel(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ gx,
                                             int64_t outer, int64_t n, int64_t inner) {
  kernel_prologue();
  ENCORE_GRID_LOOP(t, outer * inner) {
    const int64_t o = t / inner, j = t - o * inner, base = o * n * inner + j;
    float s = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      s += kLog ? to_float(g[i]) : to_float(g[i]) * to_float(y[i]);
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      gx[i] = convert<T>(softmax_grad<kLog>(to_float(g[i]), to_float(y[i]), s));
    }
  }
}

// ---- cross entropy ----

using backend::counted_class;   // NOTE [ Index checks ] in kernel_table.h

// stats[2r] = max of row r, stats[2r + 1] = log of its sum of exp(x - max)
// (NOTE [ Log-sum-exp apart ]).
template <typename T, bool kWarp>
__global__ void row_logsumexp_kernel(const T* __restrict__ x, float* __restrict__ stats, int64_t rows, int64_t n) {
  kernel_prologue();
  __shared__ float shm[32];
  Team<kWarp> team(shm);
  for (int64_t r = team.row; r < rows; r += team.rows_step) {
    const T* xr = x + r * n;
    float m = -INFINITY;
    for (int64_t k = team.rank; k < n; k += team.size) m = fmaxf(m, to_float(xr[k]));
    m = team.max(m);
    float s = 0;
    for (int64_t k = team.rank; k < n; k += team.size) s += expf(to_float(xr[k]) - m);
    s = team.sum(s);
    if (team.rank == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = logf(s);
    }
  }
}

// One block of kReduceThreads: the mean over counted rows of log(sum) -
// (x[target] - max), summed in f64 in a fixed order; stats[2 * rows] = count,
// loss = mean (NaN if none).
template <typename T, typename I>
__global__ void cross_entropy_mean_kernel(const T* __restrict__ x, const I* __restrict__ target,
                                          float* __restrict__ stats, T* __restrict__ loss, int64_t rows,
                                          int64_t classes, int64_t ignore_index, uint32_t* errors,
                                          uint32_t error_bit) {
  kernel_prologue();
  __shared__ double shm_total[32];
  __shared__ long long shm_count[32];
  double total = 0;
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = static_cast<int64_t>(target[r]);
    if (!counted_class(t, classes, ignore_index)) {
      if (t != ignore_index) atomicOr_system(errors, error_bit);   // NOTE [ Kernel error words ]
      continue;
    }
    const double shifted = static_cast<double>(to_float(x[r * classes + t])) - static_cast<double>(stats[2 * r]);
    total += static_cast<double>(stats[2 * r + 1]) - shifted;   // nothing rounds at the max's precision
    ++count;
  }
  total = block_reduce(total, 0.0, shm_total, SumOp{});
  count = block_reduce(count, 0LL, shm_count, SumOp{});
  if (threadIdx.x == 0) {
    stats[2 * rows] = static_cast<float>(count);
    loss[0] = convert<T>(static_cast<float>(total / static_cast<double>(count)));   // NaN when none counted
  }
}

// gx = (softmax - onehot(target)) * grad_loss / count on counted rows, else 0.
template <typename T, typename I>
__global__ void cross_entropy_backward_kernel(const T* __restrict__ x, const I* __restrict__ target,
                                              const float* __restrict__ stats, const T* __restrict__ grad_loss,
                                              T* __restrict__ gx, int64_t rows, int64_t classes,
                                              int64_t ignore_index) {
  kernel_prologue();
  const float count = stats[2 * rows];
  const float scale = count > 0 ? to_float(grad_loss[0]) / count : 0.0f;
  ENCORE_GRID_LOOP(i, rows * classes) {
    const int64_t r = i / classes, c = i - r * classes;
    const int64_t t = static_cast<int64_t>(target[r]);
    float v = 0;
    if (counted_class(t, classes, ignore_index)) {
      v = expf((to_float(x[i]) - stats[2 * r]) - stats[2 * r + 1]);
      if (c == t) v -= 1.0f;
      v *= scale;
    }
    gx[i] = convert<T>(v);
  }
}

// ---- layer norm ----

// NOTE [ Layer norm's shifted mean ] (kernel_table.h): rows are normalised
// as x - x[row, 0]; stats hold the mean of that.
template <typename T>
__device__ __forceinline__ float row_shift(const T* xr, int64_t cols) { return cols > 0 ? to_float(xr[0]) : 0.0f; }

template <typename T, bool kWarp>
__global__ void layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                  T* __restrict__ y, float* __restrict__ stats, int64_t rows, int64_t cols,
                                  float eps) {
  kernel_prologue();
  __shared__ float shm[32];
  Team<kWarp> team(shm);
  const float n = static_cast<float>(cols);
  for (int64_t r = team.row; r < rows; r += team.rows_step) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const float shift = row_shift(xr, cols);
    float s = 0;
    for (int64_t c = team.rank; c < cols; c += team.size) s += to_float(xr[c]) - shift;
    const float mean = team.sum(s) / n;
    float q = 0;   // two passes over the shifted row: no cancellation when |mean| >> std
    for (int64_t c = team.rank; c < cols; c += team.size) {
      const float d = to_float(xr[c]) - shift - mean;
      q += d * d;
    }
    const float rstd = 1.0f / sqrtf(team.sum(q) / n + eps);
    for (int64_t c = team.rank; c < cols; c += team.size) {
      float v = (to_float(xr[c]) - shift - mean) * rstd;
      if (w != nullptr) v *= to_float(w[c]);
      if (b != nullptr) v += to_float(b[c]);
      yr[c] = convert<T>(v);
    }
    if (team.rank == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

// With xh = (x - mean) * rstd and gw = g * w:
// dx = rstd * (gw - mean(gw) - xh * mean(gw * xh)).
// (x - mean is (x - x[row, 0]) - stats' mean, NOTE [ Layer norm's shifted mean ].)
template <typename T, bool kWarp>
__global__ void layer_norm_dx_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                                     const float* __restrict__ stats, T* __restrict__ dx, int64_t rows,
                                     int64_t cols) {
  kernel_prologue();
  __shared__ float shm[32];
  Team<kWarp> team(shm);
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = team.row; r < rows; r += team.rows_step) {
    const T* gr = g + r * cols;
    const T* xr = x + r * cols;
    const float mean = stats[2 * r], rstd = stats[2 * r + 1], shift = row_shift(xr, cols);
    float s1 = 0, s2 = 0;
    for (int64_t c = team.rank; c < cols; c += team.size) {
      const float gw = w != nullptr ? to_float(gr[c]) * to_float(w[c]) : to_float(gr[c]);
      s1 += gw;
      s2 += gw * ((to_float(xr[c]) - shift - mean) * rstd);
    }
    const float m1 = team.sum(s1) * inv_n;
    const float m2 = team.sum(s2) * inv_n;
    for (int64_t c = team.rank; c < cols; c += team.size) {
      const float gw = w != nullptr ? to_float(gr[c]) * to_float(w[c]) : to_float(gr[c]);
      const float xh = (to_float(xr[c]) - shift - mean) * rstd;
      dx[r * cols + c] = convert<T>(rstd * (gw - m1 - xh * m2));
    }
  }
}

// NOTE [ Deterministic layer_norm sums ] (kernel_table.h): block (x, y) sums
// columns [x * blockDim, ...) over the rows of chunk y, one thread per column.
template <typename T>
__global__ void layer_norm_partial_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                          const float* __restrict__ stats, float* __restrict__ partial,
                                          int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  kernel_prologue();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const float gv = to_float(g[r * cols + c]);
    const float shift = to_float(x[r * cols]);   // the row's x[row, 0]: cols > 0 here
    sw += gv * ((to_float(x[r * cols + c]) - shift - stats[2 * r]) * stats[2 * r + 1]);
    sb += gv;
  }
  partial[chunk * 2 * cols + c] = sw;
  partial[(chunk * 2 + 1) * cols + c] = sb;
}

template <typename T>
__global__ void layer_norm_combine_kernel(const float* __restrict__ partial, T* __restrict__ dw,
                                          T* __restrict__ db, int64_t cols, int64_t chunks) {
  kernel_prologue();
  ENCORE_GRID_LOOP(c, cols) {
    float sw = 0, sb = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      sw += partial[k * 2 * cols + c];
      sb += partial[(k * 2 + 1) * cols + c];
    }
    if (dw != nullptr) dw[c] = convert<T>(sw);
    if (db != nullptr) db[c] = convert<T>(sb);
  }
}

// ---- embedding ----

// E: an unsigned type of the element's size (a row copy is a byte copy).
template <typename E, typename I>
__global__ void embedding_kernel(const E* __restrict__ w, const I* __restrict__ idx, E* __restrict__ out,
                                 int64_t n, int64_t vocab, int64_t dim, uint32_t* errors, uint32_t error_bit) {
  kernel_prologue();
  ENCORE_GRID_LOOP(t, n * dim) {
    const int64_t i = t / dim, c = t - i * dim;
    const int64_t v = static_cast<int64_t>(idx[i]);
    const bool ok = v >= 0 && v < vocab;
    out[t] = ok ? w[v * dim + c] : E{0};   // NOTE [ Index checks ]
    if (!ok && c == 0) atomicOr_system(errors, error_bit);   // NOTE [ Kernel error words ]
  }
}

// Sort keys: the index, or vocab for a bad one (sorted last, never summed).
template <typename I>
__global__ void embedding_keys_kernel(const I* __restrict__ idx, uint32_t* __restrict__ keys,
                                      int32_t* __restrict__ pos, int64_t n, int64_t vocab) {
  kernel_prologue();
  ENCORE_GRID_LOOP(i, n) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    keys[i] = static_cast<uint32_t>(v >= 0 && v < vocab ? v : vocab);
    pos[i] = static_cast<int32_t>(i);
  }
}

// row_start[v] = first sorted position whose key >= v, for v in [0, vocab].
__global__ void embedding_row_start_kernel(const uint32_t* __restrict__ keys_sorted,
                                           int32_t* __restrict__ row_start, int64_t n, int64_t vocab) {
  kernel_prologue();
  ENCORE_GRID_LOOP(v, vocab + 1) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (static_cast<int64_t>(keys_sorted[mid]) < v) lo = mid + 1;
      else hi = mid;
    }
    row_start[v] = static_cast<int32_t>(lo);
  }
}

// grad_weight[v, c] = the gradients of row v added in position order in
// f32, rounded to T once (the CPU's order and rounding).
template <typename T>
__global__ void embedding_sum_kernel(const T* __restrict__ g, const int32_t* __restrict__ pos_sorted,
                                     const int32_t* __restrict__ row_start, T* __restrict__ gw, int64_t vocab,
                                     int64_t dim) {
  kernel_prologue();
  ENCORE_GRID_LOOP(t, vocab * dim) {
    const int64_t v = t / dim, c = t - v * dim;
    const int32_t end = row_start[v + 1];
    float acc = 0;
    for (int32_t j = row_start[v]; j < end; ++j) acc += to_float(g[static_cast<int64_t>(pos_sorted[j]) * dim + c]);
    gw[t] = convert<T>(acc);
  }
}

// ---- dropout ----

// keep = uniform(philox(offset + i, seed) word 0) >= p, as the CPU draws it:
// the same seed and offset give the same mask on both devices.
template <typename T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask,
                               const int64_t* __restrict__ state, int64_t n, float p, float scale) {
  kernel_prologue();
  const uint64_t seed = static_cast<uint64_t>(state[0]);
  const uint64_t offset = static_cast<uint64_t>(state[1]);
  ENCORE_GRID_LOOP(i, n) {
    const bool keep = backend::dropout_keep(seed, offset, i, p);
    y[i] = convert<T>(to_float(x[i]) * (keep ? scale : 0.0f));
    if (mask != nullptr) mask[i] = keep;
  }
}

// Runs after dropout_kernel on the same stream: every draw has read the offset.
__global__ void advance_offset_kernel(int64_t* state, int64_t n) {
  kernel_prologue();
  state[1] = static_cast<int64_t>(static_cast<uint64_t>(state[1]) + static_cast<uint64_t>(n));
}

template <typename T>
__global__ void dropout_backward_kernel(const T* __restrict__ g, const bool* __restrict__ mask, T* __restrict__ gx,
                                        int64_t n, float scale) {
  kernel_prologue();
  ENCORE_GRID_LOOP(i, n) gx[i] = convert<T>(to_float(g[i]) * (mask[i] ? scale : 0.0f));
}

// ---- dispatch helpers ----

// Calls f(std::bool_constant<b>{}) style: a runtime flag as a template argument.
template <bool B> struct Flag { static constexpr bool value = B; };
template <typename F>
void with_flag(bool b, F&& f) {
  if (b) f(Flag<true>{});
  else f(Flag<false>{});
}

bool warp_rows(int64_t n) { return n <= kWarpRowMax; }

// ---- kernel table entries ----

void softmax_launch(const SoftmaxArgs& a) {
  if (a.outer * a.n * a.inner == 0) return;
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    with_flag(a.log, [&](auto log) {
      if (a.inner > 1) {
        launch_kernel(softmax_cols_kernel<T, decltype(log)::value>, blocks_for(a.outer * a.inner), kThreads, 0, active_stream(),
            x, y, a.outer, a.n, a.inner);
      } else {
        with_flag(warp_rows(a.n), [&](auto warp) {
          launch_kernel(softmax_rows_kernel<T, decltype(log)::value, decltype(warp)::value>,
              team_blocks(a.outer, decltype(warp)::value), kTeamThreads, 0, active_stream(), x, y, a.outer, a.n);
        });
      }
    });
  });
  check_launch(a.log ? "log_softmax" : "softmax");
}

void softmax_backward_launch(const SoftmaxBackwardArgs& a) {
  if (a.outer * a.n * a.inner == 0) return;
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(a.g);
    const T* y = static_cast<const T*>(a.y);
    T* gx = static_cast<T*>(a.gx);
    with_flag(a.log, [&](auto log) {
      if (a.inner > 1) {
        launch_kernel(softmax_backward_cols_kernel<T, decltype(log)::value>,
            blocks_for(a.outer * a.inner), kThreads, 0, active_stream(), g, y, gx, a.outer, a.n, a.inner);
      } else {
        with_flag(warp_rows(a.n), [&](auto warp) {
          launch_kernel(softmax_backward_rows_kernel<T, decltype(log)::value, decltype(warp)::value>,
              team_blocks(a.outer, decltype(warp)::value), kTeamThreads, 0, active_stream(), g, y, gx, a.outer,
                                                                                                  a.n);
        });
      }
    });
  });
  check_launch(a.log ? "log_softmax_backward" : "softmax_backward");
}

void cross_entropy_launch(const CrossEntropyArgs& a) {
  with_float(a.dtype, [&](auto tag) {
    with_index(a.index, [&](auto itag) {
      using T = typename decltype(tag)::type;
      using I = typename decltype(itag)::type;
      const T* x = static_cast<const T*>(a.x);
      if (a.rows > 0) {
        with_flag(warp_rows(a.classes), [&](auto warp) {
          launch_kernel(row_logsumexp_kernel<T, decltype(warp)::value>,
              team_blocks(a.rows, decltype(warp)::value), kTeamThreads, 0, active_stream(), x, a.stats, a.rows,
                                                                                                 a.classes);
        });
      }
      // Runs even with no rows: it writes the count and a zero loss.
      launch_kernel(cross_entropy_mean_kernel<T, I>, 1, kReduceThreads, 0, active_stream(),
          x, static_cast<const I*>(a.target), a.stats, static_cast<T*>(a.loss), a.rows, a.classes,
          a.ignore_index, a.errors, static_cast<uint32_t>(KernelError::kClassIndex));
    });
  });
  check_launch("cross_entropy");
}

void cross_entropy_backward_launch(const CrossEntropyBackwardArgs& a) {
  if (a.rows * a.classes == 0) return;
  with_float(a.dtype, [&](auto tag) {
    with_index(a.index, [&](auto itag) {
      using T = typename decltype(tag)::type;
      using I = typename decltype(itag)::type;
      launch_kernel(cross_entropy_backward_kernel<T, I>, blocks_for(a.rows * a.classes), kThreads, 0, active_stream(),
          static_cast<const T*>(a.x), static_cast<const I*>(a.target), a.stats,
          static_cast<const T*>(a.grad_loss), static_cast<T*>(a.gx), a.rows, a.classes, a.ignore_index);
    });
  });
  check_launch("cross_entropy_backward");
}

void layer_norm_launch(const LayerNormArgs& a) {
  if (a.rows == 0) return;
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(a.x);
    const T* w = static_cast<const T*>(a.w);
    const T* b = static_cast<const T*>(a.b);
    T* y = static_cast<T*>(a.y);
    with_flag(warp_rows(a.cols), [&](auto warp) {
      launch_kernel(layer_norm_kernel<T, decltype(warp)::value>,
          team_blocks(a.rows, decltype(warp)::value), kTeamThreads, 0, active_stream(), x, w, b, y, a.stats,
                                                                                            a.rows, a.cols, a.eps);
    });
  });
  check_launch("layer_norm");
}

void layer_norm_backward_launch(const LayerNormBackwardArgs& a) {
  if (a.cols == 0) return;
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(a.g);
    const T* x = static_cast<const T*>(a.x);
    const T* w = static_cast<const T*>(a.w);
    if (a.dx != nullptr && a.rows > 0) {
      T* dx = static_cast<T*>(a.dx);
      with_flag(warp_rows(a.cols), [&](auto warp) {
        launch_kernel(layer_norm_dx_kernel<T, decltype(warp)::value>,
            team_blocks(a.rows, decltype(warp)::value), kTeamThreads, 0, active_stream(), g, x, w, a.stats, dx,
                                                                                              a.rows, a.cols);
      });
    }
    if (a.partial == nullptr) return;
    if (a.chunks > 0) {
      const dim3 grid(static_cast<unsigned>((a.cols + kThreads - 1) / kThreads), static_cast<unsigned>(a.chunks));
      launch_kernel(layer_norm_partial_kernel<T>, grid, kThreads, 0, active_stream(), g, x, a.stats, a.partial, a.rows,
                                                                            a.cols, a.rows_per_chunk);
    }
    launch_kernel(layer_norm_combine_kernel<T>, blocks_for(a.cols), kThreads, 0, active_stream(),
        a.partial, static_cast<T*>(a.dw), static_cast<T*>(a.db), a.cols, a.chunks);
  });
  check_launch("layer_norm_backward");
}

void embedding_launch(const EmbeddingArgs& a) {
  if (a.n * a.dim == 0) return;
  auto run = [&](auto etag) {
    using E = typename decltype(etag)::type;
    with_index(a.index, [&](auto itag) {
      using I = typename decltype(itag)::type;
      launch_kernel(embedding_kernel<E, I>, blocks_for(a.n * a.dim), kThreads, 0, active_stream(),
          static_cast<const E*>(a.w), static_cast<const I*>(a.idx), static_cast<E*>(a.out), a.n, a.vocab, a.dim,
          a.errors, static_cast<uint32_t>(KernelError::kEmbeddingIndex));
    });
  };
  switch (dtype_size(a.dtype)) {   // a row copy is a byte copy: any dtype of that size
    case 1: run(Tag<uint8_t>{}); break;
    case 2: run(Tag<uint16_t>{}); break;
    case 4: run(Tag<uint32_t>{}); break;
    default: run(Tag<uint64_t>{}); break;
  }
  check_launch("embedding");
}

// NOTE [ Deterministic embedding backward ]: a stable radix sort (CUB) of
// (index, position) pairs groups the positions of each row in increasing
// order; then one thread per grad_weight element adds its row's gradients
// in that order in f32 and rounds once to the storage type (the CPU's
// order and rounding). No float atomics; cost O(n + vocab) for the sort and
// O((n + vocab) * dim) for the sums. Scratch: one workspace
// (embedding_backward_workspace), carved by carve_embedding_scratch.

// Bits of the sort keys (0..vocab, vocab = bad index).
int embedding_sort_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= vocab) ++bits;   // keys are in [0, vocab]
  return bits;
}

// CUB's scratch bytes for sorting n keys; a host-only query (no device work).
size_t embedding_sort_temp_bytes(int64_t n, int end_bit) {
  size_t bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                        static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                        static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, end_bit),
        "embedding_backward: CUB sort scratch size");
  return bytes;
}

// The pieces of embedding_backward's workspace, in this order, each at a
// multiple of kScratchAlign bytes: keys, keys_sorted (u32 [n]), pos,
// pos_sorted (i32 [n]), row_start (i32 [vocab + 1]), then CUB's sort scratch
// (the rest).
struct EmbeddingScratch {
  uint32_t* keys;
  uint32_t* keys_sorted;
  int32_t* pos;
  int32_t* pos_sorted;
  int32_t* row_start;
  void* sort_temp;
  size_t sort_temp_bytes;
};

constexpr int64_t kScratchAlign = 256;   // as cudaMalloc and the capture arena align
int64_t align_up(int64_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }
// Bytes of the workspace before the sort scratch.
int64_t sort_temp_offset(int64_t n, int64_t vocab) { return 4 * align_up(4 * n) + align_up(4 * (vocab + 1)); }

EmbeddingScratch carve_embedding_scratch(const EmbeddingBackwardArgs& a) {
  char* base = static_cast<char*>(a.workspace);
  const int64_t column = align_up(4 * a.n);
  const int64_t temp = sort_temp_offset(a.n, a.vocab);
  return {reinterpret_cast<uint32_t*>(base),
          reinterpret_cast<uint32_t*>(base + column),
          reinterpret_cast<int32_t*>(base + 2 * column),
          reinterpret_cast<int32_t*>(base + 3 * column),
          reinterpret_cast<int32_t*>(base + 4 * column),
          base + temp,
          static_cast<size_t>(a.workspace_bytes - temp)};
}

int64_t embedding_backward_workspace(const EmbeddingBackwardArgs& a, const char** why) {
  if (a.n >= (int64_t{1} << 31) || a.vocab >= (int64_t{1} << 31) - 1) {
    *why = "exceed the 32-bit sort";
    return -1;
  }
  const size_t temp = a.n > 0 ? embedding_sort_temp_bytes(a.n, embedding_sort_bits(a.vocab)) : 0;
  return sort_temp_offset(a.n, a.vocab) + static_cast<int64_t>(temp);
}

void embedding_backward_launch(const EmbeddingBackwardArgs& a) {
  if (a.vocab * a.dim == 0) return;
  const cudaStream_t s = active_stream();
  const EmbeddingScratch w = carve_embedding_scratch(a);
  if (a.n > 0) {
    with_index(a.index, [&](auto itag) {
      using I = typename decltype(itag)::type;
      launch_kernel(embedding_keys_kernel<I>, blocks_for(a.n), kThreads, 0, s, static_cast<const I*>(a.idx), w.keys,
                    w.pos, a.n, a.vocab);
    });
    size_t temp_bytes = w.sort_temp_bytes;
    check(cub::DeviceRadixSort::SortPairs(w.sort_temp, temp_bytes, w.keys, w.keys_sorted, w.pos, w.pos_sorted,
                                          static_cast<int>(a.n), 0, embedding_sort_bits(a.vocab), s),
          "embedding_backward: CUB sort");
  }
  launch_kernel(embedding_row_start_kernel, blocks_for(a.vocab + 1), kThreads, 0, s, w.keys_sorted, w.row_start,
                a.n, a.vocab);
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(embedding_sum_kernel<T>, blocks_for(a.vocab * a.dim), kThreads, 0, s,
        static_cast<const T*>(a.g), w.pos_sorted, w.row_start, static_cast<T*>(a.gw), a.vocab, a.dim);
  });
  check_launch("embedding_backward");
}

void dropout_launch(const DropoutArgs& a) {
  if (a.n == 0) return;
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(dropout_kernel<T>, blocks_for(a.n), kThreads, 0, active_stream(),
        static_cast<const T*>(a.x), static_cast<T*>(a.y), a.mask, a.state, a.n, a.p, a.scale);
  });
  launch_kernel(advance_offset_kernel, 1, 1, 0, active_stream(), a.state, a.n);
  check_launch("dropout");
}

void dropout_backward_launch(const DropoutBackwardArgs& a) {
  if (a.n == 0) return;
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(dropout_backward_kernel<T>, blocks_for(a.n), kThreads, 0, active_stream(),
        static_cast<const T*>(a.g), a.mask, static_cast<T*>(a.gx), a.n, a.scale);
  });
  check_launch("dropout_backward");
}

}  // namespace

extern const NnKernels kNn = {
    .softmax = kernel<&softmax_launch>(),
    .softmax_backward = kernel<&softmax_backward_launch>(),
    .cross_entropy = kernel<&cross_entropy_launch>(),
    .cross_entropy_backward = kernel<&cross_entropy_backward_launch>(),
    .layer_norm = kernel<&layer_norm_launch>(),
    .layer_norm_backward = kernel<&layer_norm_backward_launch>(),
    .embedding = kernel<&embedding_launch>(),
    .embedding_backward = kernel<&embedding_backward_launch>(),
    .dropout = kernel<&dropout_launch>(),
    .dropout_backward = kernel<&dropout_backward_launch>(),
    .layer_norm_max_chunks = 256,   // grid y of layer_norm_partial_kernel
    .embedding_backward_workspace = &embedding_backward_workspace,
    .error_word = &error_word,
};

}  // namespace encore::cuda
