// The element rules of the nn family that the CPU kernels (cpu/nn.cpp) and
// the CUDA kernels (cuda/nn.cu) share, written once with ENCORE_HOST_DEVICE
// (src/core/host_device.h), as Philox is: which class ids count, and which
// elements dropout keeps, so both devices decide alike. nvcc-safe.
//
//   if (!backend::counted_class(t, classes, ignore_index)) continue;   // skipped row
//   const bool keep = backend::dropout_keep(seed, offset, i, p);        // element i of one draw
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

}  // namespace encore::backend
