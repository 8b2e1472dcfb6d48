// The CPU kernels of the cnn family (contracts: the cnn section of
// src/backends/kernel_table.h; host side: src/backends/cnn.cpp): 2-D
// convolutions through oneDNN, pooling and batch normalization as plain loops
// over planes and channels.
//
// NOTE [ CPU convolution: oneDNN ]
// Chosen by measurement (bench/conv_bench.cpp, figures in bench/RESULTS.md,
// "CPU convolution"): one thread, batch 32, 3x3 layers of a CIFAR-size and a
// digits-size network. As Debian ships it, OpenBLAS 0.3.21's DYNAMIC_ARCH
// does not know this machine's CPU model and runs its "Prescott" (SSE3)
// kernels; im2col/col2im onto that sgemm summed 2.4x oneDNN's time over the
// CIFAR shapes (1.3x to 3.5x per pass; oneDNN slower only on the digits
// 1->16 weight gradient, 0.88x). oneDNN picks its JIT code from CPUID
// (AVX-512 here), so its speed does not depend on that table. With
// OPENBLAS_CORETYPE=SkylakeX forced by hand, im2col was 8% faster than
// oneDNN over the CIFAR shapes (0.67x to 1.16x per pass) and 1.3x to 2.4x
// faster on the tiny digits layers, where oneDNN's per-call overhead shows.
// encore does not set OpenBLAS's core type, so oneDNN is the faster choice
// for what users run. The tensors keep PyTorch's plain NCHW / OIHW layouts
// between ops, but each primitive is made with format_tag::any, so oneDNN
// picks the layout its direct JIT kernels want (nChw16c, OIhw16i16o, ...),
// and the operands it chose otherwise are reordered into and out of the
// launch's workspace. Plain layouts throughout would make oneDNN fall back
// to im2col + GEMM ("gemm:jit"): measured 3.5x (forward) to 5.6x (data
// gradient) slower on 16->16 channels at 32x32 than the blocked kernels
// libtorch reaches (DNNL_VERBOSE, bench/peers/torch_cpu_steps).
// - Plans: one oneDNN primitive per (geometry, pass, bias, OpenMP thread
//   count), built by CnnKernels::plan at the first eager call and cached for
//   the life of the process; its id is ConvArgs::plan, so a captured launch
//   carries the same id and a replay calls the same primitive (with the
//   work split of the thread count it was captured at).
// - No allocation in the kernel: the scratchpad is user-managed
//   (scratchpad_mode::user) and, with the reordered operands after it, sized
//   by plan and handed in as the launch's workspace tensor (from the arena
//   under capture); the memory objects are
//   made with the plan and only re-pointed (set_data_handle) at each launch;
//   execution goes through the C API (no std::unordered_map of arguments).
// - Deterministic: oneDNN's CPU primitives split work statically over the
//   OpenMP threads (its reductions, bias and weight gradients, in a fixed
//   order), so a thread count gives the same bits every time.
// - One launch at a time: the plan's memory objects are re-pointed per
//   launch, so executions take one mutex (each is parallel inside).
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "encore/error.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/cpu/workers.h"
#include "src/backends/cnn_formulas.h"
#include "src/backends/kernel_table.h"

namespace encore::cpu {
namespace {

using backend::AvgPoolArgs;
using backend::AvgPoolMode;
using backend::BatchNormArgs;
using backend::BatchNormBackwardArgs;
using backend::ConvArgs;
using backend::ConvGeom;
using backend::ConvPass;
using backend::MaxPoolArgs;
using backend::MaxPoolBackwardArgs;
using backend::MaxTap;
using backend::PoolGeom;

// Units per parallel chunk so that a chunk holds about `grain` elements of work.
int64_t grain_for(int64_t work_per_unit, int64_t grain) {
  return std::max<int64_t>(1, grain / std::max<int64_t>(1, work_per_unit));
}

// ---- convolution: oneDNN ----

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// A plan is per geometry, pass, bias and OpenMP thread count: oneDNN fixes
// a primitive's work split for omp_get_max_threads() when it is made and
// keeps it at every execution, so a plan made at one thread stays
// single-threaded (the CNN step gained 1.07x from a second thread where
// libtorch gained 1.4x when the thread count changed in the process).
struct ConvKey {
  int64_t v[16];
  ConvPass pass;
  bool bias;
  int threads;
  bool operator<(const ConvKey& o) const {
    return std::lexicographical_compare(v, v + 16, o.v, o.v + 16) ||
           (std::equal(v, v + 16, o.v) && std::tie(pass, bias, threads) < std::tie(o.pass, o.bias, o.threads));
  }
};

// One tensor of a convolution: the caller's plain NCHW/OIHW memory and, when
// oneDNN chose another layout for it (blocked nChw16c, ...), the memory in
// that layout inside the launch's workspace and the reorder between them.
struct Operand {
  dnnl::memory user, inner;   // inner == user when no reorder is needed
  dnnl::primitive reorder;    // user -> inner (inputs) or inner -> user (outputs); empty when none
  int64_t offset = 0;         // of inner in the workspace, bytes
  bool reordered = false;
};

struct ConvPlan {
  dnnl::primitive prim;
  Operand x, w, y;
  dnnl::memory b, scratch;   // b and scratch may be empty
  int64_t scratch_bytes = 0;      // oneDNN's scratchpad, at the workspace's start
  int64_t workspace_bytes = 0;    // scratchpad + the reordered operands
};

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mu;                              // guards plans, ids and every execution
  std::map<ConvKey, int64_t> ids;
  std::deque<std::unique_ptr<ConvPlan>> plans;
};

Dnnl& dnnl_state() {
  static Dnnl* const d = new Dnnl();   // never destroyed: graphs may replay during exit
  return *d;
}

ConvKey key_of(const ConvArgs& a) {
  const ConvGeom& g = a.g;
  return ConvKey{{g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.oh, g.ow, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
                  g.dil_h, g.dil_w, g.groups},
                 a.pass,
                 a.b != nullptr,
                 omp_get_max_threads()};
}

int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }

// Sets up `op` for the plain layout `user_md` and oneDNN's choice `inner_md`;
// a reordered operand takes the next bytes of the workspace.
void make_operand(Operand& op, const dnnl::engine& eng, const dnnl::memory::desc& user_md,
                  const dnnl::memory::desc& inner_md, bool output, int64_t& workspace_end) {
  op.user = dnnl::memory(user_md, eng, DNNL_MEMORY_NONE);
  if (inner_md == user_md) {
    op.inner = op.user;
    return;
  }
  op.reordered = true;
  op.inner = dnnl::memory(inner_md, eng, DNNL_MEMORY_NONE);
  op.offset = align64(workspace_end);
  workspace_end = op.offset + static_cast<int64_t>(inner_md.get_size());
  op.reorder = output ? dnnl::reorder(dnnl::reorder::primitive_desc(eng, inner_md, eng, user_md))
                      : dnnl::reorder(dnnl::reorder::primitive_desc(eng, user_md, eng, inner_md));
}

std::unique_ptr<ConvPlan> make_plan(const dnnl::engine& eng, const ConvArgs& a) {
  const ConvGeom& g = a.g;
  const dims x_dims{g.n, g.c, g.h, g.w}, y_dims{g.n, g.k, g.oh, g.ow};
  const dims w_dims = g.groups == 1 ? dims{g.k, g.c, g.kh, g.kw}
                                    : dims{g.groups, g.k / g.groups, g.c / g.groups, g.kh, g.kw};
  // The caller's layouts, and tag::any: oneDNN picks the layouts its fastest
  // kernel wants (NOTE [ CPU convolution: oneDNN ]).
  const dnnl::memory::desc x_md(x_dims, dt::f32, tag::nchw), y_md(y_dims, dt::f32, tag::nchw);
  const dnnl::memory::desc w_md(w_dims, dt::f32, g.groups == 1 ? tag::oihw : tag::goihw);
  const dnnl::memory::desc x_any(x_dims, dt::f32, tag::any), y_any(y_dims, dt::f32, tag::any),
      w_any(w_dims, dt::f32, tag::any);
  const dnnl::memory::desc b_md(dims{g.k}, dt::f32, tag::x);
  const dims strides{g.stride_h, g.stride_w}, dil{g.dil_h - 1, g.dil_w - 1}, pad{g.pad_h, g.pad_w};
  // oneDNN's right padding: what makes its output size PyTorch's (floor division).
  const dims pad_r{(g.oh - 1) * g.stride_h + (g.kh - 1) * g.dil_h + 1 - g.h - g.pad_h,
                   (g.ow - 1) * g.stride_w + (g.kw - 1) * g.dil_w + 1 - g.w - g.pad_w};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const bool bias = a.b != nullptr;
  const auto algo = dnnl::algorithm::convolution_direct;
  using fwd = dnnl::convolution_forward;
  const fwd::desc fd = bias ? fwd::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any, b_md, y_any, strides,
                                        dil, pad, pad_r)
                            : fwd::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any, y_any, strides, dil,
                                        pad, pad_r);
  const fwd::primitive_desc fpd(fd, attr, eng);
  auto plan = std::make_unique<ConvPlan>();
  dnnl::memory::desc scratch_md, x_in, w_in, y_in;   // the layouts the primitive chose
  switch (a.pass) {
    case ConvPass::kForward:
      plan->prim = fwd(fpd);
      scratch_md = fpd.scratchpad_desc();
      x_in = fpd.src_desc(), w_in = fpd.weights_desc(), y_in = fpd.dst_desc();
      break;
    case ConvPass::kBackwardData: {
      using bwd = dnnl::convolution_backward_data;
      const bwd::primitive_desc pd(bwd::desc(algo, x_any, w_any, y_any, strides, dil, pad, pad_r), attr, eng, fpd);
      plan->prim = bwd(pd);
      scratch_md = pd.scratchpad_desc();
      x_in = pd.diff_src_desc(), w_in = pd.weights_desc(), y_in = pd.diff_dst_desc();
      break;
    }
    case ConvPass::kBackwardWeights: {
      using bwd = dnnl::convolution_backward_weights;
      const bwd::desc d = bias ? bwd::desc(algo, x_any, w_any, b_md, y_any, strides, dil, pad, pad_r)
                               : bwd::desc(algo, x_any, w_any, y_any, strides, dil, pad, pad_r);
      const bwd::primitive_desc pd(d, attr, eng, fpd);
      plan->prim = bwd(pd);
      scratch_md = pd.scratchpad_desc();
      x_in = pd.src_desc(), w_in = pd.diff_weights_desc(), y_in = pd.diff_dst_desc();
      break;
    }
  }
  plan->scratch_bytes = static_cast<int64_t>(scratch_md.get_size());
  if (plan->scratch_bytes > 0) plan->scratch = dnnl::memory(scratch_md, eng, DNNL_MEMORY_NONE);
  int64_t end = plan->scratch_bytes;
  make_operand(plan->x, eng, x_md, x_in, a.pass == ConvPass::kBackwardData, end);
  make_operand(plan->w, eng, w_md, w_in, a.pass == ConvPass::kBackwardWeights, end);
  make_operand(plan->y, eng, y_md, y_in, a.pass == ConvPass::kForward, end);
  if (bias) plan->b = dnnl::memory(b_md, eng, DNNL_MEMORY_NONE);
  plan->workspace_bytes = end;
  return plan;
}

int64_t conv_plan(ConvArgs& a) {
  Dnnl& d = dnnl_state();
  const ConvKey key = key_of(a);
  std::lock_guard<std::mutex> lock(d.mu);
  auto it = d.ids.find(key);
  if (it == d.ids.end()) {
    std::unique_ptr<ConvPlan> plan;
    try {
      plan = make_plan(d.engine, a);
    } catch (const dnnl::error& e) {
      const ConvGeom& g = a.g;
      throw_error(absl::StatusCode::kInvalidArgument,
                  absl::StrFormat("conv2d: oneDNN refused input [%d, %d, %d, %d], weight [%d, %d, %d, %d], output "
                                  "[%d, %d, %d, %d], stride (%d, %d), padding (%d, %d), dilation (%d, %d), groups "
                                  "%d: %s",
                                  g.n, g.c, g.h, g.w, g.k, g.c / g.groups, g.kh, g.kw, g.n, g.k, g.oh, g.ow,
                                  g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dil_h, g.dil_w, g.groups, e.what()));
    }
    it = d.ids.emplace(key, static_cast<int64_t>(d.plans.size())).first;
    d.plans.push_back(std::move(plan));
  }
  a.plan = it->second;
  return d.plans[static_cast<size_t>(a.plan)]->workspace_bytes;
}

// Runs a reorder between an operand's two memories.
dnnl_status_t run_reorder(const Operand& op, bool output, const dnnl::stream& stream) {
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, (output ? op.inner : op.user).get()},
                             {DNNL_ARG_TO, (output ? op.user : op.inner).get()}};
  return dnnl_primitive_execute(op.reorder.get(), stream.get(), 2, args);
}

void conv_kernel(const ConvArgs& a) {
  if (a.g.n == 0 || a.g.k == 0) return;
  Dnnl& d = dnnl_state();
  std::lock_guard<std::mutex> lock(d.mu);
  ENCORE_CHECK(a.plan >= 0 && a.plan < static_cast<int64_t>(d.plans.size()),
               "conv2d: internal: launch without a plan (%d)", a.plan);
  ConvPlan& p = *d.plans[static_cast<size_t>(a.plan)];
  char* const ws = static_cast<char*>(a.workspace);
  Operand* const ops[3] = {&p.x, &p.w, &p.y};
  void* const user[3] = {a.x, a.w, a.y};
  // Which operand the pass writes: the others are read.
  const int written = a.pass == ConvPass::kForward ? 2 : a.pass == ConvPass::kBackwardData ? 0 : 1;
  dnnl_status_t st = dnnl_success;
  park_workers();   // oneDNN runs on OpenMP's threads: encore's would spin beside them
  for (int i = 0; i < 3; ++i) {
    ops[i]->user.set_data_handle(user[i]);
    if (!ops[i]->reordered) continue;
    ops[i]->inner.set_data_handle(ws + ops[i]->offset);
    if (i != written && st == dnnl_success) st = run_reorder(*ops[i], /*output=*/false, d.stream);
  }
  dnnl_exec_arg_t args[5];
  int n = 0;
  const bool has_b = a.b != nullptr;
  if (has_b) p.b.set_data_handle(a.b);
  switch (a.pass) {
    case ConvPass::kForward:
      args[n++] = {DNNL_ARG_SRC, p.x.inner.get()};
      args[n++] = {DNNL_ARG_WEIGHTS, p.w.inner.get()};
      if (has_b) args[n++] = {DNNL_ARG_BIAS, p.b.get()};
      args[n++] = {DNNL_ARG_DST, p.y.inner.get()};
      break;
    case ConvPass::kBackwardData:
      args[n++] = {DNNL_ARG_DIFF_SRC, p.x.inner.get()};
      args[n++] = {DNNL_ARG_WEIGHTS, p.w.inner.get()};
      args[n++] = {DNNL_ARG_DIFF_DST, p.y.inner.get()};
      break;
    case ConvPass::kBackwardWeights:
      args[n++] = {DNNL_ARG_SRC, p.x.inner.get()};
      args[n++] = {DNNL_ARG_DIFF_WEIGHTS, p.w.inner.get()};
      if (has_b) args[n++] = {DNNL_ARG_DIFF_BIAS, p.b.get()};
      args[n++] = {DNNL_ARG_DIFF_DST, p.y.inner.get()};
      break;
  }
  if (p.scratch_bytes > 0) {
    p.scratch.set_data_handle(ws);
    args[n++] = {DNNL_ARG_SCRATCHPAD, p.scratch.get()};
  }
  if (st == dnnl_success) st = dnnl_primitive_execute(p.prim.get(), d.stream.get(), n, args);
  if (st == dnnl_success && ops[written]->reordered) st = run_reorder(*ops[written], /*output=*/true, d.stream);
  if (st == dnnl_success) st = dnnl_stream_wait(d.stream.get());
  ENCORE_CHECK(st == dnnl_success, "conv2d: oneDNN execution failed (status %d)", static_cast<int>(st));
}

// ---- vector lanes ----
// simd.h's fixed-width lanes (F32x8, F64x8, F32x16: the compiler's vector
// types) for the row loops of pooling and batch normalization below: each
// lane is one chain of adds in a fixed order, so every x86-64 level (one
// AVX-512 register, two AVX2 or four SSE2 ones) and thread count gives the
// same bits. Here the rows may also be f16/bf16, converted on load.

// N consecutive elements as floats.
template <typename V, typename T>
ENCORE_SIMD_INLINE V load_floats(const T* p) {
  V v;
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(&v, p, sizeof v);
  } else {
    for (int j = 0; j < static_cast<int>(sizeof(V) / sizeof(float)); ++j) v[j] = static_cast<float>(p[j]);
  }
  return v;
}
template <typename T>
ENCORE_SIMD_INLINE F32x8 load8(const T* p) { return load_floats<F32x8>(p); }
ENCORE_SIMD_INLINE F64x8 widen(F32x8 v) { return __builtin_convertvector(v, F64x8); }
ENCORE_SIMD_INLINE F64x8 load_lanes(const double* lane) {
  F64x8 v;
  std::memcpy(&v, lane, sizeof v);
  return v;
}
ENCORE_SIMD_INLINE void store_lanes(double* lane, F64x8 v) { std::memcpy(lane, &v, sizeof v); }

// The f32 sum of n consecutive elements: element k into lane k % 16 (the
// tail into lanes 0, 1, ...), the lanes folded pairwise (lane j + 8 into j,
// then j + 4, j + 2, j + 1). One dependent add per 16 elements instead of
// per element: a global average pool of a [32, 16, 32, 32] input took
// 0.37 ms as one chain.
template <typename T>
ENCORE_SIMD_CLONES float sum_run(const T* p, int64_t n) {
  F32x16 acc = {};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) acc += load_floats<F32x16>(p + k);
  for (int j = 0; k < n; ++k, ++j) acc[j] += static_cast<float>(p[k]);
  for (int width = 8; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  return acc[0];
}

// ---- pooling ----

template <typename T>
void max_pool_loop(const MaxPoolArgs& a) {
  const PoolGeom& g = a.g;
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  // The taps inside the input (max_pool_window walks no others): kh kw would wrap for a huge kernel.
  const int64_t taps = std::min(g.kh, g.h) * std::min(g.kw, g.w);
  parallel_for(g.planes, grain_for(g.oh * g.ow * taps, kGrainElementwise), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* xp = x + p * g.h * g.w;
      for (int64_t i = 0; i < g.oh; ++i) {
        for (int64_t j = 0; j < g.ow; ++j) {
          const MaxTap m =
              backend::max_pool_window(g, i, j, [xp](int64_t flat) { return static_cast<float>(xp[flat]); });
          const int64_t o = (p * g.oh + i) * g.ow + j;
          y[o] = T(m.value);
          a.indices[o] = m.flat;
        }
      }
    }
  });
}

template <typename T>
void max_pool_backward_loop(const MaxPoolBackwardArgs& a) {
  const PoolGeom& g = a.g;
  const T* gy = static_cast<const T*>(a.gy);
  T* gx = static_cast<T*>(a.gx);
  const int64_t plane = g.h * g.w, out_plane = g.oh * g.ow;
  parallel_for(g.planes, grain_for(plane + out_plane, kGrainElementwise), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      T* gxp = gx + p * plane;
      if constexpr (std::is_same_v<T, float>) {
        std::fill(gxp, gxp + plane, 0.f);
        for (int64_t o = 0; o < out_plane; ++o) {
          const int64_t idx = a.indices[p * out_plane + o];
          if (idx >= 0 && idx < plane) gxp[idx] += gy[p * out_plane + o];
        }
      } else {
        // f32 sums per element of the plane (a window overlap adds several), rounded once.
        float acc[1024];
        for (int64_t base = 0; base < plane; base += 1024) {
          const int64_t len = std::min<int64_t>(1024, plane - base);
          std::fill(acc, acc + len, 0.f);
          for (int64_t o = 0; o < out_plane; ++o) {
            const int64_t idx = a.indices[p * out_plane + o] - base;
            if (idx >= 0 && idx < len) acc[idx] += static_cast<float>(gy[p * out_plane + o]);
          }
          for (int64_t i = 0; i < len; ++i) gxp[base + i] = T(acc[i]);
        }
      }
    }
  });
}

template <typename T>
void avg_pool_loop(const AvgPoolArgs& a) {
  const PoolGeom& g = a.g;
  const T* x = static_cast<const T*>(a.in);
  T* y = static_cast<T*>(a.out);
  parallel_for(g.planes, grain_for(g.h * g.w + g.oh * g.ow, kGrainElementwise), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* xp = x + p * g.h * g.w;
      for (int64_t i = 0; i < g.oh; ++i) {
        for (int64_t j = 0; j < g.ow; ++j) {
          const backend::PoolWindow win = backend::avg_pool_window(g, a.mode, i, j);
          float s = 0.f;
          if (win.w0 == 0 && win.w1 == g.w) {   // whole rows: one contiguous run (global pooling)
            s = sum_run(xp + win.h0 * g.w, (win.h1 - win.h0) * g.w);
          } else {
            for (int64_t r = win.h0; r < win.h1; ++r) {
              for (int64_t c = win.w0; c < win.w1; ++c) s += static_cast<float>(xp[r * g.w + c]);
            }
          }
          y[(p * g.oh + i) * g.ow + j] = T(win.divisor > 0.f ? s / win.divisor : 0.f);
        }
      }
    }
  });
}

// Each plane's gradient is summed in f32, windows in row-major order, then
// rounded once.
template <typename T>
void avg_pool_backward_loop(const AvgPoolArgs& a) {
  const PoolGeom& g = a.g;
  const T* gy = static_cast<const T*>(a.in);
  T* gx = static_cast<T*>(a.out);
  const int64_t plane = g.h * g.w;
  parallel_for(g.planes, grain_for(plane + g.oh * g.ow * 4, kGrainElementwise), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      T* gxp = gx + p * plane;
      const T* gyp = gy + p * g.oh * g.ow;
      if (g.oh == 1 && g.ow == 1) {   // one window: a global pool's plane takes one value (0.f + v, as the tiles sum)
        const backend::PoolWindow win = backend::avg_pool_window(g, a.mode, 0, 0);
        if (win.h0 == 0 && win.h1 == g.h && win.w0 == 0 && win.w1 == g.w) {
          const float v = win.divisor > 0.f ? 0.f + static_cast<float>(gyp[0]) / win.divisor : 0.f;
          std::fill(gxp, gxp + plane, T(v));
          continue;
        }
      }
      // The plane in tiles (rows x columns) that fit the stack accumulator.
      constexpr int64_t kAccElems = 4096;
      float acc[kAccElems];
      const int64_t cols_per_tile = std::min(g.w, kAccElems);
      const int64_t rows_per_tile = std::max<int64_t>(1, kAccElems / cols_per_tile);
      for (int64_t r0 = 0; r0 < g.h; r0 += rows_per_tile) {
        const int64_t r1 = std::min(g.h, r0 + rows_per_tile);
        for (int64_t c0 = 0; c0 < g.w; c0 += cols_per_tile) {
          const int64_t c1 = std::min(g.w, c0 + cols_per_tile), tw = c1 - c0;
          std::fill(acc, acc + (r1 - r0) * tw, 0.f);
          for (int64_t i = 0; i < g.oh; ++i) {
            for (int64_t j = 0; j < g.ow; ++j) {
              const backend::PoolWindow win = backend::avg_pool_window(g, a.mode, i, j);
              const int64_t h0 = std::max(win.h0, r0), h1 = std::min(win.h1, r1);
              const int64_t w0 = std::max(win.w0, c0), w1 = std::min(win.w1, c1);
              if (h0 >= h1 || w0 >= w1 || win.divisor <= 0.f) continue;
              const float v = static_cast<float>(gyp[i * g.ow + j]) / win.divisor;
              for (int64_t r = h0; r < h1; ++r) {
                for (int64_t c = w0; c < w1; ++c) acc[(r - r0) * tw + (c - c0)] += v;
              }
            }
          }
          for (int64_t r = r0; r < r1; ++r) {
            for (int64_t c = c0; c < c1; ++c) gxp[r * g.w + c] = T(acc[(r - r0) * tw + (c - c0)]);
          }
        }
      }
    }
  });
}

// ---- batch normalization ----
// Per channel, sums over (n, hw) in double, each row into 8 lanes (element k
// of a row into lane k % 8, the tail into lanes 0, 1, ..., the lanes folded
// pairwise at the end): one fixed order, whatever the clone (simd.h) or the
// thread count. A single double accumulator was a chain of dependent adds
// (2.6 ms for a [32, 16, 32, 32] forward); lanes written as a plain array
// reached through a pointer stayed in memory, a load-add-store chain per
// element (the row sums were about 15 % of a CNN training step), so they are
// an F64x8 (the vector lanes above). Channels in parallel.

// The sums of d = x - K and of d^2 over one row, K = shift (NOTE [ Batch norm
// statistics in one pass ]).
template <typename T>
ENCORE_SIMD_CLONES void bn_row_moments(const T* row, int64_t n, double shift, double* lane1, double* lane2) {
  F64x8 a1 = load_lanes(lane1), a2 = load_lanes(lane2);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const F64x8 d = widen(load8(row + k)) - shift;
    a1 += d;
    a2 += d * d;
  }
  for (int j = 0; k < n; ++k, ++j) {
    const double d = static_cast<double>(static_cast<float>(row[k])) - shift;
    a1[j] += d;
    a2[j] += d * d;
  }
  store_lanes(lane1, a1);
  store_lanes(lane2, a2);
}
template <typename T>
ENCORE_SIMD_CLONES void bn_row_apply(const T* row, T* out, int64_t n, float scale, float shift) {
  for (int64_t k = 0; k < n; ++k) out[k] = T(static_cast<float>(row[k]) * scale + shift);
}
// sum gy and sum gy xhat, xhat = (x - mean) invstd in f32.
template <typename T>
ENCORE_SIMD_CLONES void bn_row_grad_sums(const T* gr, const T* xr, int64_t n, float mean, float invstd, double* lg,
                                         double* lgx) {
  F64x8 ag = load_lanes(lg), agx = load_lanes(lgx);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const F64x8 g = widen(load8(gr + k));
    ag += g;
    agx += g * widen((load8(xr + k) - mean) * invstd);
  }
  for (int j = 0; k < n; ++k, ++j) {
    const double g = static_cast<float>(gr[k]);
    ag[j] += g;
    agx[j] += g * ((static_cast<float>(xr[k]) - mean) * invstd);
  }
  store_lanes(lg, ag);
  store_lanes(lgx, agx);
}
template <typename T>
ENCORE_SIMD_CLONES void bn_row_grad_input(const T* gr, const T* xr, T* out, int64_t n, float mean, float invstd,
                                          float scale, float mg, float mgx) {
  for (int64_t k = 0; k < n; ++k) {
    const float xhat = (static_cast<float>(xr[k]) - mean) * invstd;
    out[k] = T(scale * (static_cast<float>(gr[k]) - mg - xhat * mgx));
  }
}
inline double fold(const double (&l)[8]) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// NOTE [ Batch norm rows in memory order ]
// Row (i, ch) of an [n, c, hw] tensor lies at (i c + ch) hw: a channel's rows
// are hw elements each, c hw apart. Walking one channel's rows at a time
// (as these loops once did) read each tensor as n c short streams (4 KiB for
// a 32x32 plane: one page, where the hardware prefetcher stops); within a
// step, where the rows come from memory, the forward and backward ran at
// 0.20 and 0.49 ms a [32, 16, 32, 32] layer against 0.15 and 0.17 ms with
// the data in cache. So each pass runs over a block of channels with i
// outer: a thread reads its block's rows as n long runs. A channel's lanes
// still take its rows in the order i = 0, 1, ..., so the bits are those of
// the channel-at-a-time loops, whatever the block or the thread count.
//
// NOTE [ Batch norm statistics in one pass ]
// A channel's mean and variance come from one pass over its rows: the sums
// of d = x - K and of d^2 in double, with K the channel's first element, so
// that mean = K + S1 / m and m var = S2 - S1^2 / m. Two passes (the mean,
// then the squares about it) read the input once more, about a quarter of
// the forward. The shift bounds the cancellation: K is one of the m values,
// so m var >= (K - mean)^2 and S1^2 / m <= m (m var), so the subtraction
// loses at most log2(m) of double's 53 bits (15 for m = 32,768), far more
// than the 24 that float keeps.
constexpr int64_t kBnBlock = 32;   // channels per block: their lanes (2 KiB per array) on the stack

// Runs row(i, ch) for every i and every channel of [c0, c1), i outer.
template <typename Row>
ENCORE_SIMD_INLINE void bn_rows(int64_t n, int64_t c0, int64_t c1, Row&& row) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = c0; ch < c1; ++ch) row(i, ch);
  }
}

template <typename T>
void batch_norm_loop(const BatchNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const T* w = static_cast<const T*>(a.weight);
  const T* bias = static_cast<const T*>(a.bias);
  T* rm = static_cast<T*>(a.running_mean);
  T* rv = static_cast<T*>(a.running_var);
  const int64_t m = a.n * a.hw;
  const auto off = [&](int64_t i, int64_t ch) { return (i * a.c + ch) * a.hw; };
  parallel_for(a.c, grain_for(m * 3, kGrainElementwise), [&](int64_t b, int64_t e) {
    for (int64_t c0 = b; c0 < e; c0 += kBnBlock) {
      const int64_t c1 = std::min(e, c0 + kBnBlock);
      float scale[kBnBlock], shift[kBnBlock];
      double pivot[kBnBlock], sum[kBnBlock][8] = {}, sq[kBnBlock][8] = {};   // K, S1, S2 per channel
      if (a.training) {
        for (int64_t ch = c0; ch < c1; ++ch) {
          pivot[ch - c0] = m > 0 ? static_cast<double>(static_cast<float>(x[off(0, ch)])) : 0.0;
        }
        bn_rows(a.n, c0, c1, [&](int64_t i, int64_t ch) {
          bn_row_moments(x + off(i, ch), a.hw, pivot[ch - c0], sum[ch - c0], sq[ch - c0]);
        });
      }
      for (int64_t ch = c0; ch < c1; ++ch) {
        float mean, invstd;
        if (a.training) {
          const double s1 = fold(sum[ch - c0]) / static_cast<double>(std::max<int64_t>(m, 1));   // mean - K
          // The sum of squares about the mean, m var: never below 0; NaN stays NaN.
          const double d2 = fold(sq[ch - c0]) - s1 * s1 * static_cast<double>(m);
          const double ss = d2 < 0.0 ? 0.0 : d2;
          const double var = m > 0 ? ss / static_cast<double>(m) : 0.0;
          mean = static_cast<float>(pivot[ch - c0] + s1);
          invstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(a.eps)));
          if (rm != nullptr) {
            const float unbiased =
                m > 1 ? static_cast<float>(ss / static_cast<double>(m - 1)) : static_cast<float>(var);
            const float f = backend::bn_update_factor(a);
            rm[ch] = T((1.f - f) * static_cast<float>(rm[ch]) + f * mean);
            rv[ch] = T((1.f - f) * static_cast<float>(rv[ch]) + f * unbiased);
          }
        } else {
          mean = static_cast<float>(rm[ch]);
          invstd = 1.f / std::sqrt(static_cast<float>(rv[ch]) + a.eps);
        }
        a.saved[ch] = mean;
        a.saved[a.c + ch] = invstd;
        scale[ch - c0] = (w != nullptr ? static_cast<float>(w[ch]) : 1.f) * invstd;
        shift[ch - c0] = (bias != nullptr ? static_cast<float>(bias[ch]) : 0.f) - mean * scale[ch - c0];
      }
      bn_rows(a.n, c0, c1, [&](int64_t i, int64_t ch) {
        bn_row_apply(x + off(i, ch), y + off(i, ch), a.hw, scale[ch - c0], shift[ch - c0]);
      });
    }
  });
}

template <typename T>
void batch_norm_backward_loop(const BatchNormBackwardArgs& a) {
  const T* gy = static_cast<const T*>(a.gy);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  T* gx = static_cast<T*>(a.gx);
  T* gw = static_cast<T*>(a.gw);
  T* gb = static_cast<T*>(a.gb);
  const int64_t m = a.n * a.hw;
  const auto off = [&](int64_t i, int64_t ch) { return (i * a.c + ch) * a.hw; };
  parallel_for(a.c, grain_for(m * 3, kGrainElementwise), [&](int64_t b, int64_t e) {
    for (int64_t c0 = b; c0 < e; c0 += kBnBlock) {
      const int64_t c1 = std::min(e, c0 + kBnBlock);
      double lanes_g[kBnBlock][8] = {}, lanes_gx[kBnBlock][8] = {};
      bn_rows(a.n, c0, c1, [&](int64_t i, int64_t ch) {
        bn_row_grad_sums(gy + off(i, ch), x + off(i, ch), a.hw, a.saved[ch], a.saved[a.c + ch], lanes_g[ch - c0],
                         lanes_gx[ch - c0]);
      });
      float scale[kBnBlock], mg[kBnBlock], mgx[kBnBlock];
      for (int64_t ch = c0; ch < c1; ++ch) {
        const double sum_g = fold(lanes_g[ch - c0]), sum_gx = fold(lanes_gx[ch - c0]);
        if (gb != nullptr) gb[ch] = T(static_cast<float>(sum_g));
        if (gw != nullptr) gw[ch] = T(static_cast<float>(sum_gx));
        scale[ch - c0] = (w != nullptr ? static_cast<float>(w[ch]) : 1.f) * a.saved[a.c + ch];
        mg[ch - c0] = a.training && m > 0 ? static_cast<float>(sum_g / static_cast<double>(m)) : 0.f;
        mgx[ch - c0] = a.training && m > 0 ? static_cast<float>(sum_gx / static_cast<double>(m)) : 0.f;
      }
      if (gx == nullptr) continue;
      bn_rows(a.n, c0, c1, [&](int64_t i, int64_t ch) {
        bn_row_grad_input(gy + off(i, ch), x + off(i, ch), gx + off(i, ch), a.hw, a.saved[ch], a.saved[a.c + ch],
                          scale[ch - c0], mg[ch - c0], mgx[ch - c0]);
      });
    }
  });
}

template <typename T>
struct MaxPoolEntry {
  static void run(const MaxPoolArgs& a) { max_pool_loop<T>(a); }
};
template <typename T>
struct MaxPoolBackwardEntry {
  static void run(const MaxPoolBackwardArgs& a) { max_pool_backward_loop<T>(a); }
};
template <typename T>
struct AvgPoolEntry {
  static void run(const AvgPoolArgs& a) { avg_pool_loop<T>(a); }
};
template <typename T>
struct AvgPoolBackwardEntry {
  static void run(const AvgPoolArgs& a) { avg_pool_backward_loop<T>(a); }
};
template <typename T>
struct BatchNormEntry {
  static void run(const BatchNormArgs& a) { batch_norm_loop<T>(a); }
};
template <typename T>
struct BatchNormBackwardEntry {
  static void run(const BatchNormBackwardArgs& a) { batch_norm_backward_loop<T>(a); }
};

}  // namespace

extern const backend::CnnKernels kCnn = {
    .conv = kernel<&conv_kernel>(),
    .half_operands = false,   // f32 primitives only: the host converts f16/bf16
    .plan = &conv_plan,
    .max_pool = specialized_kernel<&pick_float<MaxPoolEntry, MaxPoolArgs>>(),
    .max_pool_backward = specialized_kernel<&pick_float<MaxPoolBackwardEntry, MaxPoolBackwardArgs>>(),
    .avg_pool = specialized_kernel<&pick_float<AvgPoolEntry, AvgPoolArgs>>(),
    .avg_pool_backward = specialized_kernel<&pick_float<AvgPoolBackwardEntry, AvgPoolArgs>>(),
    .batch_norm = specialized_kernel<&pick_float<BatchNormEntry, BatchNormArgs>>(),
    .batch_norm_backward = specialized_kernel<&pick_float<BatchNormBackwardEntry, BatchNormBackwardArgs>>(),
};

}  // namespace encore::cpu
