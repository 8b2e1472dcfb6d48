// The CUDA cnn family against the CPU backend: conv2d through cuDNN (f32 to
// a GEMM tolerance, f16/bf16 to a rounding step; several stride / padding /
// dilation / groups combinations, with and without bias; every gradient),
// pooling (the gathers sum in the CPU's order: f32 pooling results equal the
// CPU's bit for bit), batch norm (statistics and running updates), a captured
// conv-bn-pool step replayed equal to eager, and cuDNN's status mapping (no
// GPU needed). Skips the device tests without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "encore/capture.h"
#include "encore/encore.h"
#include "src/backends/cuda/cudnn.h"
#include "tests/backends/cuda_test_util.h"

namespace encore {
namespace {

using testing::expect_cuda_matches_cpu;
using testing::random_tensor;
using testing::values;

constexpr Device kGpu = Device::cuda(0);
const DType kFloats[] = {kFloat32, kFloat16, kBFloat16};
double tol_for(DType t) { return t == kFloat32 ? 2e-5 : t == kFloat16 ? 4e-3 : 3e-2; }

struct ConvCase {
  Shape x, w;
  Size2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const ConvCase kCases[] = {
    {{4, 3, 16, 16}, {8, 3, 3, 3}, 1, 1, 1, 1, true},
    {{2, 8, 9, 11}, {16, 4, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, true},
    {{2, 6, 8, 8}, {6, 1, 3, 3}, 1, 1, 1, 6, false},   // depthwise
    {{3, 16, 7, 7}, {32, 16, 1, 1}, 1, 0, 1, 1, true},
    {{1, 4, 12, 12}, {8, 2, 5, 5}, 3, 2, 2, 2, true},
};

TEST(CudaCnnTest, Conv2dForwardAndGradientsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (const ConvCase& c : kCases) {
    for (DType dt : kFloats) {
      std::vector<Tensor> in = {random_tensor(c.x, 1).to(dt), random_tensor(c.w, 2).to(dt)};
      if (c.bias) in.push_back(random_tensor({c.w[0]}, 3).to(dt));
      const double tol = dt == kFloat32 ? 1e-4 : tol_for(dt) * 4;
      expect_cuda_matches_cpu(
          [c](const std::vector<Tensor>& t) {
            return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), c.stride, c.padding, c.dilation, c.groups);
          },
          in, tol, tol, /*backward=*/true);
    }
  }
}

TEST(CudaCnnTest, PoolingMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : kFloats) {
    Tensor x = random_tensor({3, 4, 13, 11}, 4).to(dt);
    const double exact = 0.0;
    expect_cuda_matches_cpu([](const std::vector<Tensor>& t) { return max_pool2d(t[0], 3, Size2(2), 1, 1, true); },
                            {x}, exact, exact, true);
    expect_cuda_matches_cpu([](const std::vector<Tensor>& t) { return max_pool2d(t[0], {2, 3}, Size2(1, 2), 0, 2); },
                            {x}, exact, exact, true);
    expect_cuda_matches_cpu([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], 3, Size2(2), 1, true, false); },
                            {x}, exact, exact, true);
    expect_cuda_matches_cpu([](const std::vector<Tensor>& t) { return avg_pool2d(t[0], 2, Size2(1), 1, false, true); },
                            {x}, exact, exact, true);
    expect_cuda_matches_cpu([](const std::vector<Tensor>& t) { return adaptive_avg_pool2d(t[0], {5, 3}); }, {x},
                            exact, exact, true);
    expect_cuda_matches_cpu([](const std::vector<Tensor>& t) { return adaptive_avg_pool2d(t[0], {17, 1}); }, {x},
                            exact, exact, true);
  }
}

TEST(CudaCnnTest, BatchNormMatchesCpuWithRunningStats) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : kFloats) {
    for (bool training : {true, false}) {
      Tensor rm = random_tensor({5}, 5).to(dt), rv = add(abs(random_tensor({5}, 6)), 0.5).to(dt);
      Tensor rm_gpu = rm.to(kGpu), rv_gpu = rv.to(kGpu);
      Tensor x = random_tensor({6, 5, 7, 9}, 7).to(dt), w = random_tensor({5}, 8).to(dt), b = random_tensor({5}, 9).to(dt);
      Tensor y = batch_norm(x, rm, rv, w, b, training, 0.3);
      Tensor y_gpu = batch_norm(x.to(kGpu), rm_gpu, rv_gpu, w.to(kGpu), b.to(kGpu), training, 0.3);
      testing::expect_near(y_gpu.to(kCPU).to(kFloat32), values(y.to(kFloat32)), tol_for(dt) * 4, tol_for(dt) * 4);
      testing::expect_near(rm_gpu.to(kCPU).to(kFloat32), values(rm.to(kFloat32)), tol_for(dt), tol_for(dt));
      testing::expect_near(rv_gpu.to(kCPU).to(kFloat32), values(rv.to(kFloat32)), tol_for(dt), tol_for(dt));
      expect_cuda_matches_cpu(
          [training](const std::vector<Tensor>& t) {
            Tensor m = t[3].clone(), v = t[4].clone();
            return batch_norm(t[0], m, v, t[1], t[2], training, 0.1);
          },
          {x, w, b, rm, rv}, tol_for(dt) * 8, tol_for(dt) * 8, /*backward=*/true);
    }
  }
}

TEST(CudaCnnTest, CapturedConvStepReplaysEqualEager) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor x = random_tensor({8, 3, 12, 12}, 10).to(kGpu);
  auto run = [&](Tensor& w, Tensor& rm, Tensor& rv) {
    Tensor h = conv2d(x, w, Tensor(), 1, 1);
    h = max_pool2d(relu(batch_norm(h, rm, rv, Tensor(), Tensor(), true)), 2);
    Tensor loss = sum(mul(h, h));
    loss.backward();
    NoGradGuard no_grad;
    w.add_(w.grad(), -1e-3);
    return std::vector<Tensor>{loss};
  };
  auto fresh = [] {
    return std::tuple{random_tensor({6, 3, 3, 3}, 11).to(kGpu).requires_grad_(), zeros({6}, kGpu), ones({6}, kGpu)};
  };
  auto [we, rme, rve] = fresh();
  std::vector<float> eager;
  for (int i = 0; i < 6; ++i) {
    autograd::zero_grad(we);
    eager.push_back(run(we, rme, rve)[0].item<float>());
  }
  auto [w, rm, rv] = fresh();
  absl::StatusOr<Graph> g = capture([&] {
    autograd::zero_grad(w);
    return run(w, rm, rv);
  });
  ASSERT_TRUE(g.ok()) << g.status();
  for (int i = 2; i < 6; ++i) {   // the warm-up ran steps 0 and 1
    ASSERT_TRUE(g->replay().ok());
    const float loss = g->output(0).item<float>();
    EXPECT_EQ(std::memcmp(&loss, &eager[i], sizeof(float)), 0) << "step " << i;
  }
  EXPECT_EQ(values(rm.to(kCPU)), values(rme.to(kCPU)));
  EXPECT_EQ(values(w.detach().to(kCPU)), values(we.detach().to(kCPU)));
}

TEST(CudaCnnTest, CudnnStatusesMapToCodes) {
  EXPECT_EQ(cuda::cudnn_status(CUDNN_STATUS_NOT_INITIALIZED, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cuda::cudnn_status(CUDNN_STATUS_BAD_PARAM, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::cudnn_status(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::cudnn_status(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "x").code(),
            absl::StatusCode::kResourceExhausted);
  const absl::Status s = cuda::cudnn_status(CUDNN_STATUS_EXECUTION_FAILED, "conv2d: cudnnConvolutionForward");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("conv2d: cudnnConvolutionForward"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cuDNN error"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace encore
