// The CUDA loss and index families and the comparisons against the CPU
// backend, forward and backward, in f32, f16 and bf16. Comparisons,
// gather, index_select, scatter_add (the same adds in the same order),
// topk, nll_loss and multinomial (the same Philox draws and f64 scans) are
// compared exactly; binary_cross_entropy_with_logits to a few ulps (CUDA's
// expf/logf against SLEEF on the CPU). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/backends/cuda_test_util.h"

namespace encore {
namespace {

using testing::expect_cuda_matches_cpu;
using testing::random_tensor;
using testing::values;

constexpr Device kGpu = Device::cuda(0);
const DType kFloats[] = {kFloat32, kFloat16, kBFloat16};

Tensor ids(Shape shape, int64_t size, uint64_t seed) {
  std::vector<int64_t> v;
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < numel_of(shape); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v.push_back(static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(size)));
  }
  return from_vector<int64_t>(v, shape);
}

TEST(CudaLossIndexTest, ComparisonsMatchCpuExactly) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    const Tensor a = mul(random_tensor({37, 41}, 1), 2.0).to(kInt32).to(dt);
    const Tensor b = mul(random_tensor({41}, 2), 2.0).to(kInt32).to(dt);
    using CompareFn = Tensor (*)(const Tensor&, const Tensor&);
    for (CompareFn tt : std::vector<CompareFn>{&eq, &ne, &lt, &le, &gt, &ge}) {
      expect_cuda_matches_cpu([tt](const auto& in) { return tt(in[0], in[1]); }, {a, b}, 0, 0);
      expect_cuda_matches_cpu([tt](const auto& in) { return tt(in[0].t(), in[1].view({41, 1})); }, {a, b}, 0, 0);
    }
    if (dt != kBool) {
      expect_cuda_matches_cpu([](const auto& in) { return lt(in[0], 1.0); }, {a}, 0, 0);
      expect_cuda_matches_cpu([](const auto& in) { return eq(in[0], -1.0); }, {a}, 0, 0);
    }
  }
}

TEST(CudaLossIndexTest, LossesMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : kFloats) {
    const double tol = dt == kFloat32 ? 1e-5 : 2e-2;
    const Tensor x = mul(random_tensor({300, 7}, 3), 4.0).to(dt), t = sigmoid(random_tensor({300, 7}, 4)).to(dt);
    const Tensor w = sigmoid(random_tensor({7}, 5)).to(dt), pw = add(sigmoid(random_tensor({7}, 6)), 0.5).to(dt);
    for (Reduction r : {Reduction::kMean, Reduction::kNone}) {
      expect_cuda_matches_cpu([r](const auto& in) { return mse_loss(in[0], in[1], r); }, {x, t}, tol, tol, true);
      // pos_weight takes no gradient: it travels beside the inputs.
      expect_cuda_matches_cpu(
          [r, pw](const auto& in) {
            return binary_cross_entropy_with_logits(in[0], in[1], in[2], pw.to(in[0].device()), r);
          },
          {x, t, w}, tol, tol, true);
    }
    const Tensor lp = log_softmax(random_tensor({64, 10, 3}, 7), 1).to(dt);
    Tensor tgt = ids({64, 3}, 10, 8);
    tgt.reshape({-1}).slice(0, 0, 5).fill_(-100);
    const Tensor cw = sigmoid(random_tensor({10}, 9)).to(dt);
    for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      // Elementwise parts are exact; the sums reduce in CUDA's own order.
      expect_cuda_matches_cpu(
          [&](const auto& in) { return nll_loss(in[0], in[1], cw.to(in[0].device()), -100, r); }, {lp, tgt}, tol,
          tol, true);
    }
  }
}

TEST(CudaLossIndexTest, IndexOpsMatchCpuExactly) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : kFloats) {
    const Tensor x = random_tensor({33, 17, 5}, 10).to(dt);
    const Tensor gi = ids({33, 40, 5}, 17, 11);
    expect_cuda_matches_cpu([&](const auto& in) { return gather(in[0], 1, in[1]); }, {x, gi}, 0, 0, true);
    const Tensor si = ids({9}, 33, 12).to(kInt32);
    expect_cuda_matches_cpu([&](const auto& in) { return index_select(in[0], 0, in[1]); }, {x, si}, 0, 0, true);
    const Tensor src = random_tensor({33, 40, 5}, 13).to(dt);
    expect_cuda_matches_cpu([&](const auto& in) { return scatter_add(in[0], 1, in[1], in[2]); }, {x, gi, src}, 0, 0,
                            true);
    for (bool largest : {true, false}) {
      expect_cuda_matches_cpu([largest](const auto& in) { return topk(in[0], 6, 1, largest).first; }, {x}, 0, 0, true);
      expect_cuda_matches_cpu([largest](const auto& in) { return topk(in[0], 3, -1, largest).second; }, {x}, 0, 0);
    }
  }
}

TEST(CudaLossIndexTest, MultinomialDrawsTheCpusSamples) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : kFloats) {
    const Tensor p = sigmoid(random_tensor({16, 50}, 14)).to(dt);
    for (bool replacement : {true, false}) {
      Generator gc(5), gg(5, kGpu);
      const Tensor c = multinomial(p, 8, replacement, &gc);
      const Tensor g = multinomial(p.to(kGpu), 8, replacement, &gg);
      EXPECT_EQ(values(g.to(kCPU)), values(c));
      EXPECT_EQ(gg.offset(), gc.offset());
    }
  }
}

// NOTE [ Multinomial sums in double ]: weights whose f32 sum overflows and
// small weights after a large one, drawn alike on both devices.
TEST(CudaLossIndexTest, MultinomialOfExtremeWeightsDrawsTheCpusSamples) {
  ENCORE_SKIP_WITHOUT_GPU();
  std::vector<float> tail(3001, 2e-8f);
  tail[0] = 1.0f;
  const Tensor overflow = from_vector<float>({2e38f, 2e38f, 2e38f, 0.0f}, {1, 4}).expand({300, 4}).contiguous();
  const Tensor absorb = from_vector<float>(tail, {1, 3001}).expand({16, 3001}).contiguous();
  for (const Tensor& p : {overflow, absorb}) {
    for (bool replacement : {true, false}) {
      SCOPED_TRACE(::testing::Message() << shape_str(p.shape()) << (replacement ? " with" : " without")
                                        << " replacement");
      Generator gc(9), gg(9, kGpu);
      const Tensor c = multinomial(p, replacement ? 500 : 2, replacement, &gc);
      const Tensor g = multinomial(p.to(kGpu), replacement ? 500 : 2, replacement, &gg);
      EXPECT_EQ(values(g.to(kCPU)), values(c));
    }
  }
}

}  // namespace
}  // namespace encore
