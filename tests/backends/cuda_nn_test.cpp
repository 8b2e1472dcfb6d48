// The CUDA nn family (softmax, log_softmax, cross_entropy, layer_norm,
// embedding, dropout) against the CPU backend, forward and backward, in f32,
// f16 and bf16, on sizes at warp/block edges (1, 7, 255, 256, 257, >1024 per
// row, 100k elements), contiguous and non-contiguous inputs. Embedding
// backward and dropout are compared exactly (same order, same Philox draws);
// the kernels' NOTE [ Index checks ] paths and the determinism of the column
// sums are checked by calling the backends directly. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include <cstdint>
#include <vector>

#include "src/backends/kernels.h"
#include "src/core/kernel_errors.h"
#include "tests/backends/cuda_test_util.h"

namespace encore {
namespace {

using testing::expect_cuda_matches_cpu;
using testing::random_tensor;
using testing::values;

constexpr Device kGpu = Device::cuda(0);
const DType kFloats[] = {kFloat32, kFloat16, kBFloat16};

// NOTE [ CUDA tolerances ] (cuda_test_util.h): reductions in f32 to ~1e-5
// relative (another summation order), 16-bit types to a rounding step.
double tol_for(DType t) { return t == kFloat32 ? 2e-5 : t == kFloat16 ? 4e-3 : 3e-2; }

// n ids in [0, classes), with every `ignore_every`-th one replaced by `ignored` (0: none).
Tensor class_ids(int64_t n, int64_t classes, DType dtype, uint64_t seed, int ignore_every = 0,
                 int64_t ignored = -100) {
  std::vector<int64_t> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(classes));
    if (ignore_every > 0 && i % ignore_every == ignore_every - 1) v[i] = ignored;
  }
  return from_vector<int64_t>(v, {n}).to(dtype);
}

// ---- softmax / log_softmax ----

struct SoftmaxCase { Shape shape; int64_t dim; };

// Rows of 1..1025 (warp rows, block rows at > 1024), 100k in one row, and
// reductions over a dim that is not the last (inner > 1).
const SoftmaxCase kSoftmaxCases[] = {
    {{1, 1}, 1},      {{4, 7}, 1},    {{3, 255}, 1}, {{2, 256}, -1}, {{5, 257}, 1},  {{2, 1025}, 1},
    {{1, 100000}, 1}, {{3, 7, 5}, 1}, {{2, 257, 3}, 1}, {{4, 3, 300}, 1}, {{100, 40}, 0},
};

TEST(CudaNnTest, SoftmaxAndLogSoftmaxMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (bool log : {false, true}) {
    for (DType dt : kFloats) {
      for (const SoftmaxCase& c : kSoftmaxCases) {
        SCOPED_TRACE(::testing::Message() << (log ? "log_softmax " : "softmax ") << dtype_name(dt) << " "
                                          << shape_str(c.shape) << " dim " << c.dim);
        const testing::Fn fn = [log, dim = c.dim](const std::vector<Tensor>& in) {
          return log ? log_softmax(in[0], dim) : softmax(in[0], dim);
        };
        expect_cuda_matches_cpu(fn, {random_tensor(c.shape, 1, dt)}, tol_for(dt), tol_for(dt), /*backward=*/true);
      }
    }
  }
}

TEST(CudaNnTest, SoftmaxOfNonContiguousInput) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Tensor x = testing::non_contiguous(random_tensor({33, 70}, 2));
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return softmax(in[0], 1); }, {x}, 2e-5, 2e-5,
                          true);
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return log_softmax(in[0], 0); }, {x}, 2e-5, 2e-5,
                          true);
}

// NOTE [ Log-sum-exp apart ]: logits near 1e7 differing by whole numbers
// give the offset-free log-probabilities and gradients on the GPU too
// (against the CPU's, which tests/ops holds to a double reference).
TEST(CudaNnTest, LogSoftmaxAndCrossEntropyOfLargeLogitsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const std::vector<float> deltas = {0, 0, -1, -3, -2, 0, -5, -1, 0, -4, -4, -2};
  for (float offset : {1e4f, 1e7f}) {
    SCOPED_TRACE(::testing::Message() << "offset " << offset);
    std::vector<float> v;
    for (float d : deltas) v.push_back(offset + d);
    const Tensor x = from_vector<float>(v, {3, 4});
    const Tensor ref = log_softmax(x - offset, 1);   // the same differences at offset 0
    for (int64_t dim : {1, 0}) {
      const Tensor in = dim == 1 ? x : x.t().contiguous();
      const Tensor want = dim == 1 ? ref : ref.t().contiguous();
      testing::expect_near(log_softmax(in.to(kGpu), dim).to(kCPU), values(want), 1e-6, 1e-6);
    }
    const Tensor target = from_vector<int64_t>({2, 1, 3});
    const testing::Fn fn = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); };
    expect_cuda_matches_cpu(fn, {x, target}, 1e-6, 1e-6, true);
    Tensor xg = x.to(kGpu).requires_grad_();
    Tensor x0 = (x - offset).requires_grad_();
    cross_entropy(xg, target.to(kGpu)).backward();
    cross_entropy(x0, target).backward();
    testing::expect_near(xg.grad().to(kCPU), values(x0.grad()), 1e-7, 1e-6);
  }
}

// ---- cross entropy ----

TEST(CudaNnTest, CrossEntropyMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const testing::Fn fn = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); };
  struct Case { int64_t rows, classes; int ignore_every; };
  const Case cases[] = {{1, 1, 0}, {7, 5, 3}, {257, 65, 5}, {1000, 100, 0}, {4, 2000, 2}, {3000, 7, 4}};
  for (DType dt : kFloats) {
    for (DType it : {kInt32, kInt64}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " target " << dtype_name(it) << " [" << c.rows
                                          << ", " << c.classes << "] ignore every " << c.ignore_every);
        const Tensor logits = random_tensor({c.rows, c.classes}, 3, dt);
        const Tensor target = class_ids(c.rows, c.classes, it, 4, c.ignore_every);
        expect_cuda_matches_cpu(fn, {logits, target}, tol_for(dt), tol_for(dt), true);
      }
    }
  }
}

TEST(CudaNnTest, CrossEntropyOfBatchedNonContiguousLogitsAndAllIgnored) {
  ENCORE_SKIP_WITHOUT_GPU();
  const testing::Fn fn = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); };
  const Tensor logits = testing::non_contiguous(random_tensor({6, 40}, 5)).reshape({2, 3, 40});
  expect_cuda_matches_cpu(fn, {logits, class_ids(6, 40, kInt64, 6).reshape({2, 3})}, 2e-5, 2e-5, true);
  // Every row ignored: loss NaN and a zero gradient on both backends.
  expect_cuda_matches_cpu(fn, {random_tensor({5, 9}, 7), class_ids(5, 9, kInt32, 8, 1)}, 0, 0, true);
}

// NOTE [ Index checks ]: bad class ids count as ignored inside the kernels
// (the op rejects them on the host, so call the backends directly).
TEST(CudaNnTest, CrossEntropyKernelCountsBadClassIdsAsIgnored) {
  ENCORE_SKIP_WITHOUT_GPU();
  const int64_t rows = 6, classes = 4;
  const Tensor x = random_tensor({rows, classes}, 9);
  const Tensor t = from_vector<int64_t>({0, 4, -1, 3, -100, 1000}, {rows});
  Tensor loss = empty({}, kFloat32), stats = empty({2 * rows + 1}, kFloat32);
  Tensor gx = empty({rows, classes}, kFloat32);
  const Tensor one = from_vector<float>({1.0f}, {});
  backend::cross_entropy(loss, stats, x, t, -100);
  backend::cross_entropy_backward(gx, one, x, t, stats, -100);
  const Tensor xg = x.to(kGpu), tg = t.to(kGpu), oneg = one.to(kGpu);
  Tensor loss_g = empty({}, kFloat32, kGpu), stats_g = empty({2 * rows + 1}, kFloat32, kGpu);
  Tensor gx_g = empty({rows, classes}, kFloat32, kGpu);
  backend::cross_entropy(loss_g, stats_g, xg, tg, -100);
  backend::cross_entropy_backward(gx_g, oneg, xg, tg, stats_g, -100);
  // The forward kernel reported the bad ids (4, -1, 1000; not -100).
  EXPECT_EQ(take_kernel_errors(kGpu), static_cast<uint32_t>(KernelError::kClassIndex));
  EXPECT_EQ(values(stats_g.to(kCPU))[2 * rows], 2.0);   // rows 0 and 3 count
  testing::expect_near(loss_g.to(kCPU), values(loss), 1e-6, 1e-6);
  testing::expect_near(stats_g.to(kCPU), values(stats), 1e-6, 1e-6);
  testing::expect_near(gx_g.to(kCPU), values(gx), 1e-6, 1e-6);
}

// Eager CUDA ops do not read ids on the host (that would wait for the GPU):
// the kernel reports them, and the next synchronization throws naming the op.
// The report is cleared by that throw: the next good step runs cleanly.
TEST(CudaNnTest, EagerBadClassIdsAreReportedAtTheNextSynchronization) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Tensor x = random_tensor({4, 3}, 11).to(kGpu);
  Tensor loss = cross_entropy(x, from_vector<int64_t>({0, 3, 1, 2}).to(kGpu));   // class 3 of 3: no throw here
  absl::Status st = status_of([&] { (void)loss.item<float>(); });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cross_entropy"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("cuda:0"), absl::string_view::npos) << st;
  Tensor good = cross_entropy(x, from_vector<int64_t>({0, 2, 1, 2}).to(kGpu));
  EXPECT_TRUE(std::isfinite(good.item<float>()));
  EXPECT_NO_THROW(synchronize(kGpu));

  (void)embedding(random_tensor({5, 2}, 12).to(kGpu), from_vector<int32_t>({0, -1}).to(kGpu));
  st = status_of([&] { synchronize(kGpu); });
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("embedding"), absl::string_view::npos) << st;
}

// -inf entries (include/encore/ops.h): probability exactly 0, and NaN for a
// slice that is all -inf, forward and backward, on both backends alike (the
// expected NaNs and infinities compare equal). Warp rows (7), block rows
// (1500) and columns (dim 0).
TEST(CudaNnTest, SoftmaxAndCrossEntropyOfMinusInfinityMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (int64_t n : {7, 1500}) {
    std::vector<float> v = random_tensor({3, n}, 9).to_vector<float>();
    for (int64_t k = 0; k < n; k += 3) v[k] = -INFINITY;   // row 0: every third entry
    for (int64_t k = 0; k < n; ++k) v[n + k] = -INFINITY;  // row 1: all
    const Tensor x = from_vector<float>(v, {3, n});
    for (DType dt : kFloats) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " n " << n);
      for (bool log : {false, true}) {
        for (int64_t dim : {1, 0}) {
          const Tensor xd = (dim == 1 ? x : x.t().contiguous()).to(dt);
          expect_cuda_matches_cpu(
              [log, dim](const std::vector<Tensor>& in) { return log ? log_softmax(in[0], dim) : softmax(in[0], dim); },
              {xd}, tol_for(dt), tol_for(dt), true);
        }
      }
      const testing::Fn ce = [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); };
      expect_cuda_matches_cpu(ce, {x.to(dt), from_vector<int64_t>({1, -100, 2})}, tol_for(dt), tol_for(dt), true);
      expect_cuda_matches_cpu(ce, {x.to(dt), from_vector<int64_t>({0, -100, 2})}, tol_for(dt), tol_for(dt), true);   // +inf
      expect_cuda_matches_cpu(ce, {x.to(dt), from_vector<int64_t>({1, 1, 2})}, tol_for(dt), tol_for(dt), true);     // NaN
    }
  }
}

// ---- layer norm ----

TEST(CudaNnTest, LayerNormMatchesCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  // {rows, cols}: warp rows up to 1024 columns, block rows above; 300 rows
  // give 150 chunks of 2 for the column sums, 1000 rows 250 chunks of 4.
  const std::vector<Shape> shapes = {{1, 1}, {7, 255}, {5, 256}, {300, 64}, {3, 2000}, {1000, 7}, {64, 257}};
  for (DType dt : kFloats) {
    for (const Shape& s : shapes) {
      for (int affine = 0; affine < 3; ++affine) {   // 0: none, 1: weight, 2: weight and bias
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << shape_str(s) << " affine " << affine);
        const Tensor x = random_tensor(s, 10, dt);
        const Tensor w = random_tensor({s[1]}, 11, dt), b = random_tensor({s[1]}, 12, dt);
        const testing::Fn fn = [affine, cols = s[1]](const std::vector<Tensor>& in) {
          return layer_norm(in[0], {cols}, affine >= 1 ? in[1] : Tensor(), affine >= 2 ? in[2] : Tensor());
        };
        // Only the inputs the op uses (every input given must get a gradient).
        std::vector<Tensor> inputs = {x, w, b};
        inputs.resize(1 + affine);
        // Column sums over up to 1000 rows: a looser absolute floor.
        expect_cuda_matches_cpu(fn, inputs, 10 * tol_for(dt), tol_for(dt), true);
      }
    }
  }
}

TEST(CudaNnTest, LayerNormOfNonContiguous3dInput) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Tensor x = testing::non_contiguous(random_tensor({12, 30}, 13)).reshape({3, 4, 30});
  const Tensor w = random_tensor({30}, 14), b = random_tensor({30}, 15);
  expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return layer_norm(in[0], {30}, in[1], in[2]); },
                          {x, w, b}, 2e-4, 2e-5, true);
}

// NOTE [ Layer norm's shifted mean ] (kernel_table.h): a constant row gives
// exactly 0 (with weight and bias, exactly the bias) and a row of 1000 plus
// 1e-3 noise matches the CPU, forward and backward; warp rows (7) and block
// rows (1500).
TEST(CudaNnTest, LayerNormOfConstantAndNearConstantRows) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (int64_t cols : {7, 1500}) {
    SCOPED_TRACE(::testing::Message() << "cols " << cols);
    const std::vector<float> noise = random_tensor({cols}, 22).to_vector<float>();
    std::vector<float> v(2 * cols);
    for (int64_t c = 0; c < cols; ++c) {
      v[c] = 1000.0f;
      v[cols + c] = static_cast<float>(1000.0 + 1e-3 * noise[c]);
    }
    const Tensor x = from_vector<float>(v, {2, cols});
    const Tensor w = random_tensor({cols}, 23), b = random_tensor({cols}, 24);
    for (DType dt : kFloats) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor constant = x.slice(0, 0, 1).to(dt).to(kGpu);
      EXPECT_EQ(values(layer_norm(constant, {cols}).to(kCPU)), std::vector<double>(cols, 0.0));
      EXPECT_EQ(values(layer_norm(constant, {cols}, w.to(dt).to(kGpu), b.to(dt).to(kGpu)).to(kCPU)),
                values(b.to(dt)));
    }
    const testing::Fn fn = [cols](const std::vector<Tensor>& in) { return layer_norm(in[0], {cols}, in[1], in[2]); };
    expect_cuda_matches_cpu(fn, {x, w, b}, 2e-5, 2e-5);
    // Backward: |dx| reaches rstd * |g| ~ 300 * 3, so an absolute floor of 1e-5 rstd.
    expect_cuda_matches_cpu(fn, {x, w, b}, 3e-3, 2e-5, true);
  }
}

// dweight/dbias are sums in a fixed order: two runs agree bit for bit.
TEST(CudaNnTest, LayerNormBackwardIsBitIdenticalAcrossRuns) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Tensor x = random_tensor({4096, 96}, 16).to(kGpu);
  std::vector<std::vector<double>> grads;
  for (int run = 0; run < 2; ++run) {
    Tensor w = random_tensor({96}, 17).to(kGpu).requires_grad_();
    Tensor b = random_tensor({96}, 18).to(kGpu).requires_grad_();
    sum(mul(layer_norm(x, {96}, w, b), random_tensor({4096, 96}, 19).to(kGpu))).backward();
    grads.push_back(values(w.grad().to(kCPU)));
    grads.push_back(values(b.grad().to(kCPU)));
  }
  EXPECT_EQ(grads[0], grads[2]);
  EXPECT_EQ(grads[1], grads[3]);
}

// ---- embedding ----

// Same order and same rounding as the CPU (NOTE [ Deterministic embedding
// backward ] in cuda/nn.cu): compared exactly, in every float dtype.
TEST(CudaNnTest, EmbeddingMatchesCpuExactly) {
  ENCORE_SKIP_WITHOUT_GPU();
  struct Case { int64_t vocab, dim, n; };
  const Case cases[] = {{1, 1, 1}, {5, 3, 7}, {65, 7, 257}, {1000, 64, 4096}, {300, 256, 255}, {50, 2, 50000}};
  for (DType dt : kFloats) {
    for (DType it : {kInt32, kInt64}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " indices " << dtype_name(it) << " V " << c.vocab
                                          << " D " << c.dim << " n " << c.n);
        const Tensor w = random_tensor({c.vocab, c.dim}, 20, dt);
        const Tensor idx = class_ids(c.n, c.vocab, it, 21);
        expect_cuda_matches_cpu([](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); }, {w, idx},
                                0, 0, true);
      }
    }
  }
}

TEST(CudaNnTest, EmbeddingOfIntegerWeightsAnd2dIndices) {
  ENCORE_SKIP_WITHOUT_GPU();
  const testing::Fn fn = [](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); };
  for (DType dt : {kInt32, kInt64}) {
    const Tensor w = arange(0, 40, 1, dt).reshape({10, 4});
    expect_cuda_matches_cpu(fn, {w, class_ids(12, 10, kInt64, 22).reshape({3, 4})}, 0, 0);
  }
}

// NOTE [ Index checks ]: a bad index reads nothing (a zero row) and scatters nothing.
TEST(CudaNnTest, EmbeddingKernelsSkipBadIndices) {
  ENCORE_SKIP_WITHOUT_GPU();
  const int64_t vocab = 5, dim = 3;
  const Tensor w = random_tensor({vocab, dim}, 23);
  const Tensor idx = from_vector<int32_t>({1, -1, 5, 4, 1, 1000, 0}, {7});
  const Tensor g = random_tensor({7, dim}, 24);
  Tensor out = empty({7, dim}, kFloat32), gw = empty({vocab, dim}, kFloat32);
  backend::embedding(out, w, idx);
  backend::embedding_backward(gw, g, idx);
  Tensor out_g = empty({7, dim}, kFloat32, kGpu), gw_g = empty({vocab, dim}, kFloat32, kGpu);
  // Every copy first: a copy synchronizes, and would throw the report.
  const Tensor wg = w.to(kGpu), idxg = idx.to(kGpu), gg = g.to(kGpu);
  backend::embedding(out_g, wg, idxg);
  backend::embedding_backward(gw_g, gg, idxg);
  EXPECT_EQ(take_kernel_errors(kGpu), static_cast<uint32_t>(KernelError::kEmbeddingIndex));
  testing::expect_near(out_g.to(kCPU), values(out), 0, 0);
  testing::expect_near(gw_g.to(kCPU), values(gw), 0, 0);
}

// ---- dropout ----

// The CPU draws keep = uniform(philox(offset + i, seed)) per element, as the
// CUDA kernel does: same seed and offset, same mask, so outputs and
// gradients are equal exactly, and both offsets advance by numel.
TEST(CudaNnTest, DropoutMasksEqualCpuMasks) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : kFloats) {
    for (int64_t n : {1, 7, 255, 256, 257, 100000}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " n " << n);
      Generator gen_cpu(1234), gen_gpu(1234, kGpu);
      const testing::Fn fn = [&](const std::vector<Tensor>& in) {
        return dropout(in[0], 0.3, true, in[0].device().is_cuda() ? &gen_gpu : &gen_cpu);
      };
      expect_cuda_matches_cpu(fn, {random_tensor({n}, 25, dt)}, 0, 0, true);
      EXPECT_EQ(gen_cpu.offset(), static_cast<uint64_t>(n));
      EXPECT_EQ(gen_gpu.offset(), static_cast<uint64_t>(n));
    }
  }
}

TEST(CudaNnTest, DropoutDrawsAFreshMaskEachCallAndKeepsTheRate) {
  ENCORE_SKIP_WITHOUT_GPU();
  Generator gen(99, kGpu);
  const Tensor x = testing::non_contiguous(random_tensor({300, 400}, 26)).to(kGpu);
  const std::vector<double> a = values(dropout(x, 0.25, true, &gen).to(kCPU));
  const std::vector<double> b = values(dropout(x, 0.25, true, &gen).to(kCPU));
  EXPECT_NE(a, b);
  int64_t zeros = 0;
  for (double v : a) zeros += v == 0.0;
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(a.size()), 0.25, 0.01);
  EXPECT_EQ(gen.offset(), 2u * 300u * 400u);
}

}  // namespace
}  // namespace encore
