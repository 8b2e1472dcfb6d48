// matmul and linear against plain-loop host references (double), their
// gradients against finite differences, the gemm launchers, and the errors.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "encore/encore.h"
#include "src/backends/kernels.h"
#include "src/core/step_observer.h"
#include "src/core/stream.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_near;
using testing::random_tensor;
using testing::values;

// NumPy's matmul on the host: 1-D operands promoted, batch dims broadcast,
// a triple loop in double. Assumes the shapes are valid.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Shape* out_shape) {
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(ba.size(), bb.size());
  Shape batch(nb, 1);
  for (size_t i = 0; i < nb; ++i) {
    const int64_t da = i + ba.size() < nb ? 1 : ba[i + ba.size() - nb];
    const int64_t db = i + bb.size() < nb ? 1 : bb[i + bb.size() - nb];
    batch[i] = da == 1 ? db : da;
  }
  const int64_t n = as[as.size() - 2], k = as.back(), m = bs.back();
  const std::vector<double> av = values(a), bv = values(b);
  std::vector<double> out(numel_of(batch) * n * m, 0.0);
  for (int64_t bi = 0; bi < numel_of(batch); ++bi) {
    const std::vector<int64_t> idx = testing::unravel(bi, batch);
    const int64_t a0 = testing::broadcast_index(idx, ba) * n * k;
    const int64_t b0 = testing::broadcast_index(idx, bb) * k * m;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[a0 + i * k + p] * bv[b0 + p * m + j];
        out[(bi * n + i) * m + j] = s;
      }
    }
  }
  *out_shape = batch;
  if (a.dim() > 1) out_shape->push_back(n);
  if (b.dim() > 1) out_shape->push_back(m);
  return out;
}

void expect_matmul(const Tensor& a, const Tensor& b, double atol = 1e-4, double rtol = 1e-4) {
  SCOPED_TRACE(shape_str(a.shape()) + " x " + shape_str(b.shape()));
  Shape shape;
  const std::vector<double> ref = ref_matmul(a, b, &shape);
  const Tensor out = matmul(a, b);
  EXPECT_EQ(out.shape(), shape);
  EXPECT_EQ(out.dtype(), a.dtype());
  expect_near(out, ref, atol, rtol);
}

// x [.., in] W [out, in] b [out] (or undefined) on the host.
std::vector<double> ref_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t in = w.size(1), out_f = w.size(0);
  const int64_t rows = numel_of(absl::MakeConstSpan(x.shape().data(), x.dim() - 1));
  const std::vector<double> xv = values(x), wv = values(w);
  const std::vector<double> bv = bias.defined() ? values(bias) : std::vector<double>(out_f, 0.0);
  std::vector<double> out(rows * out_f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_f; ++o) {
      double s = bv[o];
      for (int64_t i = 0; i < in; ++i) s += xv[r * in + i] * wv[o * in + i];
      out[r * out_f + o] = s;
    }
  }
  return out;
}

// C = alpha op(A) op(B) + beta C on the host, row-major with leading dims;
// C's padding columns keep their values.
std::vector<double> ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                             const std::vector<double>& av, int64_t lda, const std::vector<double>& bv, int64_t ldb,
                             double beta, std::vector<double> c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += av[ta ? p * lda + i : i * lda + p] * bv[tb ? j * ldb + p : p * ldb + j];
      c[i * ldc + j] = alpha * s + beta * c[i * ldc + j];
    }
  }
  return c;
}

// Logs the op name of every launch on the CPU stream while alive (and runs it).
class LaunchLog : public StepObserver {
 public:
  bool on_launch(const LaunchRecord& launch) override {
    ops.emplace_back(launch.op);
    if (std::string(launch.op) == "gemm") {
      gemm_reads.assign(launch.reads.begin(), launch.reads.end());
      gemm_writes.assign(launch.writes.begin(), launch.writes.end());
    }
    return true;
  }
  void on_host_access(const char*) override {}
  int64_t count(const std::string& op) const { return std::count(ops.begin(), ops.end(), op); }

  std::vector<std::string> ops;
  std::vector<Storage*> gemm_reads, gemm_writes;   // of the last gemm

 private:
  StepObserverScope observe_{this};
};

// ---- forward ----

TEST(MatmulTest, TwoDMatchesReference) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}}, {{1, 1}, {1, 1}}, {{7, 1}, {1, 6}}, {{1, 8}, {8, 1}},
      {{65, 70}, {70, 33}}, {{130, 90}, {90, 120}},   // the last one is big enough for OpenBLAS's threads
  };
  uint64_t seed = 1;
  for (const auto& [sa, sb] : cases) {
    expect_matmul(random_tensor(sa, seed), random_tensor(sb, seed + 1));
    seed += 2;
  }
}

TEST(MatmulTest, BatchedAndBroadcastBatchMatchReference) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4, 5}, {3, 5, 2}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{4, 3}, {2, 3, 5}},   {{2, 3, 4}, {4, 5}},
      {{2, 3, 4}, {1, 4, 5}}, {{1, 3, 4}, {6, 4, 2}},    {{2, 2, 1, 3, 4}, {3, 4, 2}},
      {{512, 8, 8}, {512, 8, 8}},   // small matrices, many of them: parallel over the batch
  };
  uint64_t seed = 10;
  for (const auto& [sa, sb] : cases) {
    expect_matmul(random_tensor(sa, seed), random_tensor(sb, seed + 1));
    seed += 2;
  }
}

TEST(MatmulTest, OneDimOperandsArePromotedLikeNumpy) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4}, {4}}, {{4}, {4, 3}}, {{3, 4}, {4}}, {{2, 3, 4}, {4}}, {{4}, {2, 4, 3}}, {{1}, {1}},
  };
  uint64_t seed = 20;
  for (const auto& [sa, sb] : cases) {
    expect_matmul(random_tensor(sa, seed), random_tensor(sb, seed + 1));
    seed += 2;
  }
  EXPECT_EQ(matmul(random_tensor({4}, 1), random_tensor({4}, 2)).dim(), 0);
}

TEST(MatmulTest, NonContiguousOperandsMatchReference) {
  const Tensor a = random_tensor({3, 4}, 30), b = random_tensor({4, 5}, 31);
  expect_matmul(random_tensor({4, 3}, 32).t(), random_tensor({5, 4}, 33).t());   // both column-major
  expect_matmul(testing::non_contiguous(a), testing::non_contiguous(b));
  expect_matmul(random_tensor({3, 2, 4}, 34).transpose(0, 1), b);   // batch dims that do not fold
  expect_matmul(random_tensor({2, 4, 3}, 35).transpose(1, 2), random_tensor({2, 5, 4}, 36).transpose(1, 2));
  expect_matmul(random_tensor({3, 8}, 37).slice(1, 0, 8, 2), b);   // no unit stride: copied
  expect_matmul(random_tensor({6, 4}, 38).slice(0, 0, 6, 2), b);   // row stride 8
  expect_matmul(random_tensor({1, 4}, 39).expand({3, 4}), b);      // row stride 0
  expect_matmul(a.unsqueeze(0).expand({5, 3, 4}), random_tensor({5, 4, 2}, 40));
  expect_matmul(testing::non_contiguous(random_tensor({4}, 41)), b);
  expect_matmul(a, testing::non_contiguous(random_tensor({4}, 42)));
  expect_matmul(random_tensor({2, 3, 6}, 43).slice(2, 1, 5), random_tensor({4, 2}, 44));   // folds with row stride 6
}

TEST(MatmulTest, TransposedOperandsGoToBlasWithoutACopy) {
  const Tensor a = random_tensor({4, 3}, 50).t(), b = random_tensor({5, 4}, 51).t();
  LaunchLog log;
  const Tensor out = matmul(a, b);
  EXPECT_EQ(log.ops, std::vector<std::string>{"gemm"});
  EXPECT_NE(std::find(log.gemm_reads.begin(), log.gemm_reads.end(), a.storage()), log.gemm_reads.end());
  EXPECT_NE(std::find(log.gemm_reads.begin(), log.gemm_reads.end(), b.storage()), log.gemm_reads.end());
  EXPECT_EQ(log.gemm_writes, std::vector<Storage*>{out.storage()});
}

TEST(MatmulTest, EmptyDims) {
  const Tensor zero_k = matmul(random_tensor({3, 0}, 1), random_tensor({0, 4}, 2));
  EXPECT_EQ(zero_k.shape(), Shape({3, 4}));
  expect_near(zero_k, std::vector<double>(12, 0.0));
  expect_matmul(random_tensor({0, 4}, 3), random_tensor({4, 3}, 4));
  expect_matmul(random_tensor({3, 4}, 5), random_tensor({4, 0}, 6));
  expect_matmul(random_tensor({0, 2, 3}, 7), random_tensor({3, 4}, 8));
  expect_matmul(random_tensor({1, 2, 3}, 9), random_tensor({0, 3, 4}, 10));
  expect_matmul(random_tensor({2, 3, 0}, 11), random_tensor({2, 0, 5}, 12));
  expect_matmul(random_tensor({0}, 13), random_tensor({0}, 14));   // 0-d zero
  // Gradients summed over an empty broadcast batch are zeros.
  Tensor a = random_tensor({1, 2, 3}, 15).requires_grad_(), b = random_tensor({0, 3, 4}, 16).requires_grad_();
  matmul(a, b).backward(zeros({0, 2, 4}));
  expect_near(a.grad(), std::vector<double>(6, 0.0));
  EXPECT_EQ(b.grad().shape(), Shape({0, 3, 4}));
}

// f16/bf16 inputs are rounded already, so the reference sees exactly what the
// kernel sees; the error is the f32 accumulation (~1e-6 relative here) plus
// the rounding of the output: 2^-11 relative for f16, 2^-8 for bf16.
TEST(MatmulTest, HalfAndBFloat16MatchFloatReference) {
  for (auto [dt, tol] : {std::pair{kFloat16, 1.5e-3}, std::pair{kBFloat16, 1e-2}}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    expect_matmul(random_tensor({5, 16}, 60, dt), random_tensor({16, 7}, 61, dt), tol, tol);
    expect_matmul(random_tensor({2, 3, 16}, 62, dt), random_tensor({2, 7, 16}, 63, dt).transpose(1, 2), tol, tol);
    expect_matmul(random_tensor({2, 1, 3, 8}, 64, dt), random_tensor({4, 8, 2}, 65, dt), tol, tol);
    expect_matmul(random_tensor({8}, 66, dt), random_tensor({8, 3}, 67, dt), tol, tol);
    const Tensor x = random_tensor({2, 3, 16}, 68, dt), w = random_tensor({5, 16}, 69, dt),
                 bias = random_tensor({5}, 70, dt);
    const Tensor y = linear(x, w, bias);
    EXPECT_EQ(y.dtype(), dt);
    expect_near(y, ref_linear(x, w, bias), tol, tol);
  }
}

TEST(MatmulTest, LinearMatchesReference) {
  struct Case { Shape x, w; bool bias; };
  const std::vector<Case> cases = {
      {{5, 4}, {3, 4}, false}, {{5, 4}, {3, 4}, true}, {{2, 3, 4}, {5, 4}, true}, {{4}, {3, 4}, true},
      {{64, 96}, {80, 96}, true}, {{0, 4}, {3, 4}, true}, {{2, 0}, {3, 0}, true}, {{2, 4}, {0, 4}, true},
  };
  uint64_t seed = 80;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " " + shape_str(c.w) + (c.bias ? " with bias" : ""));
    const Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++);
    const Tensor bias = c.bias ? random_tensor({c.w[0]}, seed++) : Tensor();
    const Tensor y = linear(x, w, bias);
    Shape shape = c.x;
    shape.back() = c.w[0];
    EXPECT_EQ(y.shape(), shape);
    expect_near(y, ref_linear(x, w, bias), 1e-4, 1e-4);
  }
  // Non-contiguous x (leading dims that do not fold) and weight.
  const Tensor x = random_tensor({3, 2, 4}, 90).transpose(0, 1), w = random_tensor({4, 5}, 91).t();
  const Tensor bias = testing::non_contiguous(random_tensor({5}, 92));
  expect_near(linear(x, w, bias), ref_linear(x.contiguous(), w, bias), 1e-4, 1e-4);
}

TEST(MatmulTest, LinearIsOneGemm) {
  const Tensor x = random_tensor({2, 3, 4}, 1), w = random_tensor({5, 4}, 2), bias = random_tensor({5}, 3);
  {
    LaunchLog log;
    (void)linear(x, w, bias);
    EXPECT_EQ(log.ops, (std::vector<std::string>{"copy", "gemm"}));   // bias broadcast, then beta = 1
  }
  LaunchLog log;
  (void)linear(x, w);
  EXPECT_EQ(log.ops, std::vector<std::string>{"gemm"});
}

// ---- backward ----

TEST(MatmulTest, MatmulGradientsMatchFiniteDifferences) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},       {{2, 1, 3, 4}, {5, 4, 2}}, {{4}, {4, 3}},    {{3, 4}, {4}}, {{4}, {4}},
      {{4}, {2, 4, 3}},       {{2, 3, 4}, {4, 5}},       {{2, 3, 4}, {4}}, {{3, 4}, {2, 4, 5}},
  };
  const testing::Fn fn = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  uint64_t seed = 100;
  for (const auto& [sa, sb] : cases) {
    SCOPED_TRACE(shape_str(sa) + " x " + shape_str(sb));
    expect_gradients_match(fn, {random_tensor(sa, seed), random_tensor(sb, seed + 1)});
    seed += 2;
  }
  // Transposed views inside the product.
  expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0].t(), in[1].transpose(1, 2)); },
                         {random_tensor({4, 3}, 120), random_tensor({2, 5, 4}, 121)});
}

TEST(MatmulTest, LinearGradientsMatchFiniteDifferences) {
  const testing::Fn with_bias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  const testing::Fn no_bias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); };
  expect_gradients_match(with_bias, {random_tensor({2, 3, 4}, 1), random_tensor({5, 4}, 2), random_tensor({5}, 3)});
  expect_gradients_match(with_bias, {random_tensor({4}, 4), random_tensor({3, 4}, 5), random_tensor({3}, 6)});
  expect_gradients_match(no_bias, {random_tensor({3, 4}, 7), random_tensor({2, 4}, 8)});
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return linear(in[0].transpose(0, 1), in[1], in[2]); },
      {random_tensor({3, 2, 4}, 9), random_tensor({5, 4}, 10), random_tensor({5}, 11)});
}

TEST(MatmulTest, OnlyNeededGradientsAreComputed) {
  const Tensor a = random_tensor({3, 4}, 1).requires_grad_(), b = random_tensor({4, 5}, 2);
  const Tensor g = random_tensor({3, 5}, 3);
  const Tensor out = matmul(a, b);
  {
    LaunchLog log;
    out.backward(g);
    EXPECT_EQ(log.count("gemm"), 1);
  }
  EXPECT_FALSE(b.grad().defined());
  Shape shape;
  expect_near(a.grad(), ref_matmul(g, b.t().contiguous(), &shape), 1e-4, 1e-4);

  const Tensor x = random_tensor({6, 4}, 4), w = random_tensor({3, 4}, 5).requires_grad_();
  const Tensor bias = random_tensor({3}, 6);
  const Tensor y = linear(x, w, bias);
  LaunchLog log;
  y.backward(random_tensor({6, 3}, 7));
  EXPECT_EQ(log.count("gemm"), 1);
  EXPECT_EQ(log.count("column_sum"), 0);
}

TEST(MatmulTest, HalfPrecisionGradientsKeepTheirDtype) {
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const Tensor a = random_tensor({2, 3, 8}, 1, dt).requires_grad_(), b = random_tensor({8, 4}, 2, dt);
    const Tensor g = random_tensor({2, 3, 4}, 3, dt);
    matmul(a, b).backward(g);
    EXPECT_EQ(a.grad().dtype(), dt);
    Shape shape;
    expect_near(a.grad(), ref_matmul(g, b.t().contiguous(), &shape), 2e-2, 1e-2);
  }
}

// ---- the backend's gemm family ----

// One row-major f32 GEMM, C = alpha op(A) op(B) + beta C, launched through the
// CPU kernel table's gemm entry (GemmArgs in src/backends/kernel_table.h).
void cpu_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& a,
              int64_t lda, const Tensor& b, int64_t ldb, float beta, const Tensor& c, int64_t ldc) {
  backend::GemmArgs g{};
  g.a = a.data_ptr(), g.b = b.data_ptr(), g.c = c.data_ptr();
  g.dtype = g.c_dtype = kFloat32;
  g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.alpha = alpha, g.beta = beta, g.trans_a = trans_a, g.trans_b = trans_b;
  current_stream(kCPU).launch(backend::kernels_for(kCPU).gemm->gemm, "gemm", g,
                              {a.storage(), b.storage(), c.storage()}, {c.storage()});
}

TEST(MatmulTest, GemmLauncherHonoursTransposeFlagsLeadingDimsAlphaAndBeta) {
  const int64_t m = 3, n = 5, k = 4, pad = 2;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(absl::StrFormat("trans_a %d trans_b %d", ta, tb));
      // Stored with padded rows: A is [m, k] (or [k, m] when ta), B [k, n] (or [n, k]).
      const Tensor a = random_tensor({ta ? k : m, (ta ? m : k) + pad}, 1);
      const Tensor b = random_tensor({tb ? n : k, (tb ? k : n) + pad}, 2);
      const Tensor c = random_tensor({m, n + pad}, 3);
      const std::vector<double> av = values(a), bv = values(b), c0 = values(c);
      const int64_t lda = a.size(1), ldb = b.size(1), ldc = c.size(1);
      cpu_gemm(ta, tb, m, n, k, 1.5f, a, lda, b, ldb, 0.5f, c, ldc);
      expect_near(c, ref_gemm(ta, tb, m, n, k, 1.5, av, lda, bv, ldb, 0.5, c0, ldc), 1e-4, 1e-4);   // padding kept
    }
  }
}

TEST(MatmulTest, MatmulLauncherSumsIntoSmallerOutputBatch) {
  // out [1, 3, 2] += sum over the batch of 4 products, with alpha and beta.
  const Tensor a = random_tensor({4, 3, 5}, 1), b = random_tensor({4, 5, 2}, 2);
  const Tensor out = random_tensor({1, 3, 2}, 3);
  const std::vector<double> o0 = values(out);
  Shape shape;
  const std::vector<double> prods = ref_matmul(a, b, &shape);
  backend::matmul(out, a, b, 2.f, 0.5f);
  std::vector<double> expected(6);
  for (int64_t i = 0; i < 6; ++i) {
    double s = 0;
    for (int64_t bi = 0; bi < 4; ++bi) s += prods[bi * 6 + i];
    expected[i] = 2 * s + 0.5 * o0[i];
  }
  expect_near(out, expected, 1e-4, 1e-4);
}

// At two threads a GEMM too big for one thread is cut into bands of C's rows
// (m >= n) or columns (n > m), each one OpenBLAS call (NOTE [ One thread pool
// for GEMMs ] in src/backends/cpu/gemm.cpp): every transpose, padded leading
// dims, alpha and beta; batches summed into one C (bands, items in order) and
// into separate Cs; the bits repeat from call to call, and OpenBLAS is left
// on one thread.
TEST(MatmulTest, GemmBandsAtTwoThreadsMatchReference) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(2);
  openblas_set_num_threads(2);   // as a program using OpenBLAS itself might: encore's GEMMs set it back to 1
  const int64_t pad = 3;
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{260, 150, 130}, {48, 701, 160}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(absl::StrFormat("m %d n %d k %d trans_a %d trans_b %d", m, n, k, ta, tb));
        const Tensor a = random_tensor({ta ? k : m, (ta ? m : k) + pad}, 1);
        const Tensor b = random_tensor({tb ? n : k, (tb ? k : n) + pad}, 2);
        const Tensor c0 = random_tensor({m, n + pad}, 3);
        const std::vector<double> av = values(a), bv = values(b), cv = values(c0);
        const int64_t lda = a.size(1), ldb = b.size(1), ldc = c0.size(1);
        Tensor c = c0.clone(), again = c0.clone();
        cpu_gemm(ta, tb, m, n, k, 1.5f, a, lda, b, ldb, 0.5f, c, ldc);
        EXPECT_EQ(openblas_get_num_threads(), 1);
        cpu_gemm(ta, tb, m, n, k, 1.5f, a, lda, b, ldb, 0.5f, again, ldc);
        expect_near(c, ref_gemm(ta, tb, m, n, k, 1.5, av, lda, bv, ldb, 0.5, cv, ldc), 1e-4, 1e-4);   // padding kept
        EXPECT_EQ(c.to_vector<float>(), again.to_vector<float>());
      }
    }
  }
  // {items, C matrices}: 3 summed into one C (bands), 3 into their own Cs
  // (bands: 3 items do not split evenly), 4 into their own (items to threads).
  const int64_t m = 160, n = 96, k = 100;
  for (const auto& [items, out_batch] : {std::pair<int64_t, int64_t>{3, 1}, {3, 3}, {4, 4}}) {
    SCOPED_TRACE(absl::StrFormat("%d products into %d matrices", items, out_batch));
    const Tensor a = random_tensor({items, m, k}, 4), b = random_tensor({items, k, n}, 5);
    const Tensor out = random_tensor({out_batch, m, n}, 6);
    const std::vector<double> o0 = values(out);
    Shape shape;
    const std::vector<double> prods = ref_matmul(a, b, &shape);
    backend::matmul(out, a, b, 2.f, 0.5f);
    std::vector<double> expected(o0.size());
    for (int64_t i = 0; i < static_cast<int64_t>(expected.size()); ++i) {
      double s = 0;
      for (int64_t bi = 0; bi < items; ++bi) {
        if (out_batch == 1 || bi == i / (m * n)) s += prods[bi * m * n + i % (m * n)];
      }
      expected[i] = 2 * s + 0.5 * o0[i];
    }
    expect_near(out, expected, 1e-4, 1e-4);
  }
  omp_set_num_threads(before);
}

TEST(MatmulTest, ColumnSumMatchesReference) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    // 300 columns cross a 256-column block; the slice gives a row stride of 310.
    const Tensor x = random_tensor({600, 310}, 1, dt).slice(1, 5, 305);
    const std::vector<double> xv = values(x);
    std::vector<double> expected(300, 0.0);
    for (int64_t r = 0; r < 600; ++r) {
      for (int64_t j = 0; j < 300; ++j) expected[j] += xv[r * 300 + j];
    }
    const Tensor out = empty({300}, dt);
    backend::column_sum(out, x);
    const double tol = dt == kFloat32 ? 1e-3 : dt == kFloat16 ? 3e-2 : 0.25;   // output rounding of sums ~30
    expect_near(out, expected, tol, tol == 1e-3 ? 1e-5 : 8e-3);
  }
  // Each column in f32 down the rows in order: those bits at one thread and
  // two, in shares of 64 columns and blocks of 256 (a share's last block
  // ends short of 256 when the columns are not a multiple of 64).
  const Tensor x = random_tensor({700, 340}, 2).slice(1, 3, 333).slice(0, 0, 600);
  std::vector<float> model(330, 0.f);
  const std::vector<float> xv = x.contiguous().to_vector<float>();
  for (int64_t r = 0; r < 600; ++r) {
    for (int64_t j = 0; j < 330; ++j) model[j] += xv[r * 330 + j];
  }
  const int before = omp_get_max_threads();
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    omp_set_num_threads(threads);
    const Tensor out = empty({330});
    backend::column_sum(out, x);
    EXPECT_EQ(out.to_vector<float>(), model);
  }
  omp_set_num_threads(before);
  const Tensor none = empty({3});
  backend::column_sum(none, zeros({0, 3}));
  expect_near(none, {0, 0, 0});
}

// ---- errors ----

TEST(MatmulTest, MatmulErrorsNameShapesAndDtypes) {
  const auto code = absl::StatusCode::kInvalidArgument;
  expect_error([] { (void)matmul(zeros({2, 3}), zeros({4, 5})); }, code,
               {"matmul", "[2, 3]", "[4, 5]", "(f32, f32)", "inner dims 3 and 4 differ"});
  expect_error([] { (void)matmul(zeros({3}), zeros({4})); }, code, {"matmul", "[3]", "[4]", "inner dims 3 and 4"});
  expect_error([] { (void)matmul(zeros({2, 3, 4}), zeros({5, 4, 2})); }, code,
               {"matmul", "[2, 3, 4]", "[5, 4, 2]", "f32", "batch dims [2] and [5]"});
  expect_error([] { (void)matmul(scalar_tensor(1.0), zeros({3})); }, code, {"matmul", "[]", "[3]", "at least 1 dim"});
  expect_error([] { (void)matmul(zeros({2, 2}, kInt32), zeros({2, 2}, kInt32)); }, code,
               {"matmul", "[2, 2]", "(i32, i32)", "integer"});
  expect_error([] { (void)matmul(zeros({2, 2}), zeros({2, 2}, kFloat16)); }, code,
               {"matmul", "(f32, f16)", "dtypes differ"});
  expect_error([] { (void)matmul(Tensor(), zeros({2, 2})); }, code, {"matmul", "undefined"});
}

// A product whose element count does not fit in int64 is refused naming
// matmul (issue #17): [2^32, 1] @ [1, 2^32], both broadcast views.
TEST(MatmulTest, ProductsWhoseSizeOverflowsAreRefused) {
  constexpr int64_t k2to32 = int64_t{1} << 32;
  const Tensor a = ones({1, 1}).expand({k2to32, 1}), b = ones({1, 1}).expand({1, k2to32});
  expect_error([&] { (void)matmul(a, b); }, absl::StatusCode::kInvalidArgument,
               {"matmul", "[4294967296, 4294967296]", "2^63 elements"});
}

TEST(MatmulTest, LinearErrorsNameShapesAndDtypes) {
  const auto code = absl::StatusCode::kInvalidArgument;
  expect_error([] { (void)linear(zeros({2, 5}), zeros({3, 4})); }, code,
               {"linear", "[2, 5]", "[3, 4]", "f32", "input features 5", "in-features 4"});
  expect_error([] { (void)linear(zeros({2, 4}), zeros({4})); }, code, {"linear", "weight", "[4]", "2-D"});
  expect_error([] { (void)linear(zeros({2, 4}), zeros({3, 4}), zeros({4})); }, code,
               {"linear", "bias", "[4]", "[3, 4]", "needs [3]"});
  expect_error([] { (void)linear(zeros({2, 4}), zeros({3, 4}), zeros({3}, kFloat16)); }, code,
               {"linear", "f32", "f16"});
  expect_error([] { (void)linear(zeros({2, 4}, kInt64), zeros({3, 4}, kInt64)); }, code,
               {"linear", "[2, 4]", "i64", "not float"});
  expect_error([] { (void)linear(scalar_tensor(1.0), zeros({3, 1})); }, code, {"linear", "[]", "at least 1 dim"});
}

}  // namespace
}  // namespace encore
