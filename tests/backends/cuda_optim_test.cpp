// CUDA optimizer kernels against the CPU: AdamW and SGD updates over several
// steps (f32 bit for bit: NOTE [ CUDA AdamW bits ]; bf16 to one rounding),
// learning-rate and step tensors read on the device, and gradient clipping.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "encore/encore.h"
#include "encore/optim.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

const Device kGpu = Device::cuda(0);

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// The same parameters and gradient sequence on CPU and CUDA; after every step
// the CUDA parameters, brought back, must be within atol of the CPU's. With
// strided_first, parameter 0 is a transposed (non-contiguous) view on both,
// which sends AdamW down its per-parameter kernels instead of the one launch
// over all parameters (NOTE [ One AdamW launch ]).
void expect_steps_match(const MakeOptimizer& make, DType dtype, double atol, bool strided_first = false) {
  std::vector<Tensor> cpu, gpu;
  for (int i = 0; i < 3; ++i) {
    Tensor p = testing::random_tensor({i == 0 ? 257 : 7, 5}, 10 + i).to(dtype);
    const bool strided = strided_first && i == 0;
    cpu.push_back((strided ? p.t().contiguous().t() : p.clone()).detach().requires_grad_());
    gpu.push_back((strided ? p.to(kGpu).t().contiguous().t() : p.to(kGpu)).detach().requires_grad_());
    if (strided) {
      EXPECT_FALSE(cpu.back().is_contiguous() || gpu.back().is_contiguous());
    }
  }
  std::unique_ptr<optim::Optimizer> opt_cpu = make(cpu), opt_gpu = make(gpu);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      Tensor g = testing::random_tensor(cpu[i].shape(), 100 * step + i).to(dtype);
      cpu[i].set_grad(g);
      gpu[i].set_grad(g.to(kGpu));
    }
    if (step == 3) {   // a schedule's host write of the lr tensor takes effect on the device too
      opt_cpu->set_lr(opt_cpu->get_lr() * 0.5);
      opt_gpu->set_lr(opt_gpu->get_lr() * 0.5);
    }
    opt_cpu->step();
    opt_gpu->step();
    for (size_t i = 0; i < cpu.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "step " << step << " parameter " << i);
      testing::expect_near(gpu[i].detach().to(kCPU), testing::values(cpu[i]), atol, 0);
    }
  }
}

TEST(CudaOptimTest, AdamWMatchesTheCpuBitForBitInF32) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (bool strided_first : {false, true}) {   // the one launch over all parameters, then per parameter
    SCOPED_TRACE(strided_first ? "per-parameter kernels" : "one launch");
    expect_steps_match([](std::vector<Tensor> p) {
      return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
    }, kFloat32, 0.0, strided_first);
  }
}

TEST(CudaOptimTest, AdamWOnBFloat16ParametersRoundsLikeTheCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_steps_match([](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-2});
  }, kBFloat16, 0.0);
}

TEST(CudaOptimTest, SgdPlainMomentumAndNesterovMatchTheCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (auto [momentum, nesterov] : {std::pair{0.0, false}, std::pair{0.9, false}, std::pair{0.9, true}}) {
    SCOPED_TRACE(::testing::Message() << "momentum " << momentum << " nesterov " << nesterov);
    expect_steps_match([momentum, nesterov](std::vector<Tensor> p) {
      return std::make_unique<optim::SGD>(std::move(p), optim::SgdOptions{.lr = 0.1, .momentum = momentum,
                                                                            .nesterov = nesterov,
                                                                            .weight_decay = 0.01});
    }, kFloat32, 0.0);
  }
}

TEST(CudaOptimTest, ClipGradNormMatchesTheCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (double max_norm : {0.5, 1e6}) {   // clipping, and no clipping (gradients untouched)
    SCOPED_TRACE(::testing::Message() << "max_norm " << max_norm);
    std::vector<Tensor> cpu, gpu;
    for (int i = 0; i < 3; ++i) {
      Tensor p = zeros({i == 0 ? 100000 : 9}).requires_grad_();
      Tensor g = testing::random_tensor(p.shape(), 40 + i);
      p.set_grad(g);
      cpu.push_back(p);
      Tensor q = zeros(p.shape(), kGpu).requires_grad_();
      q.set_grad(g.to(kGpu));
      gpu.push_back(q);
    }
    const float norm_cpu = optim::clip_grad_norm(cpu, max_norm).item<float>();
    Tensor norm_gpu = optim::clip_grad_norm(gpu, max_norm);
    EXPECT_TRUE(norm_gpu.device().is_cuda());
    EXPECT_NEAR(norm_gpu.item<float>(), norm_cpu, 1e-6 * norm_cpu);
    for (size_t i = 0; i < cpu.size(); ++i) {
      testing::expect_near(gpu[i].grad().to(kCPU), testing::values(cpu[i].grad()), 1e-6, 1e-5);
    }
  }
}

}  // namespace
}  // namespace encore
