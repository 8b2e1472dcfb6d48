// mse_loss, binary_cross_entropy_with_logits and nll_loss: values against
// plain-loop double references for every reduction, f16/bf16 against the
// f32 reference, gradients against finite differences, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::broadcast_index;
using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_f32_rounded_once;
using testing::expect_near;
using testing::half_subnormal;
using testing::half_ulp;
using testing::non_contiguous;
using testing::random_tensor;
using testing::unravel;
using testing::values;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

std::vector<double> reduce_ref(const std::vector<double>& l, Reduction r) {
  if (r == Reduction::kNone) return l;
  double s = 0;
  for (double v : l) s += v;
  return {r == Reduction::kSum ? s : s / static_cast<double>(l.size())};
}

// ---- mse_loss ----

std::vector<double> mse_ref(const Tensor& x, const Tensor& t) {
  const std::vector<double> xv = values(x), tv = values(t);
  std::vector<double> out;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = xv[i] - tv[broadcast_index(unravel(i, x.shape()), t.shape())];
    out.push_back(d * d);
  }
  return out;
}

TEST(LossTest, MseLossMatchesReferenceForEveryReduction) {
  const Tensor x = random_tensor({3, 5}, 1), t = random_tensor({3, 5}, 2), tb = random_tensor({5}, 3);
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    expect_near(mse_loss(x, t, r), reduce_ref(mse_ref(x, t), r));
    expect_near(mse_loss(x, tb, r), reduce_ref(mse_ref(x, tb), r));   // target broadcast
    expect_near(mse_loss(non_contiguous(x), t, r), reduce_ref(mse_ref(x, t), r));
  }
  EXPECT_EQ(mse_loss(x, t).dim(), 0);
  EXPECT_EQ(mse_loss(x, t, Reduction::kNone).shape(), x.shape());
}

TEST(LossTest, MseLossHalfDtypesMatchF32Reference) {
  const Tensor x = random_tensor({4, 6}, 4), t = random_tensor({4, 6}, 5);
  for (DType dt : {kFloat16, kBFloat16}) {
    const Tensor xh = x.to(dt), th = t.to(dt);
    const Tensor out = mse_loss(xh, th);
    EXPECT_EQ(out.dtype(), dt);
    // The f32 result (within ~1e-7 of the double reference) rounded once.
    expect_near(out.to(kFloat32), reduce_ref(mse_ref(xh, th), Reduction::kMean), 0, half_ulp(dt) + 1e-6);
  }
}

// As for binary_cross_entropy_with_logits below: the loss and the gradients
// to input and a broadcast target (a sum over 600 rows) from f16/bf16 are
// the f32 ones of the same values rounded once.
TEST(LossTest, MseLossBackwardOfHalfDtypesIsTheF32GradientRounded) {
  const Tensor x0 = random_tensor({600, 24}, 41), t0 = random_tensor({24}, 42);   // kSum ~3e4 < f16 max
  const Tensor g0 = random_tensor({600, 24}, 43);
  for (DType dt : {kFloat16, kBFloat16}) {
    for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " reduction " + std::to_string(static_cast<int>(r)));
      Tensor x = x0.to(dt).requires_grad_(), t = t0.to(dt).requires_grad_();
      Tensor xf = x.detach().to(kFloat32).requires_grad_(), tf = t.detach().to(kFloat32).requires_grad_();
      const Tensor loss = mse_loss(x, t, r), loss_f = mse_loss(xf, tf, r);
      expect_near(loss, values(loss_f), half_subnormal(dt), half_ulp(dt));
      const Tensor g = r == Reduction::kNone ? g0.to(dt) : scalar_tensor(0.7, dt);
      loss.backward(g);
      loss_f.backward(g.to(kFloat32));
      expect_f32_rounded_once(dt, {{"input", x.grad(), xf.grad()}, {"target", t.grad(), tf.grad()}});
    }
  }
}

TEST(LossTest, MseLossGradientsMatchFiniteDifferences) {
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    expect_gradients_match([r](const auto& in) { return mse_loss(in[0], in[1], r); },
                           {random_tensor({3, 4}, 6), random_tensor({3, 4}, 7)});
  }
  expect_gradients_match([](const auto& in) { return mse_loss(in[0], in[1]); },
                         {random_tensor({3, 4}, 8), random_tensor({4}, 9)});
}

TEST(LossTest, MseLossRefusals) {
  const Tensor x = random_tensor({3, 4}, 1);
  expect_error([&] { mse_loss(x, random_tensor({2, 4}, 2)); }, kInvalid, {"mse_loss", "[3, 4]", "[2, 4]"});
  expect_error([&] { mse_loss(random_tensor({4}, 2), x); }, kInvalid, {"mse_loss", "[3, 4]", "[4]"});
  expect_error([&] { mse_loss(x, x.to(kFloat16)); }, kInvalid, {"mse_loss", "f16"});
  expect_error([&] { mse_loss(x.to(kInt32), x.to(kInt32)); }, kInvalid, {"mse_loss", "i32"});
}

// ---- binary_cross_entropy_with_logits ----

// The definition, in double: -w [pw t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))].
std::vector<double> bce_ref(const Tensor& x, const Tensor& t, const Tensor& w, const Tensor& pw) {
  const std::vector<double> xv = values(x), tv = values(t);
  const std::vector<double> wv = w.defined() ? values(w) : std::vector<double>{};
  const std::vector<double> pv = pw.defined() ? values(pw) : std::vector<double>{};
  std::vector<double> out;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const std::vector<int64_t> idx = unravel(i, x.shape());
    const double wi = w.defined() ? wv[broadcast_index(idx, w.shape())] : 1.0;
    const double pwi = pw.defined() ? pv[broadcast_index(idx, pw.shape())] : 1.0;
    const double xi = xv[i], ti = tv[i];
    // log sigmoid(x) = -softplus(-x), log(1 - sigmoid(x)) = -softplus(x), computed stably.
    auto softplus = [](double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))); };
    out.push_back(wi * (pwi * ti * softplus(-xi) + (1 - ti) * softplus(xi)));
  }
  return out;
}



Tensor probabilities(Shape shape, uint64_t seed) { return sigmoid(random_tensor(std::move(shape), seed)); }

TEST(LossTest, BceWithLogitsMatchesReference) {
  const Tensor x = mul(random_tensor({4, 3}, 1), 3.0), t = probabilities({4, 3}, 2);
  const Tensor w = probabilities({3}, 3), pw = add(probabilities({3}, 4), 0.5);
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    expect_near(binary_cross_entropy_with_logits(x, t, Tensor(), Tensor(), r),
                reduce_ref(bce_ref(x, t, Tensor(), Tensor()), r));
    expect_near(binary_cross_entropy_with_logits(x, t, w, pw, r), reduce_ref(bce_ref(x, t, w, pw), r));
    expect_near(binary_cross_entropy_with_logits(non_contiguous(x), non_contiguous(t), Tensor(), pw, r),
                reduce_ref(bce_ref(x, t, Tensor(), pw), r));
  }
}

TEST(LossTest, BceWithLogitsIsStableForLargeLogits) {
  const Tensor x = from_vector<float>({-200.f, -30.f, -1e-3f, 0.f, 1e-3f, 30.f, 200.f}, {7});
  const Tensor t = from_vector<float>({1.f, 0.f, 1.f, 0.5f, 0.f, 1.f, 0.f}, {7});
  const Tensor out = binary_cross_entropy_with_logits(x, t, Tensor(), Tensor(), Reduction::kNone);
  for (double v : values(out)) EXPECT_TRUE(std::isfinite(v));
  expect_near(out, bce_ref(x, t, Tensor(), Tensor()), 1e-6, 1e-5);
  // Gradients stay finite too: sigmoid(x) - t.
  Tensor xg = x.detach().clone().requires_grad_();
  binary_cross_entropy_with_logits(xg, t, Tensor(), Tensor(), Reduction::kSum).backward();
  const std::vector<double> g = values(xg.grad()), xv = values(x), tv = values(t);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], 1 / (1 + std::exp(-xv[i])) - tv[i], 1e-6);
}

TEST(LossTest, BceWithLogitsHalfDtypesMatchF32Reference) {
  const Tensor x = random_tensor({5, 4}, 5), t = probabilities({5, 4}, 6), pw = add(probabilities({4}, 7), 1.0);
  for (DType dt : {kFloat16, kBFloat16}) {
    const Tensor xh = x.to(dt), th = t.to(dt), ph = pw.to(dt);
    const Tensor out = binary_cross_entropy_with_logits(xh, th, Tensor(), ph, Reduction::kNone);
    EXPECT_EQ(out.dtype(), dt);
    expect_near(out.to(kFloat32), bce_ref(xh, th, Tensor(), ph), 1e-2, 1e-2);
  }
}

TEST(LossTest, BceWithLogitsGradientsMatchFiniteDifferences) {
  const Tensor pw = add(probabilities({3}, 4), 0.5);
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    // Gradients to input, target and weight.
    expect_gradients_match(
        [&](const auto& in) { return binary_cross_entropy_with_logits(in[0], in[1], in[2], pw, r); },
        {random_tensor({2, 3}, 1), probabilities({2, 3}, 2), probabilities({2, 3}, 3)});
  }
}

// Both gradients against their closed forms, in double: d/dx = w (lw sigmoid(x) - pw t) and
// d/dt = w (-x + (pw - 1) softplus(-x)), lw = 1 + (pw - 1) t.
TEST(LossTest, BceWithLogitsGradientsMatchClosedForms) {
  const Tensor x0 = mul(random_tensor({4, 3}, 11), 3.0), t0 = probabilities({4, 3}, 12);
  const Tensor w = probabilities({3}, 13), pw = add(probabilities({3}, 14), 0.5);
  Tensor x = x0.detach().clone().requires_grad_(), t = t0.detach().clone().requires_grad_();
  binary_cross_entropy_with_logits(x, t, w, pw, Reduction::kSum).backward();
  const std::vector<double> xv = values(x0), tv = values(t0), wv = values(w), pv = values(pw);
  std::vector<double> gx, gt;
  for (int64_t i = 0; i < x0.numel(); ++i) {
    const double xi = xv[i], ti = tv[i], wi = wv[i % 3], pwi = pv[i % 3], lw = 1 + (pwi - 1) * ti;
    const double softplus_neg = std::max(-xi, 0.0) + std::log1p(std::exp(-std::abs(xi)));
    gx.push_back(wi * (lw / (1 + std::exp(-xi)) - pwi * ti));
    gt.push_back(wi * (-xi + (pwi - 1) * softplus_neg));
  }
  expect_near(x.grad(), gx, 1e-6, 1e-5);
  expect_near(t.grad(), gt, 1e-6, 1e-5);
}

// The gradients to input, target and weight (and the loss) from f16/bf16
// tensors are the f32 ones of the same values, rounded once (test_util.h:
// half_ulp). 600 x 24 elements; weight [24] broadcast over 600 rows, so its
// gradient is a sum of 600 products.
TEST(LossTest, BceWithLogitsBackwardOfHalfDtypesIsTheF32GradientRounded) {
  const Tensor x0 = mul(random_tensor({600, 24}, 31), 3.0), t0 = probabilities({600, 24}, 32);
  const Tensor w0 = probabilities({24}, 33), pw0 = add(probabilities({24}, 34), 0.5);
  const Tensor g0 = random_tensor({600, 24}, 35);
  for (DType dt : {kFloat16, kBFloat16}) {
    for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " reduction " + std::to_string(static_cast<int>(r)));
      Tensor x = x0.to(dt).requires_grad_(), t = t0.to(dt).requires_grad_(), w = w0.to(dt).requires_grad_();
      const Tensor pw = pw0.to(dt);
      Tensor xf = x.detach().to(kFloat32).requires_grad_(), tf = t.detach().to(kFloat32).requires_grad_();
      Tensor wf = w.detach().to(kFloat32).requires_grad_();
      const Tensor loss = binary_cross_entropy_with_logits(x, t, w, pw, r);
      const Tensor loss_f = binary_cross_entropy_with_logits(xf, tf, wf, pw.to(kFloat32), r);
      expect_near(loss, values(loss_f), half_subnormal(dt), half_ulp(dt));
      const Tensor g = r == Reduction::kNone ? g0.to(dt) : scalar_tensor(0.7, dt);
      loss.backward(g);
      loss_f.backward(g.to(kFloat32));
      expect_f32_rounded_once(dt, {{"input", x.grad(), xf.grad()}, {"target", t.grad(), tf.grad()},
                                   {"weight", w.grad(), wf.grad()}});
    }
  }
}

TEST(LossTest, BceWithLogitsRefusals) {
  const Tensor x = random_tensor({2, 3}, 1), t = probabilities({2, 3}, 2);
  constexpr const char* kOp = "binary_cross_entropy_with_logits";
  expect_error([&] { binary_cross_entropy_with_logits(x, probabilities({3}, 2)); }, kInvalid, {kOp, "[3]", "[2, 3]"});
  expect_error([&] { binary_cross_entropy_with_logits(x, t, probabilities({4}, 3)); }, kInvalid,
               {kOp, "[4]", "[2, 3]"});
  expect_error([&] { binary_cross_entropy_with_logits(x, t, Tensor(), probabilities({2, 2, 3}, 3)); }, kInvalid,
               {kOp, "pos_weight", "[2, 2, 3]"});
  expect_error([&] { binary_cross_entropy_with_logits(x, t.to(kBFloat16)); }, kInvalid, {kOp, "bf16"});
  Tensor pw = probabilities({3}, 4).requires_grad_();
  expect_error([&] { binary_cross_entropy_with_logits(x, t, Tensor(), pw); }, kInvalid, {kOp, "pos_weight", "detach"});
}

// ---- nll_loss ----

// Per target (row-major over target's shape) -w[t] x[n, t, ...] and w[t].
struct NllRef { std::vector<double> loss, weight; };
NllRef nll_ref(const Tensor& x, const std::vector<int64_t>& t, const std::vector<double>& w, int64_t ignore) {
  const std::vector<double> xv = values(x);
  const int64_t n = x.dim() == 1 ? 1 : x.size(0), c = x.dim() == 1 ? x.size(0) : x.size(1);
  const int64_t inner = x.numel() / (n * c);
  NllRef r;
  for (int64_t o = 0; o < n; ++o) {
    for (int64_t k = 0; k < inner; ++k) {
      const int64_t ti = t[o * inner + k];
      const double wi = ti == ignore ? 0.0 : (w.empty() ? 1.0 : w[ti]);
      r.loss.push_back(ti == ignore ? 0.0 : -wi * xv[(o * c + ti) * inner + k]);
      r.weight.push_back(wi);
    }
  }
  return r;
}

std::vector<double> nll_reduce(const NllRef& r, Reduction red) {
  if (red == Reduction::kNone) return r.loss;
  double s = 0, ws = 0;
  for (size_t i = 0; i < r.loss.size(); ++i) s += r.loss[i], ws += r.weight[i];
  return {red == Reduction::kSum ? s : s / ws};
}

TEST(LossTest, NllLossMatchesReference) {
  const Tensor x = log_softmax(random_tensor({5, 4}, 1), 1);
  const std::vector<int64_t> t = {0, 3, -100, 2, 1};
  const std::vector<double> w = {0.5, 1.0, 2.0, 0.25};
  const Tensor tt = from_vector<int64_t>(t, {5}), wt = from_vector<float>({0.5f, 1.f, 2.f, 0.25f}, {4});
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    expect_near(nll_loss(x, tt, Tensor(), -100, r), nll_reduce(nll_ref(x, t, {}, -100), r));
    expect_near(nll_loss(x, tt.to(kInt32), wt, -100, r), nll_reduce(nll_ref(x, t, w, -100), r));
    expect_near(nll_loss(non_contiguous(x), tt, wt, -100, r), nll_reduce(nll_ref(x, t, w, -100), r));
  }
  // ignore_index other than -100: class 2 ignored.
  const std::vector<int64_t> t2 = {0, 2, 2, 3, 1};
  expect_near(nll_loss(x, from_vector<int64_t>(t2, {5}), wt, 2), nll_reduce(nll_ref(x, t2, w, 2), Reduction::kMean));
}

TEST(LossTest, NllLossOfSpatialAndUnbatchedInputs) {
  // [N, C, d1, d2] with target [N, d1, d2].
  const Tensor x = log_softmax(random_tensor({2, 3, 2, 2}, 2), 1);
  const std::vector<int64_t> t = {0, 1, 2, 1, 2, -100, 0, 0};
  const Tensor tt = from_vector<int64_t>(t, {2, 2, 2});
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    expect_near(nll_loss(x, tt, Tensor(), -100, r), nll_reduce(nll_ref(x, t, {}, -100), r));
  }
  EXPECT_EQ(nll_loss(x, tt, Tensor(), -100, Reduction::kNone).shape(), (Shape{2, 2, 2}));
  // [C] with a 0-d target.
  const Tensor x1 = log_softmax(random_tensor({4}, 3), 0);
  expect_near(nll_loss(x1, from_vector<int64_t>({2}, {})), {-values(x1)[2]});
}

TEST(LossTest, NllLossAllIgnoredMeanIsNan) {
  const Tensor x = log_softmax(random_tensor({2, 3}, 1), 1);
  const Tensor t = from_vector<int64_t>({-100, -100}, {2});
  EXPECT_TRUE(std::isnan(values(nll_loss(x, t))[0]));
  EXPECT_EQ(values(nll_loss(x, t, Tensor(), -100, Reduction::kSum))[0], 0.0);
}

TEST(LossTest, NllLossHalfDtypesMatchF32Reference) {
  const Tensor x = log_softmax(random_tensor({6, 5}, 3), 1);
  const std::vector<int64_t> t = {4, 0, 1, -100, 3, 3};
  for (DType dt : {kFloat16, kBFloat16}) {
    const Tensor xh = x.to(dt);
    const Tensor out = nll_loss(xh, from_vector<int64_t>(t, {6}));
    EXPECT_EQ(out.dtype(), dt);
    expect_near(out.to(kFloat32), nll_reduce(nll_ref(xh, t, {}, -100), Reduction::kMean), 1e-2, 1e-2);
  }
}

// f16 sums of 70000 weights (and losses) pass 65504: the mean and its
// gradient are computed in f32 and rounded once (include/encore/ops.h), so
// they equal the f32 answer for the same inputs within one rounding (the
// gradient, 1/70000, is an f16 subnormal: half its spacing 2^-24 absolute).
// Summed in f16 the mean was 0 and its gradient 0.
TEST(LossTest, NllLossMeanOfHalfDtypesOverManyTargetsMatchesF32) {
  const int64_t n = 70000;
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = i % 3 == 0 ? 1 : 0;
  const Tensor tt = from_vector<int64_t>(t);
  const Tensor x = log_softmax(random_tensor({n, 2}, 7), 1);
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const double half_ulp = std::ldexp(1.0, dt == kFloat16 ? -11 : -8);   // relative
    const double atol = dt == kFloat16 ? std::ldexp(1.0, -25) : 0.0;
    Tensor xh = x.to(dt).requires_grad_();
    Tensor xf = xh.detach().to(kFloat32).requires_grad_();
    const Tensor loss = nll_loss(xh, tt), loss_f = nll_loss(xf, tt);
    EXPECT_EQ(loss.dtype(), dt);
    expect_near(loss, values(loss_f), 0, half_ulp);
    loss.backward();
    loss_f.backward();
    EXPECT_EQ(xh.grad().dtype(), dt);
    for (int64_t r0 : {int64_t{0}, n - 6}) {   // rows of both targets, at both ends
      expect_near(xh.grad().slice(0, r0, r0 + 6), values(xf.grad().slice(0, r0, r0 + 6)), atol, half_ulp);
    }
  }
}

// The gradient (and the loss) from f16/bf16 log-probabilities and weights is
// the f32 one of the same values, rounded once (test_util.h: half_ulp), for
// every reduction; 500 targets, 1 in 9 ignored, class weights not powers of two.
TEST(LossTest, NllLossBackwardOfHalfDtypesIsTheF32GradientRounded) {
  const int64_t n = 500, c = 7;
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = i % 9 == 4 ? -100 : (i * 5) % c;
  const Tensor tt = from_vector<int64_t>(t);
  const Tensor x0 = log_softmax(random_tensor({n, c}, 41), 1), w0 = add(probabilities({c}, 42), 0.3);
  const Tensor g0 = random_tensor({n}, 43);
  for (DType dt : {kFloat16, kBFloat16}) {
    for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " reduction " + std::to_string(static_cast<int>(r)));
      const Tensor w = w0.to(dt);
      Tensor x = x0.to(dt).requires_grad_(), xf = x.detach().to(kFloat32).requires_grad_();
      const Tensor loss = nll_loss(x, tt, w, -100, r), loss_f = nll_loss(xf, tt, w.to(kFloat32), -100, r);
      expect_near(loss, values(loss_f), half_subnormal(dt), half_ulp(dt));
      const Tensor g = r == Reduction::kNone ? g0.to(dt) : scalar_tensor(0.7, dt);
      loss.backward(g);
      loss_f.backward(g.to(kFloat32));
      EXPECT_EQ(x.grad().dtype(), dt);
      expect_near(x.grad(), values(xf.grad()), half_subnormal(dt), half_ulp(dt));
    }
  }
}

TEST(LossTest, NllLossGradientsMatchFiniteDifferences) {
  const Tensor t = from_vector<int64_t>({1, -100, 0, 2}, {4});
  const Tensor w = from_vector<float>({0.5f, 1.5f, 2.f}, {3});
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    expect_gradients_match([&](const auto& in) { return nll_loss(in[0], t, w, -100, r); },
                           {random_tensor({4, 3}, 5)});
  }
  // Composed with log_softmax it is cross_entropy; spatial targets too.
  const Tensor ts = from_vector<int64_t>({0, 2, 1, 1}, {2, 2});
  expect_gradients_match([&](const auto& in) { return nll_loss(log_softmax(in[0], 1), ts); },
                         {random_tensor({2, 3, 2}, 6)});
}

TEST(LossTest, NllLossEqualsCrossEntropyOfLogSoftmax) {
  const Tensor logits = random_tensor({6, 7}, 9);
  const Tensor t = from_vector<int64_t>({0, 6, 3, -100, 2, 2}, {6});
  expect_near(nll_loss(log_softmax(logits, 1), t), cross_entropy(logits, t), 1e-6, 1e-5);
}

TEST(LossTest, NllLossRefusals) {
  const Tensor x = log_softmax(random_tensor({3, 4}, 1), 1);
  const Tensor t = from_vector<int64_t>({0, 1, 2}, {3});
  expect_error([&] { nll_loss(x, from_vector<int64_t>({0, 4, 1}, {3})); }, kInvalid,
               {"nll_loss", "class 4", "position 1", "C = 4"});
  expect_error([&] { nll_loss(x, from_vector<int64_t>({0, 1}, {2})); }, kInvalid, {"nll_loss", "[2]", "[3, 4]"});
  expect_error([&] { nll_loss(x, t.to(kFloat32)); }, kInvalid, {"nll_loss", "i32 or i64", "f32"});
  expect_error([&] { nll_loss(x, t, from_vector<float>({1.f, 1.f}, {2})); }, kInvalid, {"nll_loss", "weight", "[2]"});
  expect_error([&] { nll_loss(x, t, ones({4}).requires_grad_()); }, kInvalid, {"nll_loss", "weight", "detach"});
  expect_error([&] { nll_loss(scalar_tensor(1.0), t); }, kInvalid, {"nll_loss", "0-d"});
}

}  // namespace
}  // namespace encore
