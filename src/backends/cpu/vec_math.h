// Array math for the CPU kernels: o[i] = f(x[i]) over float arrays, with
// SLEEF's vectorized 1-ulp functions (libsleef, Debian's libsleef-dev) and an
// erf of our own, within 0.64 ulp, and a float one within 4 ulp for the
// exact GELU, 4.3x as fast as SLEEF's there (NOTEs in vec_math.cpp).
//
//   float t[256];
//   vec_erf(t, x, n);          // t[i] = erf(x[i]), |error| <= 0.64 ulp
//   vec_pow(t, x, 1.7f, n);    // t[i] = x[i]^1.7
//
// NOTE [ Deterministic vector math ]: every element goes through the same
// vector function, wherever it lies: a tail shorter than the vector is
// padded into a full one, never computed by a scalar libm call. So an
// element's bits do not depend on how a kernel chunks the array (threads,
// blocks, strided or contiguous layouts). The variant is picked once per
// process: SLEEF's no-FMA builds for AVX-512F (16 lanes), AVX (8) or SSE2 (4),
// and erf's one source compiled for each, which run the same IEEE
// operations in the same order and so give the same bits on every x86-64
// machine (tests/ops/vec_math_test.cpp checks the variants this CPU runs
// against each other). SLEEF's own dispatchers would
// pick FMA variants, whose bits differ between machines.
//
// n counts floats; o may alias x (each vector is loaded before it is stored).
#pragma once

#include <cstdint>

namespace encore::cpu {

void vec_exp(float* o, const float* x, int64_t n);
void vec_log(float* o, const float* x, int64_t n);
void vec_tanh(float* o, const float* x, int64_t n);
void vec_erf(float* o, const float* x, int64_t n);
// erf within 4 ulp, in float arithmetic, for the exact GELU (NOTE [ A float
// erf for GELU ] in vec_math.cpp).
void vec_erf_fast(float* o, const float* x, int64_t n);
void vec_pow(float* o, const float* x, float p, int64_t n);

// The variants by name ("avx512f", "avx", "sse2"; elsewhere than x86-64 one
// "scalar" loop over glibc's functions), for tests: vec_math_force
// makes every later call use `isa` (false when this CPU cannot run it);
// vec_math_isa() names the one in use.
bool vec_math_force(const char* isa);
const char* vec_math_isa();

}  // namespace encore::cpu
