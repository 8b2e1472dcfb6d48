// Elementwise unary ops: forward against double-precision host references on
// varied shapes and layouts, f16/bf16 against f32, integer forms, backward
// against finite differences and against the reference's derivative, what
// each op saves for backward, edge values and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_near;
using testing::non_contiguous;
using testing::random_tensor;
using testing::values;

double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  bool positive = false;          // inputs drawn from (0.5, inf)
  std::vector<double> kinks = {}; // inputs kept >= 0.05 away from these
  bool saves_output = false;      // backward reads y (else x)
};

const std::vector<UnaryCase>& cases() {
  static const std::vector<UnaryCase> kCases = {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, false, {}, true},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, true, {}, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, true, {}, true},
      {"pow3", [](const Tensor& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; }},
      {"pow2", [](const Tensor& x) { return pow(x, 2.0); }, [](double x) { return x * x; }},
      {"pow-1.5", [](const Tensor& x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }, true},
      // The exponents the CPU kernel takes shortcuts for (NOTE [ Blocked
      // transcendentals ] in src/backends/cpu/unary.cpp), and one it does not.
      {"pow0", [](const Tensor& x) { return pow(x, 0.0); }, [](double x) { return std::pow(x, 0.0); }},
      {"pow1", [](const Tensor& x) { return pow(x, 1.0); }, [](double x) { return std::pow(x, 1.0); }},
      {"pow0.5", [](const Tensor& x) { return pow(x, 0.5); }, [](double x) { return std::pow(x, 0.5); }, true},
      {"pow-0.5", [](const Tensor& x) { return pow(x, -0.5); }, [](double x) { return std::pow(x, -0.5); }, true},
      {"pow-1", [](const Tensor& x) { return pow(x, -1.0); }, [](double x) { return std::pow(x, -1.0); }, true},
      {"pow-2", [](const Tensor& x) { return pow(x, -2.0); }, [](double x) { return std::pow(x, -2.0); }, true},
      {"pow1.7", [](const Tensor& x) { return pow(x, 1.7); }, [](double x) { return std::pow(x, 1.7); }, true},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, false, {0.0}},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, false, {}, true},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, ref_sigmoid, false, {}, true},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, false, {0.0}, true},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::kTanh); }, ref_gelu_tanh},
      {"gelu_erf", [](const Tensor& x) { return gelu(x, GeluApprox::kNone); }, ref_gelu_erf},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * ref_sigmoid(x); }},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.8); },
       [](double x) { return std::min(std::max(x, -0.5), 0.8); }, false, {-0.5, 0.8}},
  };
  return kCases;
}

// f32 inputs of `shape` suited to c: N(0,1) moved into c's domain.
Tensor input_for(const UnaryCase& c, Shape shape, uint64_t seed) {
  std::vector<float> v;
  for (double x : values(random_tensor(shape, seed))) {
    if (c.positive) x = 0.5 + std::fabs(x);
    for (double k : c.kinks) {
      if (std::fabs(x - k) < 0.05) x = x < k ? k - 0.05 : k + 0.05;
    }
    v.push_back(static_cast<float>(x));
  }
  Tensor t = from_vector<float>(v, {static_cast<int64_t>(v.size())});
  return t.reshape(shape);
}

std::vector<double> reference(const UnaryCase& c, const Tensor& x) {
  std::vector<double> out;
  for (double v : values(x)) out.push_back(c.ref(v));
  return out;
}

// d ref / dx in double by a central difference (error ~1e-9 away from kinks).
double ref_derivative(const UnaryCase& c, double x) {
  const double h = 1e-5;
  return (c.ref(x + h) - c.ref(x - h)) / (2 * h);
}

// The input itself plus strided views of it with the same or transposed values.
std::vector<Tensor> layouts(const Tensor& x) {
  std::vector<Tensor> out = {x, non_contiguous(x)};
  if (x.dim() >= 2) out.push_back(x.transpose(0, 1));
  if (x.dim() >= 1 && x.size(-1) > 1) out.push_back(x.slice(-1, 0, x.size(-1), 2));
  return out;
}

TEST(UnaryTest, ForwardMatchesHostReferenceOnShapesAndLayouts) {
  const std::vector<Shape> shapes = {{}, {0}, {1}, {5}, {3, 1, 4}, {2, 0, 3}, {4, 7}, {300, 130}};
  for (const UnaryCase& c : cases()) {
    for (const Shape& shape : shapes) {
      std::vector<Tensor> xs = layouts(input_for(c, shape, 7));
      if (numel_of(shape) > 1000) xs.resize(2);   // the parallel path: contiguous and strided suffice
      for (const Tensor& x : xs) {
        SCOPED_TRACE(c.name + " on " + shape_str(x.shape()) + (x.is_contiguous() ? "" : " strided"));
        Tensor y = c.fn(x);
        EXPECT_EQ(y.shape(), x.shape());
        EXPECT_EQ(y.dtype(), kFloat32);
        EXPECT_TRUE(y.is_contiguous());
        expect_near(y, reference(c, x), 1e-5, 1e-5);
      }
    }
  }
}

// Output rounding: f16 keeps 11 significant bits (relative step 2^-11 ~ 4.9e-4),
// bf16 8 bits (2^-8 ~ 3.9e-3). Compared with the f32 op on the same rounded inputs.
TEST(UnaryTest, HalfAndBFloat16MatchFloat32WithinStorageRounding) {
  struct Tol { DType dtype; double tol; };
  for (Tol t : {Tol{kFloat16, 1e-3}, Tol{kBFloat16, 8e-3}}) {
    for (const UnaryCase& c : cases()) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(t.dtype)));
      Tensor x = input_for(c, {6, 9}, 3).to(t.dtype);
      Tensor expected = c.fn(x.to(kFloat32));
      for (const Tensor& xv : {x, non_contiguous(x)}) {
        Tensor y = c.fn(xv);
        EXPECT_EQ(y.dtype(), t.dtype);
        expect_near(y, expected, t.tol, t.tol);
      }
    }
  }
}

TEST(UnaryTest, AbsReluClampOnIntegersMatchHostReference) {
  for (DType dt : {kInt32, kInt64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor x = from_vector<int64_t>({-7, -1, 0, 1, 3, 9, -4, 12}, {2, 4}).to(dt);
    for (const Tensor& xv : {x, x.transpose(0, 1), non_contiguous(x)}) {
      std::vector<double> ax, rx, cx, cinf;
      for (double v : values(xv)) {
        ax.push_back(std::fabs(v));
        rx.push_back(std::max(v, 0.0));
        cx.push_back(std::min(std::max(v, -2.0), 5.0));
        cinf.push_back(std::min(v, 4.0));
      }
      EXPECT_EQ(abs(xv).dtype(), dt);
      expect_near(abs(xv), ax, 0, 0);
      expect_near(relu(xv), rx, 0, 0);
      expect_near(clamp(xv, -2, 5), cx, 0, 0);
      expect_near(clamp(xv, -INFINITY, 4), cinf, 0, 0);
      expect_near(clamp(xv, -1e30, 1e30), values(xv), 0, 0);   // bounds beyond the dtype's range
    }
  }
  // |INT_MIN| wraps to INT_MIN (two's complement), as in PyTorch, without undefined behaviour.
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(abs(from_vector<int32_t>({kMin, -5})).to_vector<int32_t>(), (std::vector<int32_t>{kMin, 5}));
  EXPECT_FALSE(relu(from_vector<int32_t>({-1, 2})).requires_grad());
}

TEST(UnaryTest, BackwardMatchesFiniteDifferences) {
  for (const UnaryCase& c : cases()) {
    SCOPED_TRACE(c.name);
    auto fn = c.fn;
    expect_gradients_match([fn](const std::vector<Tensor>& in) { return fn(in[0]); }, {input_for(c, {3, 4}, 11)});
    expect_gradients_match([fn](const std::vector<Tensor>& in) { return fn(in[0].t()); }, {input_for(c, {4, 3}, 12)});
    expect_gradients_match([fn](const std::vector<Tensor>& in) { return fn(in[0]); }, {input_for(c, {}, 13)});
  }
}

// Large tensors (parallel kernels) with a contiguous, a strided and a
// stride-0 output gradient: x.grad must be g * ref'(x) elementwise.
TEST(UnaryTest, BackwardMatchesReferenceDerivativeForStridedGradients) {
  for (const UnaryCase& c : cases()) {
    Tensor x0 = input_for(c, {300, 130}, 21);
    Tensor w = random_tensor({300, 130}, 22);
    const std::vector<double> xv = values(x0);
    for (const Tensor& g : {w, non_contiguous(w), from_vector<float>({0.75f}).expand({300, 130})}) {
      SCOPED_TRACE(c.name + (g.strides()[0] == 0 ? " expanded" : g.is_contiguous() ? " contiguous" : " strided") +
                   " gradient");
      Tensor x = x0.clone().requires_grad_();
      c.fn(x).backward(g);
      const std::vector<double> gv = values(g);
      std::vector<double> expected(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) expected[i] = gv[i] * ref_derivative(c, xv[i]);
      expect_near(x.grad(), expected, 1e-4, 1e-4);
    }
  }
}

// The backward kernels in f16/bf16, against the f32 backward on the same
// rounded inputs; ops that save y see y's rounding too (rsqrt: y^3 triples it).
TEST(UnaryTest, HalfAndBFloat16BackwardMatchFloat32) {
  struct Tol { DType dtype; double tol; };
  for (Tol t : {Tol{kFloat16, 4e-3}, Tol{kBFloat16, 3e-2}}) {
    for (const UnaryCase& c : cases()) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(t.dtype)));
      Tensor x16 = input_for(c, {5, 6}, 4).to(t.dtype).requires_grad_();
      Tensor x32 = x16.detach().to(kFloat32).requires_grad_();
      Tensor w16 = random_tensor({5, 6}, 5, t.dtype);
      c.fn(x16).backward(w16);
      c.fn(x32).backward(w16.to(kFloat32));
      EXPECT_EQ(x16.grad().dtype(), t.dtype);
      expect_near(x16.grad(), x32.grad(), t.tol, t.tol);
    }
  }
}

// Which tensor each op saves: an in-place change to it (and only to it)
// makes backward throw.
TEST(UnaryTest, SavesOutputWhereTheFormulaAllows) {
  for (const UnaryCase& c : cases()) {
    for (bool touch_output : {true, false}) {
      SCOPED_TRACE(c.name + (touch_output ? ": output modified" : ": input modified"));
      Tensor x = input_for(c, {4}, 31).requires_grad_();
      Tensor y = c.fn(x);
      {
        NoGradGuard no_grad;
        (touch_output ? y : x).mul_(1.0);   // bumps the version counter only
      }
      if (touch_output == c.saves_output) {
        expect_error([&] { y.backward(ones({4})); }, absl::StatusCode::kFailedPrecondition, {"modified"});
      } else {
        y.backward(ones({4}));
        EXPECT_TRUE(x.grad().defined());
      }
    }
  }
}

TEST(UnaryTest, EdgeValuesStayFinite) {
  Tensor big = from_vector<float>({-100.0f, 100.0f}).requires_grad_();
  expect_near(sigmoid(big), {0, 1}, 1e-7, 0);
  expect_near(tanh(big), {-1, 1}, 1e-7, 0);
  expect_near(silu(big), {0, 100}, 1e-5, 1e-6);
  expect_near(gelu(big, GeluApprox::kTanh), {0, 100}, 1e-5, 1e-6);
  expect_near(gelu(big, GeluApprox::kNone), {0, 100}, 1e-5, 1e-6);
  expect_near(exp(big.detach().slice(0, 0, 1)), {0}, 1e-30, 0);
  for (const auto& [name, fn, grad] : std::vector<std::tuple<std::string, std::function<Tensor(const Tensor&)>,
                                                             std::vector<double>>>{
           {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, {0, 0}},
           {"tanh", [](const Tensor& x) { return tanh(x); }, {0, 0}},
           {"silu", [](const Tensor& x) { return silu(x); }, {0, 1}},
           {"gelu", [](const Tensor& x) { return gelu(x, GeluApprox::kTanh); }, {0, 1}},
           {"gelu_erf", [](const Tensor& x) { return gelu(x, GeluApprox::kNone); }, {0, 1}}}) {
    SCOPED_TRACE(name);
    Tensor x = big.detach().clone().requires_grad_();
    fn(x).backward(ones({2}));
    expect_near(x.grad(), grad, 1e-6, 0);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_near(relu(from_vector<float>({nan, -1})), {NAN, 0});
  expect_near(clamp(from_vector<float>({nan, 3}), -1, 1), {NAN, 1});
}

// gelu(x) without an approximation is torch.nn.functional.gelu's default,
// the exact erf form; the tanh form differs by up to about 5e-4 (at |x| near 2).
TEST(UnaryTest, GeluDefaultsToTheExactFormAsPyTorch) {
  const Tensor x = from_vector<float>({-3.0f, -2.0f, -1.0f, 0.5f, 1.0f, 2.0f, 3.0f});
  std::vector<double> exact;
  for (double v : values(x)) exact.push_back(ref_gelu_erf(v));
  expect_near(gelu(x), exact, 1e-6, 1e-6);
  expect_near(gelu(Tensor(x.clone())), exact, 1e-6, 1e-6);   // the consuming form too
  Tensor xg = x.clone().requires_grad_();
  gelu(xg).backward(ones(x.shape()));
  Tensor xe = x.clone().requires_grad_();
  gelu(xe, GeluApprox::kNone).backward(ones(x.shape()));
  expect_near(xg.grad(), xe.grad(), 0, 0);
}

TEST(UnaryTest, KinkGradientsFollowPyTorch) {
  // clamp passes the gradient at both bounds (inclusive); 0.8 is rounded to f32 the same way in both passes.
  Tensor x = from_vector<float>({-0.5f, 0.8f, 0.0f, -1.0f, 1.0f}).requires_grad_();
  clamp(x, -0.5, 0.8).backward(ones({5}));
  expect_near(x.grad(), {1, 1, 1, 0, 0}, 0, 0);
  Tensor z = from_vector<float>({0.0f, 2.0f, -3.0f}).requires_grad_();
  abs(z).backward(ones({3}));
  expect_near(z.grad(), {0, 1, -1}, 0, 0);
  Tensor r = from_vector<float>({0.0f, 2.0f, -3.0f}).requires_grad_();
  relu(r).backward(ones({3}));
  expect_near(r.grad(), {0, 1, 0}, 0, 0);
  // d(x^0)/dx is 0 even at x = 0 (no 0 * inf).
  Tensor p = from_vector<float>({0.0f, 2.0f}).requires_grad_();
  pow(p, 0.0).backward(ones({2}));
  expect_near(p.grad(), {0, 0}, 0, 0);
  expect_near(pow(p.detach(), 0.0), {1, 1}, 0, 0);
}

TEST(UnaryTest, RejectsBadInputsWithClearMessages) {
  Tensor i = zeros({2, 3}, kInt32);
  Tensor b = zeros({4}, kBool);
  Tensor f = zeros({3});
  for (const auto& entry : std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>{
           {"exp", [](const Tensor& x) { return exp(x); }},
           {"log", [](const Tensor& x) { return log(x); }},
           {"sqrt", [](const Tensor& x) { return sqrt(x); }},
           {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
           {"pow", [](const Tensor& x) { return pow(x, 2.0); }},
           {"tanh", [](const Tensor& x) { return tanh(x); }},
           {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
           {"gelu", [](const Tensor& x) { return gelu(x, GeluApprox::kTanh); }},
           {"gelu", [](const Tensor& x) { return gelu(x, GeluApprox::kNone); }},
           {"silu", [](const Tensor& x) { return silu(x); }}}) {
    const auto& name = entry.first;  // NOTE [ No structured bindings in lambdas ]
    const auto& fn = entry.second;
    SCOPED_TRACE(name);
    expect_error([&] { (void)fn(i); }, absl::StatusCode::kInvalidArgument, {name, "[2, 3]", "i32"});
    expect_error([&] { (void)fn(Tensor()); }, absl::StatusCode::kInvalidArgument, {name, "undefined"});
  }
  expect_error([&] { (void)abs(b); }, absl::StatusCode::kInvalidArgument, {"abs", "[4]", "bool"});
  expect_error([&] { (void)relu(b); }, absl::StatusCode::kInvalidArgument, {"relu", "[4]", "bool"});
  expect_error([&] { (void)clamp(b, 0, 1); }, absl::StatusCode::kInvalidArgument, {"clamp", "[4]", "bool"});
  expect_error([&] { (void)clamp(f, 2, 1); }, absl::StatusCode::kInvalidArgument, {"clamp", "min 2", "max 1", "[3]"});
  expect_error([&] { (void)clamp(f, NAN, 1); }, absl::StatusCode::kInvalidArgument, {"clamp", "NaN", "[3]", "f32"});
  expect_error([&] { (void)clamp(i, 0.5, 2); }, absl::StatusCode::kInvalidArgument,
               {"clamp", "0.5", "whole", "[2, 3]", "i32"});
}

}  // namespace
}  // namespace encore
