// The CUDA backend's first contact: device discovery and one kernel. Skips
// without a GPU, unless ENCORE_REQUIRE_GPU=1 makes a missing GPU a failure.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "encore/device.h"
#include "encore/error.h"
#include "encore/tensor.h"
#include "src/backends/cuda/runtime.h"
#include "src/backends/kernels.h"
#include "tests/gpu_required.h"

namespace encore::cuda {
namespace {

using testing::gpu_required;

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
  backend::fill(t, 2.5);
  for (float v : t.to(kCPU).to_vector<float>()) EXPECT_EQ(v, 2.5f);
}

// Events order and time work on encore's stream.
TEST(CudaRuntimeTest, EventsTimeWorkOnEncoresStream) {
  ENCORE_SKIP_WITHOUT_GPU();
  Event start(0), stop(0);
  Tensor t = empty({1 << 24}, kFloat32, Device::cuda(0));
  start.record();
  for (int i = 0; i < 10; ++i) backend::fill(t, 1.0 + i);
  stop.record();
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GT(stop.elapsed_ms(start), 0.0f);   // 10 fills of 64 MiB take microseconds at least
  Event moved = std::move(stop);
  EXPECT_TRUE(moved.query());
  Event ordering(0, /*timing=*/false);
  ordering.record();
  ordering.synchronize();
  EXPECT_THROW((void)ordering.elapsed_ms(start), Error);
  EXPECT_EQ(t.to(kCPU).to_vector<float>()[12345], 10.0f);
}

// The kernel error word starts clear and is read and cleared on the host.
TEST(CudaRuntimeTest, ErrorWordIsMappedAndCleared) {
  ENCORE_SKIP_WITHOUT_GPU();
  ASSERT_NE(error_word(0), nullptr);
  synchronize(0);
  (void)take_error_word(0);
  EXPECT_EQ(take_error_word(0), 0u);
}

}  // namespace
}  // namespace encore::cuda
