// Shared helpers for the CUDA backend's tests: skip without a GPU (or fail
// when ENCORE_REQUIRE_GPU=1), and compare a CUDA result with the CPU one.
//
//   TEST(CudaBinaryTest, AddMatchesCpu) {
//     ENCORE_SKIP_WITHOUT_GPU();
//     Tensor a = testing::random_tensor({4, 5}, 1), b = testing::random_tensor({5}, 2);
//     testing::expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return add(in[0], in[1]); },
//                                      {a, b}, /*atol=*/0, /*rtol=*/0);
//   }
//
// NOTE [ CUDA tolerances ]: elementwise f32 ops are compared exactly or to a
// few ulps (GPU libm differs from glibc in the last bit for exp/tanh/erf);
// reductions and GEMMs to 1e-5 relative in f32 (different summation order,
// TF32 disabled); f16/bf16 to one rounding step of the storage type (1e-3 and
// 1e-2 relative), since CPU and GPU both compute in f32 and round once.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "encore/encore.h"
#include "tests/gpu_required.h"
#include "tests/test_util.h"

namespace encore::testing {

// Runs fn on CPU copies and on CUDA copies of `inputs` (their values and
// dtypes kept) and expects the CUDA output, brought back, to be near the CPU
// output. With `backward`, also runs sum(out * w) backward on both for every
// float input and compares the gradients.
void expect_cuda_matches_cpu(const Fn& fn, const std::vector<Tensor>& inputs, double atol, double rtol,
                             bool backward = false);

}  // namespace encore::testing

// Skips the test when no usable GPU exists; fails instead when
// ENCORE_REQUIRE_GPU=1, so a run on a GPU machine proves the tests ran.
#define ENCORE_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                                   \
    if (!::encore::cuda_available()) {                                                   \
      if (::encore::testing::gpu_required()) FAIL() << "ENCORE_REQUIRE_GPU=1 but no usable CUDA device"; \
      GTEST_SKIP() << "no usable GPU";                                                   \
    }                                                                                    \
  } while (0)
