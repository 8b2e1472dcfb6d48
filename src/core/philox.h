// Philox 4x32-10 (Salmon et al., SC'11): a counter-based generator. The same
// (key, counter) gives the same four 32-bit words on every device and thread,
// so draw i of a request can be computed independently of all other draws.
// Header-only, host and device (CUDA includes it too).
#pragma once

#include <cmath>
#include <cstdint>

#include "src/core/host_device.h"

namespace encore::philox {

struct Block { uint32_t x[4]; };

ENCORE_HOST_DEVICE Block philox4x32(uint64_t counter, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform on [0, 1) with 24 random bits.
ENCORE_HOST_DEVICE float uniform(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// Standard normal by Box-Muller from two words.
ENCORE_HOST_DEVICE float normal(uint32_t a, uint32_t b) {
  const float u1 = (static_cast<float>(a >> 8) + 1.0f) * (1.0f / 16777216.0f);   // (0, 1]
  const float u2 = static_cast<float>(b >> 8) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

}  // namespace encore::philox
