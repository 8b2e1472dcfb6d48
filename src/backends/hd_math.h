// The arithmetic the CPU and CUDA backends share in host/device formulas
// (src/core/host_device.h): float libm calls that are glibc's on the host and
// CUDA's on the device (hd::), and correctly rounded f32/f64 operations that
// no compiler contracts into a fused multiply-add. nvcc-safe: no Abseil, no
// tensor types. Used by the element formulas of unary_math.h, optim_math.h
// and adamw_coefs.h, so that there is one shim, not one per family.
//
//   const float y = hd::tanh(x);                       // tanhf on the device, std::tanh on the host
//   const float p2 = fsub_rn(p, fmul_rn(lr, update));  // two roundings on every compiler
//   const double t = dmul_rn(a, b);
//
// Rounded operations: on the device CUDA's explicitly rounded intrinsics
// (nvcc contracts a * b + c into an FMA by default, --fmad=true; these it
// never does); on the host plain operators, since the project builds every
// C++ source with -ffp-contract=off (meson.build).
//
// The rule for a shared formula: either every multiply-add in it goes
// through these (optim_math.h, adamw_coefs.h), or its .cu compiles with
// --fmad=false (cu_no_fma_families in src/meson.build: unary_math.h uses
// plain operators). nn_formulas.h and philox.h have no multiply-add pairs.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "src/core/host_device.h"

namespace encore::backend {

// ---- hd: float math, glibc's on the host, CUDA's on the device ----

namespace hd {
#ifdef __CUDA_ARCH__
ENCORE_HOST_DEVICE_INLINE float exp(float x) { return expf(x); }
ENCORE_HOST_DEVICE_INLINE float log(float x) { return logf(x); }
ENCORE_HOST_DEVICE_INLINE float sqrt(float x) { return sqrtf(x); }
ENCORE_HOST_DEVICE_INLINE float pow(float x, float y) { return powf(x, y); }
ENCORE_HOST_DEVICE_INLINE float tanh(float x) { return tanhf(x); }
ENCORE_HOST_DEVICE_INLINE float erf(float x) { return erff(x); }
ENCORE_HOST_DEVICE_INLINE float abs(float x) { return fabsf(x); }
ENCORE_HOST_DEVICE_INLINE uint32_t float_bits(float x) { return __float_as_uint(x); }
ENCORE_HOST_DEVICE_INLINE float bits_float(uint32_t u) { return __uint_as_float(u); }
ENCORE_HOST_DEVICE_INLINE uint32_t min(uint32_t a, uint32_t b) { return b < a ? b : a; }
#else
ENCORE_HOST_DEVICE_INLINE float exp(float x) { return std::exp(x); }
ENCORE_HOST_DEVICE_INLINE float log(float x) { return std::log(x); }
ENCORE_HOST_DEVICE_INLINE float sqrt(float x) { return std::sqrt(x); }
ENCORE_HOST_DEVICE_INLINE float pow(float x, float y) { return std::pow(x, y); }
ENCORE_HOST_DEVICE_INLINE float tanh(float x) { return std::tanh(x); }
ENCORE_HOST_DEVICE_INLINE float erf(float x) { return std::erf(x); }
ENCORE_HOST_DEVICE_INLINE float abs(float x) { return std::abs(x); }
ENCORE_HOST_DEVICE_INLINE uint32_t float_bits(float x) { return std::bit_cast<uint32_t>(x); }
ENCORE_HOST_DEVICE_INLINE float bits_float(uint32_t u) { return std::bit_cast<float>(u); }
ENCORE_HOST_DEVICE_INLINE uint32_t min(uint32_t a, uint32_t b) { return std::min(a, b); }
#endif
}  // namespace hd

// ---- f32 operations, each rounded on its own ----

#ifdef __CUDA_ARCH__
ENCORE_HOST_DEVICE float fadd_rn(float a, float b) { return __fadd_rn(a, b); }
ENCORE_HOST_DEVICE float fsub_rn(float a, float b) { return __fsub_rn(a, b); }
ENCORE_HOST_DEVICE float fmul_rn(float a, float b) { return __fmul_rn(a, b); }
ENCORE_HOST_DEVICE float fdiv_rn(float a, float b) { return __fdiv_rn(a, b); }
ENCORE_HOST_DEVICE float fsqrt_rn(float a) { return __fsqrt_rn(a); }
#else
ENCORE_HOST_DEVICE float fadd_rn(float a, float b) { return a + b; }
ENCORE_HOST_DEVICE float fsub_rn(float a, float b) { return a - b; }
ENCORE_HOST_DEVICE float fmul_rn(float a, float b) { return a * b; }
ENCORE_HOST_DEVICE float fdiv_rn(float a, float b) { return a / b; }
ENCORE_HOST_DEVICE float fsqrt_rn(float a) { return std::sqrt(a); }
#endif

// ---- f64 operations, each rounded on its own ----
#ifdef __CUDA_ARCH__
ENCORE_HOST_DEVICE double dmul_rn(double a, double b) { return __dmul_rn(a, b); }
ENCORE_HOST_DEVICE double dsub_rn(double a, double b) { return __dsub_rn(a, b); }
ENCORE_HOST_DEVICE double ddiv_rn(double a, double b) { return __ddiv_rn(a, b); }
ENCORE_HOST_DEVICE double dsqrt_rn(double a) { return __dsqrt_rn(a); }
#else
ENCORE_HOST_DEVICE double dmul_rn(double a, double b) { return a * b; }
ENCORE_HOST_DEVICE double dsub_rn(double a, double b) { return a - b; }
ENCORE_HOST_DEVICE double ddiv_rn(double a, double b) { return a / b; }
ENCORE_HOST_DEVICE double dsqrt_rn(double a) { return std::sqrt(a); }
#endif

}  // namespace encore::backend
