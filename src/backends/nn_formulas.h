// The element rules of the nn family that the CPU kernels (cpu/nn.cpp) and
// the CUDA kernels (cuda/nn.cu) share, written once with ENCORE_HOST_DEVICE
// (src/core/host_device.h), as Philox is: which class ids count, which
// elements dropout keeps, and multinomial's draws (cpu/index.cpp,
// cuda/index.cu), so both devices decide alike. nvcc-safe.
//
//   if (!backend::counted_class(t, classes, ignore_index)) continue;   // skipped row
//   const bool keep = backend::dropout_keep(seed, offset, i, p);        // element i of one draw
//   const int64_t c = backend::multinomial_category([&](int64_t k) { return float(w[k]); }, classes, u, out, s);
#pragma once

#include <cstdint>

#include "src/core/host_device.h"
#include "src/core/philox.h"

namespace encore::backend {

// A cross-entropy row counts when its target is not ignored and is a class
// in [0, classes) (NOTE [ Index checks ] in kernel_table.h).
ENCORE_HOST_DEVICE bool counted_class(int64_t target, int64_t classes, int64_t ignore_index) {
  return target != ignore_index && target >= 0 && target < classes;
}

// Dropout keeps element i of the draw at `offset` of generator `seed` when
// uniform(philox(offset + i, seed) word 0) >= p: the same seed and offset
// give the same mask on every device.
ENCORE_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t offset, int64_t i, float p) {
  const philox::Block r = philox::philox4x32(offset + static_cast<uint64_t>(i), seed);
  return philox::uniform(r.x[0]) >= p;
}

// Draw s of row r of a multinomial request at `offset` of generator `seed`:
// uniform(philox(offset + r * samples + s, seed) word 0), on [0, 1).
ENCORE_HOST_DEVICE float multinomial_uniform(uint64_t seed, uint64_t offset, int64_t r, int64_t samples,
                                             int64_t s) {
  const uint64_t counter = offset + static_cast<uint64_t>(r) * static_cast<uint64_t>(samples) + static_cast<uint64_t>(s);
  return philox::uniform(philox::philox4x32(counter, seed).x[0]);
}

// The category that the draw u in [0, 1) picks from one row of weights, by
// inverse CDF: the first positive weight not yet drawn whose running sum
// exceeds u * total. weight(c) gives class c's weight as f32; drawn[0,
// ndrawn) are the row's earlier draws without replacement (weight 0 now).
// A row with no positive weight left gives 0, one whose total is infinite
// (an infinite weight: no distribution) its last positive category.
//
// NOTE [ Multinomial sums in double ]
// Why are the total and the running sum doubles? In f32 they fail for
// weights the op accepts: three finite weights of 2e38 sum to inf, and
// every draw went to the last of them; after a weight of 1, weights below
// 2^-25 (3000 of 2e-8) add nothing to the running sum, so they were never
// drawn (12 draws of 200000 expected), though drawn at their rate when they
// came first. A double holds any sum of f32 weights (classes * 2^128 is far
// below 2^1024) and adds 2e-8 to 1 (53 bits). Adds and one multiply, no
// multiply-add pair, in one fixed order: the CPU and CUDA give the same
// category for the same Philox number, and a replay the eager draw.
template <typename Weight>
ENCORE_HOST_DEVICE int64_t multinomial_category(const Weight& weight, int64_t classes, float u,
                                                const int64_t* drawn, int64_t ndrawn) {
  auto counted = [&](int64_t c, float v) {
    if (!(v > 0.0f)) return false;
    for (int64_t s = 0; s < ndrawn; ++s) {
      if (drawn[s] == c) return false;
    }
    return true;
  };
  constexpr double kMaxDouble = 1.7976931348623157e308;
  double total = 0.0;
  int64_t last = -1;
  for (int64_t c = 0; c < classes; ++c) {
    const float v = weight(c);
    if (counted(c, v)) {
      total += static_cast<double>(v);
      last = c;
    }
  }
  if (last < 0) return 0;
  if (!(total <= kMaxDouble)) return last;   // an infinite weight
  const double target = static_cast<double>(u) * total;   // below total: u <= 1 - 2^-24
  double cum = 0.0;
  for (int64_t c = 0; c < classes; ++c) {
    const float v = weight(c);
    if (!counted(c, v)) continue;
    cum += static_cast<double>(v);
    if (cum > target) return c;
  }
  return last;
}

}  // namespace encore::backend
