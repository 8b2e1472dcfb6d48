// The CUDA backend's first contact: device discovery and one kernel. Skips
// without a GPU, unless ENCORE_REQUIRE_GPU=1 makes a missing GPU a failure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "encore/device.h"
#include "encore/tensor.h"
#include "src/backends/cuda/copy.h"
#include "src/backends/cuda/runtime.h"

namespace encore::cuda {
namespace {

bool gpu_required() {
  const char* v = std::getenv("ENCORE_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

#define ENCORE_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                                   \
    absl::StatusOr<int> n = device_count();                                              \
    if (!n.ok()) {                                                                       \
      if (gpu_required()) FAIL() << "ENCORE_REQUIRE_GPU=1 but " << n.status();           \
      GTEST_SKIP() << "no usable GPU: " << n.status();                                   \
    }                                                                                    \
  } while (0)

TEST(CudaRuntimeTest, NoGpuIsAStatusNotACrash) {
  absl::StatusOr<int> n = device_count();
  if (n.ok()) {
    EXPECT_GT(*n, 0);
    EXPECT_TRUE(cuda_available());
  } else {
    EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable) << n.status();
    EXPECT_NE(n.status().message().find("cudaGetDeviceCount"), absl::string_view::npos);
    EXPECT_FALSE(cuda_available());
    EXPECT_TRUE(default_device().is_cpu());
  }
}

TEST(CudaRuntimeTest, FillKernelWritesEveryElement) {
  ENCORE_SKIP_WITHOUT_GPU();
  constexpr int64_t kN = 1000;
  Tensor t = empty({kN}, kFloat32, Device::cuda(0));
  fill(t, 2.5);
  for (float v : t.to(kCPU).to_vector<float>()) EXPECT_EQ(v, 2.5f);
}

}  // namespace
}  // namespace encore::cuda
