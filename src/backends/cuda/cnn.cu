// CUDA kernels of the cnn family: pooling and batch normalization, and the
// kernel table entries (contracts: the cnn section of
// src/backends/kernel_table.h; host side: src/backends/cnn.cpp). The
// convolutions are cuDNN's, called from cudnn.cpp (host code: cuDNN's
// headers stay out of nvcc).
//
// No atomics anywhere: the backward passes gather (each input element sums
// the outputs whose windows hold it, in row-major order of the outputs, the
// order the CPU's scatter adds them in, so the f32 results match the CPU's
// bit for bit), and batch norm reduces each channel in one block with a
// fixed tree, so replays equal eager runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "src/backends/cnn_formulas.h"
#include "src/backends/cuda/convert.cuh"
#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/cuda/launch.h"
#include "src/backends/kernel_table.h"

namespace encore::cuda {

// cudnn.cpp: the convolution entry and its plan (CnnKernels::conv, ::plan).
void cudnn_conv(const backend::ConvArgs& a);
int64_t cudnn_conv_plan(backend::ConvArgs& a);

namespace {

using namespace backend;   // the shared argument structs and formulas

constexpr int kNormThreads = 256;   // threads per channel block of batch norm

// ---- pooling ----

template <typename T>
__global__ void max_pool_kernel(MaxPoolArgs a) {
  kernel_prologue();
  const PoolGeom g = a.g;
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t total = g.planes * g.oh * g.ow;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < total; o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = o % g.ow, i = (o / g.ow) % g.oh, p = o / (g.ow * g.oh);
    const T* xp = x + p * g.h * g.w;
    const MaxTap m = max_pool_window(g, i, j, [xp](int64_t flat) { return to_float(xp[flat]); });
    y[o] = convert<T>(m.value);
    a.indices[o] = m.flat;
  }
}

// The outputs along one axis whose windows (start o*stride - pad, taps
// every dil, k taps) can hold input position `in`.
__device__ __forceinline__ void window_range(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil,
                                             int64_t out, int64_t& lo, int64_t& hi) {
  const int64_t reach = in + pad - (k - 1) * dil;   // o*stride >= reach
  lo = reach <= 0 ? 0 : (reach + stride - 1) / stride;
  hi = hd_min(out - 1, (in + pad) / stride);
}

template <typename T>
__global__ void max_pool_backward_kernel(MaxPoolBackwardArgs a) {
  kernel_prologue();
  const PoolGeom g = a.g;
  const T* gy = static_cast<const T*>(a.gy);
  T* gx = static_cast<T*>(a.gx);
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = e % g.w, ih = (e / g.w) % g.h, p = e / (g.w * g.h);
    const int64_t flat = ih * g.w + iw;
    int64_t i0, i1, j0, j1;
    window_range(ih, g.kh, g.stride_h, g.pad_h, g.dil_h, g.oh, i0, i1);
    window_range(iw, g.kw, g.stride_w, g.pad_w, g.dil_w, g.ow, j0, j1);
    float acc = 0.f;
    const int64_t base = p * g.oh * g.ow;
    for (int64_t i = i0; i <= i1; ++i) {
      for (int64_t j = j0; j <= j1; ++j) {
        if (a.indices[base + i * g.ow + j] == flat) acc += to_float(gy[base + i * g.ow + j]);
      }
    }
    gx[e] = convert<T>(acc);
  }
}

template <typename T>
__global__ void avg_pool_kernel(AvgPoolArgs a) {
  kernel_prologue();
  const PoolGeom g = a.g;
  const T* x = static_cast<const T*>(a.in);
  T* y = static_cast<T*>(a.out);
  const int64_t total = g.planes * g.oh * g.ow;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < total; o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = o % g.ow, i = (o / g.ow) % g.oh, p = o / (g.ow * g.oh);
    const T* xp = x + p * g.h * g.w;
    const PoolWindow win = avg_pool_window(g, a.mode, i, j);
    float s = 0.f;
    for (int64_t r = win.h0; r < win.h1; ++r) {
      for (int64_t c = win.w0; c < win.w1; ++c) s += to_float(xp[r * g.w + c]);
    }
    y[o] = convert<T>(win.divisor > 0.f ? s / win.divisor : 0.f);
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(AvgPoolArgs a) {
  kernel_prologue();
  const PoolGeom g = a.g;
  const T* gy = static_cast<const T*>(a.in);
  T* gx = static_cast<T*>(a.out);
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = e % g.w, ih = (e / g.w) % g.h, p = e / (g.w * g.h);
    int64_t i0, i1, j0, j1;
    if (a.mode == AvgPoolMode::kAdaptive) {
      // Adaptive windows overlap by at most one row: the candidates around ih * oh / h.
      i0 = hd_max(0, (ih * g.oh) / g.h - 1), i1 = hd_min(g.oh - 1, ((ih + 1) * g.oh) / g.h + 1);
      j0 = hd_max(0, (iw * g.ow) / g.w - 1), j1 = hd_min(g.ow - 1, ((iw + 1) * g.ow) / g.w + 1);
    } else {
      window_range(ih, g.kh, g.stride_h, g.pad_h, 1, g.oh, i0, i1);
      window_range(iw, g.kw, g.stride_w, g.pad_w, 1, g.ow, j0, j1);
    }
    float acc = 0.f;
    const T* gyp = gy + p * g.oh * g.ow;
    for (int64_t i = i0; i <= i1; ++i) {
      for (int64_t j = j0; j <= j1; ++j) {
        const PoolWindow win = avg_pool_window(g, a.mode, i, j);
        if (ih < win.h0 || ih >= win.h1 || iw < win.w0 || iw >= win.w1 || win.divisor <= 0.f) continue;
        acc += to_float(gyp[i * g.ow + j]) / win.divisor;
      }
    }
    gx[e] = convert<T>(acc);
  }
}

// ---- batch normalization: one block per channel ----

// The block's sum of v (every thread gets it); a fixed tree over kNormThreads.
__device__ double block_sum(double v, double* shm) {
  __syncthreads();
  shm[threadIdx.x] = v;
  __syncthreads();
  for (int s = kNormThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shm[threadIdx.x] += shm[threadIdx.x + s];
    __syncthreads();
  }
  return shm[0];
}

template <typename T>
__global__ void batch_norm_kernel(BatchNormArgs a) {
  kernel_prologue();
  __shared__ double shm[kNormThreads];
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const T* w = static_cast<const T*>(a.weight);
  const T* bias = static_cast<const T*>(a.bias);
  T* rm = static_cast<T*>(a.running_mean);
  T* rv = static_cast<T*>(a.running_var);
  const int64_t m = a.n * a.hw;
  for (int64_t ch = blockIdx.x; ch < a.c; ch += gridDim.x) {
    float mean, invstd;
    if (a.training) {
      double s = 0.0;
      for (int64_t q = threadIdx.x; q < m; q += kNormThreads) s += to_float(x[((q / a.hw) * a.c + ch) * a.hw + q % a.hw]);
      const double mu = block_sum(s, shm) / static_cast<double>(m);
      double ss = 0.0;
      for (int64_t q = threadIdx.x; q < m; q += kNormThreads) {
        const double d = static_cast<double>(to_float(x[((q / a.hw) * a.c + ch) * a.hw + q % a.hw])) - mu;
        ss += d * d;
      }
      const double sq = block_sum(ss, shm);
      const double var = sq / static_cast<double>(m);
      mean = static_cast<float>(mu);
      invstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(a.eps)));
      if (rm != nullptr && threadIdx.x == 0) {
        const float unbiased = m > 1 ? static_cast<float>(sq / static_cast<double>(m - 1)) : static_cast<float>(var);
        const float f = backend::bn_update_factor(a);
        rm[ch] = convert<T>((1.f - f) * to_float(rm[ch]) + f * mean);
        rv[ch] = convert<T>((1.f - f) * to_float(rv[ch]) + f * unbiased);
      }
    } else {
      mean = to_float(rm[ch]);
      invstd = 1.f / sqrtf(to_float(rv[ch]) + a.eps);
    }
    if (threadIdx.x == 0) {
      a.saved[ch] = mean;
      a.saved[a.c + ch] = invstd;
    }
    const float scale = (w != nullptr ? to_float(w[ch]) : 1.f) * invstd;
    const float shift = (bias != nullptr ? to_float(bias[ch]) : 0.f) - mean * scale;
    for (int64_t q = threadIdx.x; q < m; q += kNormThreads) {
      const int64_t off = ((q / a.hw) * a.c + ch) * a.hw + q % a.hw;
      y[off] = convert<T>(__fadd_rn(__fmul_rn(to_float(x[off]), scale), shift));
    }
  }
}

template <typename T>
__global__ void batch_norm_backward_kernel(BatchNormBackwardArgs a) {
  kernel_prologue();
  __shared__ double shm[kNormThreads];
  const T* gy = static_cast<const T*>(a.gy);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  T* gx = static_cast<T*>(a.gx);
  T* gw = static_cast<T*>(a.gw);
  T* gb = static_cast<T*>(a.gb);
  const int64_t m = a.n * a.hw;
  for (int64_t ch = blockIdx.x; ch < a.c; ch += gridDim.x) {
    const float mean = a.saved[ch], invstd = a.saved[a.c + ch];
    double sg = 0.0, sgx = 0.0;
    for (int64_t q = threadIdx.x; q < m; q += kNormThreads) {
      const int64_t off = ((q / a.hw) * a.c + ch) * a.hw + q % a.hw;
      const float g = to_float(gy[off]);
      const float xhat = (to_float(x[off]) - mean) * invstd;
      sg += g;
      sgx += static_cast<double>(g) * xhat;
    }
    const double sum_g = block_sum(sg, shm);
    const double sum_gx = block_sum(sgx, shm);
    if (threadIdx.x == 0) {
      if (gb != nullptr) gb[ch] = convert<T>(static_cast<float>(sum_g));
      if (gw != nullptr) gw[ch] = convert<T>(static_cast<float>(sum_gx));
    }
    if (gx == nullptr) continue;
    const float scale = (w != nullptr ? to_float(w[ch]) : 1.f) * invstd;
    const float mg = a.training ? static_cast<float>(sum_g / static_cast<double>(m)) : 0.f;
    const float mgx = a.training ? static_cast<float>(sum_gx / static_cast<double>(m)) : 0.f;
    for (int64_t q = threadIdx.x; q < m; q += kNormThreads) {
      const int64_t off = ((q / a.hw) * a.c + ch) * a.hw + q % a.hw;
      const float xhat = (to_float(x[off]) - mean) * invstd;
      gx[off] = convert<T>(scale * (to_float(gy[off]) - mg - xhat * mgx));
    }
  }
}

// ---- launchers ----

void max_pool_launch(const MaxPoolArgs& a) {
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(max_pool_kernel<T>, blocks_for(a.g.planes * a.g.oh * a.g.ow), kThreads, 0, active_stream(), a);
  });
  check_launch("max_pool2d");
}

void max_pool_backward_launch(const MaxPoolBackwardArgs& a) {
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(max_pool_backward_kernel<T>, blocks_for(a.g.planes * a.g.h * a.g.w), kThreads, 0,
                  active_stream(), a);
  });
  check_launch("max_pool2d_backward");
}

void avg_pool_launch(const AvgPoolArgs& a) {
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(avg_pool_kernel<T>, blocks_for(a.g.planes * a.g.oh * a.g.ow), kThreads, 0, active_stream(), a);
  });
  check_launch("avg_pool2d");
}

void avg_pool_backward_launch(const AvgPoolArgs& a) {
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(avg_pool_backward_kernel<T>, blocks_for(a.g.planes * a.g.h * a.g.w), kThreads, 0,
                  active_stream(), a);
  });
  check_launch("avg_pool2d_backward");
}

unsigned channel_blocks(int64_t c) { return static_cast<unsigned>(c < 1 ? 1 : (c > 65535 ? 65535 : c)); }

void batch_norm_launch(const BatchNormArgs& a) {
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(batch_norm_kernel<T>, channel_blocks(a.c), kNormThreads, 0, active_stream(), a);
  });
  check_launch("batch_norm");
}

void batch_norm_backward_launch(const BatchNormBackwardArgs& a) {
  with_float(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(batch_norm_backward_kernel<T>, channel_blocks(a.c), kNormThreads, 0, active_stream(), a);
  });
  check_launch("batch_norm_backward");
}

}  // namespace

extern const CnnKernels kCnn = {
    .conv = kernel<&cudnn_conv>(),
    .half_operands = true,   // cuDNN takes f16/bf16 tensors, computing in f32
    .plan = &cudnn_conv_plan,
    .max_pool = kernel<&max_pool_launch>(),
    .max_pool_backward = kernel<&max_pool_backward_launch>(),
    .avg_pool = kernel<&avg_pool_launch>(),
    .avg_pool_backward = kernel<&avg_pool_backward_launch>(),
    .batch_norm = kernel<&batch_norm_launch>(),
    .batch_norm_backward = kernel<&batch_norm_backward_launch>(),
};

}  // namespace encore::cuda
