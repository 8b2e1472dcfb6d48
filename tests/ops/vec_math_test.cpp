// The CPU's vector math (src/backends/cpu/vec_math.h) and the blocked unary
// kernels on it: SLEEF's functions within 1 ulp of a double reference, the
// same bits from every variant this CPU runs, and unary results (forward and
// backward) that do not depend on threads, chunking, layout or tail position
// (NOTE [ Deterministic vector math ]).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "encore/encore.h"
#include "src/backends/cpu/vec_math.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::random_tensor;

// Floats spread over [lo, hi], with their bits checked, not their values.
std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1);
  return v;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), sizeof(float) * v.size());
  return out;
}

// The spacing of floats at ref's magnitude (ref rounded to float).
double ulp_of(double ref) {
  const float r = std::fabs(static_cast<float>(ref));
  return std::nextafter(r, INFINITY) - r;
}

struct MathCase {
  const char* name;
  std::function<void(float*, const float*, int64_t)> vec;
  double (*ref)(double);
  float lo, hi;
  double max_ulp = 1.0;   // from the exact value
};

const std::vector<MathCase>& math_cases() {
  static const std::vector<MathCase> kCases = {
      {"exp", cpu::vec_exp, [](double x) { return std::exp(x); }, -87.0f, 88.0f},
      {"log", cpu::vec_log, [](double x) { return std::log(x); }, 1e-30f, 1e30f},
      {"tanh", cpu::vec_tanh, [](double x) { return std::tanh(x); }, -10.0f, 10.0f},
      {"erf", cpu::vec_erf, [](double x) { return std::erf(x); }, -5.0f, 5.0f},
      {"erf_fast", cpu::vec_erf_fast, [](double x) { return std::erf(x); }, -5.0f, 5.0f, 4.0},
      {"pow1.7", [](float* o, const float* x, int64_t n) { cpu::vec_pow(o, x, 1.7f, n); },
       [](double x) { return std::pow(x, double{1.7f}); }, 1e-10f, 1e20f},
  };
  return kCases;
}

// SLEEF's u10 functions and our erf: at most 1 ulp from the exact value
// (double here); erf_fast: 4.
TEST(VecMathTest, WithinOneUlpOfDoubleReference) {
  for (const MathCase& c : math_cases()) {
    SCOPED_TRACE(std::string(c.name) + " " + cpu::vec_math_isa());
    const std::vector<float> x = sweep(c.lo, c.hi, 100003);
    std::vector<float> y(x.size());
    c.vec(y.data(), x.data(), static_cast<int64_t>(x.size()));
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ref = c.ref(x[i]);
      const double ulp = ulp_of(ref);
      if (std::fabs(y[i] - ref) > c.max_ulp * ulp + 1e-38 && bad++ < 5) {
        ADD_FAILURE() << c.name << "(" << x[i] << ") = " << y[i] << ", reference " << ref;
      }
    }
  }
}

// erf's and erf_fast's edges (NOTE [ erf in double ] in vec_math.cpp): the
// switch between the two polynomials at 1 and to +-1 at 3.9375, signed
// zeros, infinities, NaN and subnormals, in every variant this CPU runs.
TEST(VecMathTest, ErfEdges) {
  std::vector<float> x = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 1e-38f, 3.925f, 3.93f, 100.0f};
  for (float edge : {1.0f, 3.9375f}) {
    float lo = edge, hi = edge;
    for (int i = 0; i < 64; ++i) {
      lo = std::nextafter(lo, 0.0f);
      x.insert(x.end(), {lo, hi, -lo, -hi});
      hi = std::nextafter(hi, INFINITY);
    }
  }
  auto check = [&](const char* name, void (*fn)(float*, const float*, int64_t), double max_ulp) {
    SCOPED_TRACE(std::string(cpu::vec_math_isa()) + " " + name);
    std::vector<float> y(x.size());
    fn(y.data(), x.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(y[i]));
        continue;
      }
      const double ref = std::erf(static_cast<double>(x[i]));
      const double ulp = ulp_of(ref);
      EXPECT_LE(std::fabs(y[i] - ref), max_ulp * ulp) << "erf(" << x[i] << ") = " << y[i] << ", reference " << ref;
      EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i])) << "erf(" << x[i] << ")";
    }
    EXPECT_EQ(y[2], 1.0f);
    EXPECT_EQ(y[3], -1.0f);
    EXPECT_EQ(y[10], 1.0f);
  };
  const std::string widest = cpu::vec_math_isa();
  for (const char* isa : {"sse2", "avx", "avx512f", "scalar"}) {
    if (!cpu::vec_math_force(isa)) continue;
    check("erf", cpu::vec_erf, 1.0);
    check("erf_fast", cpu::vec_erf_fast, 4.0);
  }
  ASSERT_TRUE(cpu::vec_math_force(widest.c_str()));
}

// Every variant the CPU runs gives the same bits (no FMA in any of them), so
// a build's results do not depend on the machine's vector width.
TEST(VecMathTest, VariantsGiveTheSameBits) {
  const std::string widest = cpu::vec_math_isa();
  for (const MathCase& c : math_cases()) {
    const std::vector<float> x = sweep(c.lo, c.hi, 4099);   // not a multiple of any width: tails too
    std::vector<float> want(x.size());
    if (!cpu::vec_math_force("sse2")) GTEST_SKIP() << "not x86-64: one scalar variant";
    c.vec(want.data(), x.data(), static_cast<int64_t>(x.size()));
    for (const char* isa : {"avx", "avx512f"}) {
      if (!cpu::vec_math_force(isa)) continue;
      SCOPED_TRACE(std::string(c.name) + " " + isa);
      std::vector<float> got(x.size());
      c.vec(got.data(), x.data(), static_cast<int64_t>(x.size()));
      EXPECT_EQ(bits(got), bits(want));
    }
  }
  ASSERT_TRUE(cpu::vec_math_force(widest.c_str()));
}

// Each element's result is the same wherever it lies: alone, in a short
// tail, inside a long array.
TEST(VecMathTest, TailElementsMatchFullVectors) {
  for (const MathCase& c : math_cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<float> x = sweep(c.lo, c.hi, 37);
    std::vector<float> all(x.size());
    c.vec(all.data(), x.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      float one = 0;
      c.vec(&one, &x[i], 1);
      EXPECT_EQ(bits({one}), bits({all[i]})) << "element " << i;
    }
  }
}

struct OpCase {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  bool positive = false;
};

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> kCases = {
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }, true},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"gelu_erf", [](const Tensor& x) { return gelu(x, GeluApprox::kNone); }},
      {"pow2", [](const Tensor& x) { return pow(x, 2.0); }},
      {"pow0.5", [](const Tensor& x) { return pow(x, 0.5); }, true},
      {"pow1.7", [](const Tensor& x) { return pow(x, 1.7); }, true},
  };
  return kCases;
}

// y and x.grad of fn on x, with the given OpenMP thread count.
std::pair<Tensor, Tensor> run(const OpCase& c, const Tensor& x0, const Tensor& g, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  Tensor x = x0.detach().clone().requires_grad_();
  Tensor y = c.fn(x);
  y.backward(g);
  omp_set_num_threads(before);
  return {y.detach(), x.grad()};
}

std::vector<uint32_t> tensor_bits(const Tensor& t) { return bits(t.contiguous().to_vector<float>()); }

// [301, 1001] crosses the threading threshold and puts chunk and block
// boundaries at odd places; row by row (one short launch each, below the
// threshold), two threads, one thread and a transposed layout must give the
// same bits.
TEST(VecMathTest, UnaryBitsDoNotDependOnThreadsChunksOrLayout) {
  for (const OpCase& c : op_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = random_tensor({301, 1001}, 3);
    if (c.positive) x = abs(x) + 0.5;
    Tensor g = random_tensor({301, 1001}, 4);
    auto [y1, dx1] = run(c, x, g, 1);
    auto [y2, dx2] = run(c, x, g, 2);
    EXPECT_EQ(tensor_bits(y2), tensor_bits(y1));
    EXPECT_EQ(tensor_bits(dx2), tensor_bits(dx1));
    auto [yt, dxt] = run(c, x.t().contiguous().t(), g.t().contiguous().t(), 2);   // strided operands
    EXPECT_EQ(tensor_bits(yt), tensor_bits(y1));
    EXPECT_EQ(tensor_bits(dxt), tensor_bits(dx1));
    std::vector<float> rows_y, rows_dx;
    for (int64_t r = 0; r < 301; r += 50) {
      const int64_t e = std::min<int64_t>(301, r + 50);
      auto [yr, dxr] = run(c, x.slice(0, r, e), g.slice(0, r, e), 1);
      for (float v : yr.contiguous().to_vector<float>()) rows_y.push_back(v);
      for (float v : dxr.contiguous().to_vector<float>()) rows_dx.push_back(v);
    }
    EXPECT_EQ(bits(rows_y), tensor_bits(y1));
    EXPECT_EQ(bits(rows_dx), tensor_bits(dx1));
    // Broadcast gradients (stride 0: a mean's, a bias's) give the bits of
    // their dense copies.
    for (const Tensor& gb : {random_tensor({1, 1001}, 5).expand({301, 1001}),
                             random_tensor({}, 6).expand({301, 1001})}) {
      auto [yb, dxb] = run(c, x, gb, 2);
      auto [yd, dxd] = run(c, x, gb.contiguous(), 2);
      EXPECT_EQ(tensor_bits(dxb), tensor_bits(dxd));
    }
  }
}

}  // namespace
}  // namespace encore
