// Whether this run must use a GPU: ENCORE_REQUIRE_GPU=1 (bench/gpu-check sets
// it) turns every "no GPU, skipped" into a failure, so a run on a GPU machine
// proves the GPU tests really ran.
//
//   if (!cuda_available()) {
//     if (testing::gpu_required()) FAIL() << "ENCORE_REQUIRE_GPU=1 but no GPU";
//     GTEST_SKIP() << "no usable GPU";
//   }
#pragma once

#include <cstdlib>
#include <cstring>

namespace encore::testing {

inline bool gpu_required() {
  const char* v = std::getenv("ENCORE_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace encore::testing
