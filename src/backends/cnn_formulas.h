// The pooling windows both backends walk (cpu/cnn.cpp, cuda/cnn.cu), written
// once as host/device functions so their divisors, bounds and tie rules
// agree bit for bit. nvcc-safe.
//
//   const PoolWindow win = avg_pool_window(g, mode, i, j);   // output (i, j)
//   for (int64_t r = win.h0; r < win.h1; ++r) ...            // rows inside the input
//   const MaxTap m = max_pool_window(g, i, j, [&](int64_t flat) { return float(plane[flat]); });
#pragma once

#include <cmath>
#include <cstdint>

#include "src/backends/kernel_table.h"
#include "src/core/host_device.h"

namespace encore::backend {

// The window of output (i, j) clipped to the input, [h0, h1) x [w0, w1), and
// the divisor of its mean (0 for an empty window).
struct PoolWindow {
  int64_t h0, h1, w0, w1;
  float divisor;
};

ENCORE_HOST_DEVICE int64_t hd_min(int64_t a, int64_t b) { return a < b ? a : b; }
ENCORE_HOST_DEVICE int64_t hd_max(int64_t a, int64_t b) { return a > b ? a : b; }

// PyTorch's avg_pool2d and adaptive_avg_pool2d windows: for avg_pool2d the
// window clipped to the padded input gives the count_include_pad divisor,
// then to the input; adaptive rows run floor(i h / oh) to ceil((i + 1) h / oh).
ENCORE_HOST_DEVICE PoolWindow avg_pool_window(const PoolGeom& g, AvgPoolMode mode, int64_t i, int64_t j) {
  PoolWindow win{};
  if (mode == AvgPoolMode::kAdaptive) {
    win.h0 = (i * g.h) / g.oh;
    win.h1 = ((i + 1) * g.h + g.oh - 1) / g.oh;
    win.w0 = (j * g.w) / g.ow;
    win.w1 = ((j + 1) * g.w + g.ow - 1) / g.ow;
    win.divisor = static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
    return win;
  }
  int64_t h0 = i * g.stride_h - g.pad_h, w0 = j * g.stride_w - g.pad_w;
  int64_t h1 = hd_min(h0 + g.kh, g.h + g.pad_h), w1 = hd_min(w0 + g.kw, g.w + g.pad_w);
  // In double: a huge kernel's padded window (half of it padding) can pass
  // 2^63 elements; below 2^53 the double is exact, the divisor as in int64.
  const double padded = static_cast<double>(h1 - h0) * static_cast<double>(w1 - w0);
  h0 = hd_max(h0, 0), w0 = hd_max(w0, 0);
  h1 = hd_min(h1, g.h), w1 = hd_min(w1, g.w);
  win.h0 = h0, win.h1 = h1, win.w0 = w0, win.w1 = w1;
  const int64_t inside = (h1 - h0) * (w1 - w0);
  win.divisor = static_cast<float>(mode == AvgPoolMode::kIncludePad ? padded : (inside > 0 ? inside : 0));
  return win;
}

// The winner of a max-pooling window: its value and its flat index in the
// input plane (-1 when no tap of the window lies inside the input).
struct MaxTap {
  float value;
  int64_t flat;
};

// The taps [r0, r1) of a window axis (first tap at `start`, k taps dil
// apart) that lie inside [0, n). Walking only those keeps a huge kernel
// (half of it padding: pool_geom allows that) from costing k steps per
// output. Nothing wraps for the sizes pool_geom accepts.
struct TapRange {
  int64_t r0, r1;
};
ENCORE_HOST_DEVICE TapRange taps_inside(int64_t start, int64_t k, int64_t dil, int64_t n) {
  if (dil == 1) {   // the common case, without a division
    const int64_t r0 = hd_max(0, -start);
    return {r0, hd_max(r0, hd_min(k, n - start))};
  }
  const int64_t r0 = start >= 0 ? 0 : (-start - 1) / dil + 1;                 // first r: start + r dil >= 0
  const int64_t r1 = start >= n ? 0 : hd_min(k, (n - start - 1) / dil + 1);   // past the last r: < n
  return {r0, hd_max(r0, r1)};
}

// Max pooling of output (i, j) over the dilated taps inside the input, row
// by row: the first largest tap wins ties and a NaN wins over numbers
// (PyTorch's rule; `v != v` is the NaN test both compilers keep). `at(flat)`
// reads the plane's input at ih * w + iw as float.
template <typename At>
ENCORE_HOST_DEVICE MaxTap max_pool_window(const PoolGeom& g, int64_t i, int64_t j, At at) {
  MaxTap m{-INFINITY, -1};
  const int64_t h0 = i * g.stride_h - g.pad_h, w0 = j * g.stride_w - g.pad_w;
  const TapRange rows = taps_inside(h0, g.kh, g.dil_h, g.h), cols = taps_inside(w0, g.kw, g.dil_w, g.w);
  for (int64_t r = rows.r0; r < rows.r1; ++r) {
    const int64_t ih = h0 + r * g.dil_h;
    for (int64_t s = cols.r0; s < cols.r1; ++s) {
      const int64_t iw = w0 + s * g.dil_w;
      const float v = at(ih * g.w + iw);
      if (m.flat < 0 || v > m.value || (v != v && m.value == m.value)) m = {v, ih * g.w + iw};
    }
  }
  return m;
}

// The factor of a running-statistics update (BatchNormArgs): momentum, or
// 1 / the batches counted (PyTorch's 1.0 / float(num_batches_tracked), in
// double, then rounded once to the f32 the update computes in).
ENCORE_HOST_DEVICE float bn_update_factor(const BatchNormArgs& a) {
  if (a.num_batches_tracked == nullptr) return a.momentum;
  return static_cast<float>(1.0 / static_cast<double>(*a.num_batches_tracked));
}

}  // namespace encore::backend
