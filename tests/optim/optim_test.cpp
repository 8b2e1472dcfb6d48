// Optimizers (SGD, AdamW), clip_grad_norm and WarmupCosine against host
// references written with plain double loops (PyTorch's formulas), plus the
// properties capture relies on: state on the device, kernels that read lr and
// the step count through pointers, no host reads inside step().
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "encore/encore.h"
#include "encore/optim.h"
#include "src/backends/kernels.h"
#include "src/core/step_observer.h"
#include "src/core/stream.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using optim::AdamW;
using optim::AdamWOptions;
using optim::SGD;
using optim::SgdOptions;
using optim::WarmupCosine;
using optim::WarmupCosineOptions;
using testing::expect_error;
using testing::expect_near;
using testing::random_tensor;
using testing::values;
using Vec = std::vector<double>;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

Tensor make_param(Shape shape, uint64_t seed, DType dtype = kFloat32) {
  return random_tensor(std::move(shape), seed, dtype).requires_grad_();
}

// lr as the kernels see it: stored in an f32 tensor.
double f32(double x) { return static_cast<float>(x); }

// ---- host references (PyTorch's formulas, double math) ----

struct SgdRef {
  Vec p, buf;
  bool has_buf = false;
};

void sgd_ref(SgdRef& r, const Vec& g, double lr, double mu, bool nesterov, double wd) {
  Vec d(r.p.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = g[i] + wd * r.p[i];
  if (mu != 0.0) {
    if (!r.has_buf) {
      r.buf = d;   // PyTorch: buf = clone(d) on the first step
      r.has_buf = true;
    } else {
      for (size_t i = 0; i < d.size(); ++i) r.buf[i] = mu * r.buf[i] + d[i];
    }
    for (size_t i = 0; i < d.size(); ++i) d[i] = nesterov ? d[i] + mu * r.buf[i] : r.buf[i];
  }
  for (size_t i = 0; i < d.size(); ++i) r.p[i] -= lr * d[i];
}

struct AdamRef {
  Vec p, m, v;
  explicit AdamRef(Vec p0) : p(std::move(p0)), m(p.size(), 0.0), v(p.size(), 0.0) {}
};

void adamw_ref(AdamRef& r, const Vec& g, double lr, const AdamWOptions& o, int t) {
  for (size_t i = 0; i < r.p.size(); ++i) {
    r.p[i] -= lr * o.weight_decay * r.p[i];
    r.m[i] = o.beta1 * r.m[i] + (1 - o.beta1) * g[i];
    r.v[i] = o.beta2 * r.v[i] + (1 - o.beta2) * g[i] * g[i];
    const double mhat = r.m[i] / (1 - std::pow(o.beta1, t));
    const double vhat = r.v[i] / (1 - std::pow(o.beta2, t));
    r.p[i] -= lr * mhat / (std::sqrt(vhat) + o.eps);
  }
}

// The state tensor called `name`, or an undefined tensor.
Tensor state_of(const optim::Optimizer& opt, const std::string& name) {
  for (const auto& [n, t] : opt.state()) {
    if (n == name) return t;
  }
  return Tensor();
}

std::vector<std::string> state_names(const optim::Optimizer& opt) {
  std::vector<std::string> names;
  for (const auto& entry : opt.state()) names.push_back(entry.first);
  return names;
}

// ---- a launch recorder: what capture sees, and a replay from argument bytes ----

struct RecordedLaunch {
  std::string op;
  KernelThunk thunk;
  std::vector<std::max_align_t> args;   // aligned copy of the argument bytes
  std::vector<Storage*> reads, writes;
};

class Recorder : public StepObserver {
 public:

  bool on_launch(const LaunchRecord& r) override {
    RecordedLaunch l{r.op, r.thunk, {}, {r.reads.begin(), r.reads.end()}, {r.writes.begin(), r.writes.end()}};
    l.args.resize((r.args_size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
    std::memcpy(l.args.data(), r.args, r.args_size);
    launches.push_back(std::move(l));
    return true;   // run it now too, like the recording warm-up
  }
  void on_host_access(const char* op) override { host_accesses.push_back(op); }

  std::vector<RecordedLaunch> launches;
  std::vector<std::string> host_accesses;

 private:
  StepObserverScope observe_{this};   // installed while alive, what was before restored after
};

// Runs fn under a Recorder; expects no host read or transfer inside (capture
// refuses them) and returns the launches.
template <typename F>
std::vector<RecordedLaunch> record(F&& fn) {
  Recorder rec;
  fn();
  EXPECT_TRUE(rec.host_accesses.empty()) << "host access inside: " << rec.host_accesses[0];
  return std::move(rec.launches);
}

bool contains(const std::vector<Storage*>& set, const Tensor& t) {
  return std::find(set.begin(), set.end(), t.storage()) != set.end();
}

// ---- SGD ----

struct SgdCase {
  double momentum;
  bool nesterov;
  double weight_decay;
};

TEST(OptimTest, SgdMatchesReferenceOverThreeSteps) {
  const SgdCase cases[] = {{0, false, 0}, {0, false, 0.1}, {0.9, false, 0}, {0.9, true, 0}, {0.5, false, 0.05},
                           {0.8, true, 0.02}};
  for (const SgdCase& c : cases) {
    SCOPED_TRACE(absl::StrFormat("momentum %g nesterov %d wd %g", c.momentum, c.nesterov, c.weight_decay));
    std::vector<Tensor> params = {make_param({3, 4}, 1), make_param({5}, 2), make_param({}, 3)};
    SGD opt(params, {.lr = 0.1, .momentum = c.momentum, .nesterov = c.nesterov, .weight_decay = c.weight_decay});
    std::vector<SgdRef> refs;
    for (const Tensor& p : params) refs.push_back({values(p)});
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor g = random_tensor(params[i].shape(), 100 + 10 * step + i);
        params[i].set_grad(g);
        sgd_ref(refs[i], values(g), f32(0.1), c.momentum, c.nesterov, c.weight_decay);
      }
      opt.step();
    }
    for (size_t i = 0; i < params.size(); ++i) {
      expect_near(params[i], refs[i].p);
      Tensor buf = state_of(opt, absl::StrCat("momentum.", i));
      EXPECT_EQ(buf.defined(), c.momentum > 0);
      if (buf.defined()) expect_near(buf, refs[i].buf);
    }
  }
}

TEST(OptimTest, SgdOnNonContiguousParamsAndGrads) {
  // A leaf whose strides are transposed, and gradients that are strided views.
  Tensor p = random_tensor({4, 3}, 5).t().detach().requires_grad_();
  ASSERT_FALSE(p.is_contiguous());
  SGD opt({p}, {.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 0.1});
  SgdRef ref{values(p)};
  for (int step = 0; step < 3; ++step) {
    Tensor g = testing::non_contiguous(random_tensor({3, 4}, 20 + step));
    p.set_grad(g);
    sgd_ref(ref, values(g), f32(0.05), 0.9, true, 0.1);
    opt.step();
  }
  expect_near(p, ref.p);
}

// ---- AdamW ----

TEST(OptimTest, AdamWMatchesReferenceOverFourSteps) {
  const AdamWOptions o{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  std::vector<Tensor> params = {make_param({3, 4}, 1), make_param({7}, 2), make_param({}, 3),
                                make_param({0, 3}, 4)};
  AdamW opt(params, o);
  std::vector<AdamRef> refs;
  for (const Tensor& p : params) refs.emplace_back(values(p));
  for (int t = 1; t <= 4; ++t) {
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = random_tensor(params[i].shape(), 200 + 10 * t + i);
      params[i].set_grad(g);
      adamw_ref(refs[i], values(g), f32(o.lr), o, t);
    }
    opt.step();
  }
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(i);
    expect_near(params[i], refs[i].p);
    expect_near(state_of(opt, absl::StrCat("exp_avg.", i)), refs[i].m);
    expect_near(state_of(opt, absl::StrCat("exp_avg_sq.", i)), refs[i].v);
  }
  EXPECT_EQ(state_of(opt, "step").item<int64_t>(), 4);
}

TEST(OptimTest, AdamWDefaultsAndNonContiguousOperands) {
  AdamWOptions o;   // lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0.01
  Tensor p = random_tensor({5, 2}, 7).t().detach().requires_grad_();
  AdamW opt({p});
  AdamRef ref(values(p));
  for (int t = 1; t <= 3; ++t) {
    Tensor g = testing::non_contiguous(random_tensor({2, 5}, 30 + t));
    p.set_grad(g);
    adamw_ref(ref, values(g), f32(o.lr), o, t);
    opt.step();
  }
  expect_near(p, ref.p);
}

// NOTE [ AdamW arithmetic ] (src/backends/optim_math.h): dense f32 operands
// take a vector path, strided ones go element by element; both must give the
// same bits, full vectors and the tail alike (3 x 37 = 111 elements).
TEST(OptimTest, AdamWDenseAndStridedPathsGiveTheSameBits) {
  const AdamWOptions o{.lr = 3e-2, .weight_decay = 0.1};
  Tensor base = random_tensor({3, 37}, 11);
  Tensor dense = base.clone().requires_grad_();
  Tensor strided = testing::non_contiguous(base).detach().requires_grad_();
  ASSERT_TRUE(dense.is_contiguous());
  ASSERT_FALSE(strided.is_contiguous());
  AdamW dense_opt({dense}, o), strided_opt({strided}, o);
  for (int t = 1; t <= 3; ++t) {
    Tensor g = random_tensor({3, 37}, 60 + t);
    dense.set_grad(g.clone());
    strided.set_grad(testing::non_contiguous(g));
    dense_opt.step();
    strided_opt.step();
  }
  EXPECT_EQ(dense.to_vector<float>(), strided.contiguous().to_vector<float>());
  for (const char* name : {"exp_avg.0", "exp_avg_sq.0"}) {
    EXPECT_EQ(state_of(dense_opt, name).to_vector<float>(), state_of(strided_opt, name).to_vector<float>())
        << name;
  }
}

TEST(OptimTest, AdamWHalfPrecisionParamsComputeInF32WithF32State) {
  const AdamWOptions o{.lr = 0.05, .weight_decay = 0.1};
  // Tolerance: each step computes the update in f32 from the stored
  // parameter and rounds it once to the parameter's dtype (NOTE [ AdamW
  // arithmetic ]). So after each step the parameter is within half an ulp
  // of the exact update of the value it started from: 2^-11 relative for
  // f16, 2^-8 for bf16 (test_util.h half_ulp), plus f32's own error, a few
  // ulps of |p| <= 3 and of the step (about lr): under 1e-6. The reference
  // restarts every step from the stored parameter, so the roundings do not
  // add up over steps (3 steps in double from the start needed 2.5e-2 for
  // bf16, which an update computed in bf16 also passed). The state is f32
  // throughout and matches the double reference to f32 tolerance.
  for (DType dtype : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Tensor p = make_param({6, 5}, 9, dtype);
    AdamW opt({p}, o);
    AdamRef ref(values(p));
    for (int t = 1; t <= 3; ++t) {
      SCOPED_TRACE(t);
      Tensor g = random_tensor({6, 5}, 40 + t, dtype);
      p.set_grad(g);
      ref.p = values(p);   // the stored (rounded) parameter the kernel starts from
      adamw_ref(ref, values(g), f32(o.lr), o, t);
      opt.step();
      EXPECT_EQ(p.dtype(), dtype);
      expect_near(p, ref.p, 1e-6, testing::half_ulp(dtype));
    }
    Tensor m = state_of(opt, "exp_avg.0");
    EXPECT_EQ(m.dtype(), kFloat32);
    expect_near(m, ref.m);
    expect_near(state_of(opt, "exp_avg_sq.0"), ref.v);
  }
}

TEST(OptimTest, AdamWStepTensorIncrementsOnTheDevice) {
  Tensor p = make_param({3}, 1);
  AdamW opt({p});
  EXPECT_FALSE(state_of(opt, "step").defined());
  p.set_grad(ones({3}));
  opt.step();
  Tensor step = state_of(opt, "step");
  ASSERT_TRUE(step.defined());
  EXPECT_EQ(step.dtype(), kInt64);
  EXPECT_EQ(step.dim(), 0);
  EXPECT_EQ(step.device(), p.device());
  void* where = step.data_ptr();
  for (int64_t t = 1; t <= 3; ++t) {
    EXPECT_EQ(state_of(opt, "step").item<int64_t>(), t);
    EXPECT_EQ(state_of(opt, "step").data_ptr(), where);   // the same tensor, updated in place
    opt.step();
  }
}

// ---- state, skipping, lr, zero_grad ----

TEST(OptimTest, StateIsCreatedLazilyOnTheParamsDevice) {
  Tensor a = make_param({2, 3}, 1), b = make_param({4}, 2);
  AdamW adam({a, b});
  SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.9});
  SGD plain({a, b}, {.lr = 0.1});
  EXPECT_EQ(state_names(adam), std::vector<std::string>{"lr"});
  EXPECT_EQ(state_names(sgd), std::vector<std::string>{"lr"});
  a.set_grad(ones({2, 3}));   // b has no gradient yet
  adam.step();
  sgd.step();
  plain.step();
  EXPECT_EQ(state_names(adam), (std::vector<std::string>{"lr", "step", "exp_avg.0", "exp_avg_sq.0"}));
  EXPECT_EQ(state_names(sgd), (std::vector<std::string>{"lr", "momentum.0"}));
  EXPECT_EQ(state_names(plain), std::vector<std::string>{"lr"});
  for (const auto& [name, t] : adam.state()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(t.device(), a.device());
    if (name.starts_with("exp_avg")) {
      EXPECT_EQ(t.shape(), a.shape());
      EXPECT_EQ(t.dtype(), kFloat32);
    }
  }
  Tensor lr = state_of(adam, "lr");
  EXPECT_TRUE(lr.is_same(adam.lr()));
  EXPECT_EQ(lr.dtype(), kFloat32);
  EXPECT_EQ(lr.numel(), 1);
}

TEST(OptimTest, ParamsWithoutGradAreSkipped) {
  const AdamWOptions o{.lr = 0.01};
  Tensor a = make_param({3}, 1), b = make_param({2, 2}, 2);
  const std::vector<float> b0 = b.to_vector<float>();
  AdamW opt({a, b}, o);
  opt.step();   // no gradient at all: nothing happens, not even the step count
  EXPECT_EQ(state_names(opt), std::vector<std::string>{"lr"});
  AdamRef ra(values(a));
  Tensor ga = random_tensor({3}, 5);
  a.set_grad(ga);
  for (int t = 1; t <= 2; ++t) {
    adamw_ref(ra, values(ga), f32(o.lr), o, t);
    opt.step();
  }
  expect_near(a, ra.p);
  EXPECT_EQ(b.to_vector<float>(), b0);   // untouched, bit for bit
  EXPECT_FALSE(state_of(opt, "exp_avg.1").defined());
  // Once b has a gradient it gets state; the shared step count is then 3.
  Tensor gb = random_tensor({2, 2}, 6);
  b.set_grad(gb);
  AdamRef rb(values(b));
  adamw_ref(ra, values(ga), f32(o.lr), o, 3);
  adamw_ref(rb, values(gb), f32(o.lr), o, 3);
  opt.step();
  expect_near(a, ra.p);
  expect_near(b, rb.p);
  expect_near(state_of(opt, "exp_avg.1"), rb.m);
}

TEST(OptimTest, SetLrTakesEffectOnTheNextStep) {
  Tensor p = make_param({4}, 1);
  Tensor g = random_tensor({4}, 2);
  p.set_grad(g);
  SGD opt({p}, {.lr = 0.1});
  EXPECT_DOUBLE_EQ(opt.get_lr(), f32(0.1));
  SgdRef ref{values(p)};
  opt.step();
  sgd_ref(ref, values(g), f32(0.1), 0, false, 0);
  opt.set_lr(0.5);
  EXPECT_DOUBLE_EQ(opt.get_lr(), 0.5);
  opt.step();
  sgd_ref(ref, values(g), 0.5, 0, false, 0);
  {
    // The kernel reads the tensor itself: a write through any handle counts.
    NoGradGuard no_grad;
    Tensor lr = opt.lr();
    lr.fill_(0.25);
  }
  opt.step();
  sgd_ref(ref, values(g), 0.25, 0, false, 0);
  expect_near(p, ref.p);
  EXPECT_DOUBLE_EQ(opt.get_lr(), 0.25);
}

TEST(OptimTest, ZeroGradZeroesInPlaceAndKeepsStorage) {
  Tensor a = make_param({3, 2}, 1), b = make_param({5}, 2), c = make_param({2}, 3);
  a.set_grad(random_tensor({3, 2}, 4));
  b.set_grad(testing::non_contiguous(random_tensor({5}, 5)));
  void* pa = a.grad().data_ptr();
  void* pb = b.grad().data_ptr();
  SGD opt({a, b, c}, {.lr = 0.1});
  opt.zero_grad();
  EXPECT_EQ(a.grad().data_ptr(), pa);
  EXPECT_EQ(b.grad().data_ptr(), pb);
  expect_near(a.grad(), Vec(6, 0.0), 0, 0);
  expect_near(b.grad(), Vec(5, 0.0), 0, 0);
  EXPECT_FALSE(c.grad().defined());   // never had one: stays undefined
  // A zeroed gradient still counts as a gradient: plain SGD leaves p as it was.
  const Vec a0 = values(a);
  opt.step();
  expect_near(a, a0, 0, 0);
}

// The property capture relies on: a recorded step, replayed from its argument
// bytes, uses the learning rate and step count of the moment of replay.
TEST(OptimTest, RecordedAdamWStepReplaysWithCurrentLrAndStepCount) {
  const AdamWOptions o{.lr = 0.01, .weight_decay = 0.05};
  Tensor p = make_param({4, 3}, 1);
  p.set_grad(zeros({4, 3}));
  AdamW opt({p}, o);
  AdamRef ref(values(p));
  auto set_grad_values = [&](uint64_t seed) {
    NoGradGuard no_grad;
    Tensor g = random_tensor({4, 3}, seed);
    p.grad().copy_(g);   // static gradient storage, new values (as backward would write them)
    return values(g);
  };
  adamw_ref(ref, set_grad_values(10), f32(o.lr), o, 1);
  opt.step();   // warm-up: creates the state
  adamw_ref(ref, set_grad_values(11), f32(o.lr), o, 2);
  std::vector<RecordedLaunch> launches = record([&] { opt.step(); });
  ASSERT_EQ(launches.size(), 2u);
  Tensor step = state_of(opt, "step"), m = state_of(opt, "exp_avg.0"), v = state_of(opt, "exp_avg_sq.0");
  EXPECT_EQ(launches[0].op, "increment");
  EXPECT_TRUE(contains(launches[0].reads, step) && contains(launches[0].writes, step));
  EXPECT_EQ(launches[1].op, "adamw");
  for (const Tensor* t : {&p, &m, &v}) EXPECT_TRUE(contains(launches[1].writes, *t));
  for (const Tensor* t : {&p, &m, &v, &step}) EXPECT_TRUE(contains(launches[1].reads, *t));
  EXPECT_TRUE(contains(launches[1].reads, p.grad()) && contains(launches[1].reads, opt.lr()));
  // Replay twice, with a new learning rate and new gradients each time.
  for (auto [t, lr] : {std::pair{3, 0.02}, std::pair{4, 0.005}}) {
    opt.set_lr(lr);
    adamw_ref(ref, set_grad_values(10 + t), f32(lr), o, t);
    for (const RecordedLaunch& l : launches) l.thunk(l.args.data());
  }
  EXPECT_EQ(step.item<int64_t>(), 4);
  expect_near(p, ref.p);
  expect_near(m, ref.m);
}

TEST(OptimTest, RecordedSgdStepReplaysWithCurrentLr) {
  Tensor p = make_param({6}, 1);
  Tensor g = random_tensor({6}, 2);
  p.set_grad(g);
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  SgdRef ref{values(p)};
  sgd_ref(ref, values(g), f32(0.1), 0.9, false, 0.01);
  opt.step();
  sgd_ref(ref, values(g), f32(0.1), 0.9, false, 0.01);
  std::vector<RecordedLaunch> launches = record([&] { opt.step(); });
  ASSERT_EQ(launches.size(), 1u);
  const RecordedLaunch& l = launches[0];
  Tensor buf = state_of(opt, "momentum.0");
  EXPECT_TRUE(contains(l.reads, opt.lr()) && contains(l.reads, g) && contains(l.reads, buf));
  EXPECT_TRUE(contains(l.writes, p) && contains(l.writes, buf));
  opt.set_lr(0.3);
  l.thunk(l.args.data());
  sgd_ref(ref, values(g), f32(0.3), 0.9, false, 0.01);
  expect_near(p, ref.p);
}

// ---- errors ----

TEST(OptimTest, RejectsBadParameters) {
  Tensor leaf = make_param({2, 3}, 1);
  Tensor non_leaf = leaf * 2.0;
  expect_error([&] { SGD({leaf, non_leaf}, {.lr = 0.1}); }, kInvalid, {"SGD", "parameter 1", "[2, 3]", "leaf"});
  expect_error([] { AdamW({arange(3)}); }, kInvalid, {"AdamW", "parameter 0", "[3]", "i64", "float"});
  expect_error([] { AdamW({zeros({4})}); }, kInvalid, {"AdamW", "parameter 0", "[4]", "requires_grad"});
  expect_error([&] { AdamW({leaf, leaf}); }, kInvalid, {"AdamW", "parameter 1", "[2, 3]", "more than once"});
  expect_error([&] { AdamW({leaf, Tensor()}); }, kInvalid, {"AdamW", "parameter 1", "undefined"});
  expect_error([] { AdamW({}); }, kInvalid, {"AdamW", "empty"});
}

TEST(OptimTest, RejectsBadOptions) {
  Tensor p = make_param({2}, 1);
  expect_error([&] { SGD({p}, {.lr = 0.1, .nesterov = true}); }, kInvalid, {"SGD", "nesterov", "momentum"});
  expect_error([&] { SGD({p}, {.lr = -0.1}); }, kInvalid, {"SGD", "lr", "-0.1"});
  expect_error([&] { SGD({p}, {.lr = 0.1, .momentum = -1}); }, kInvalid, {"SGD", "momentum", "-1"});
  expect_error([&] { SGD({p}, {.lr = 0.1, .weight_decay = NAN}); }, kInvalid, {"SGD", "weight_decay"});
  expect_error([&] { AdamW({p}, {.beta1 = 1.0}); }, kInvalid, {"AdamW", "beta1", "[0, 1)"});
  expect_error([&] { AdamW({p}, {.beta2 = -0.5}); }, kInvalid, {"AdamW", "beta2", "-0.5"});
  expect_error([&] { AdamW({p}, {.eps = -1e-8}); }, kInvalid, {"AdamW", "eps"});
  // eps 0 (or 0 once in f32) made every element with a zero gradient NaN at the first step.
  for (double eps : {0.0, 1e-50, double{NAN}}) {
    expect_error([&] { AdamW({p}, {.eps = eps}); }, kInvalid, {"AdamW", "eps", "> 0"});
  }
  AdamW opt({p});
  expect_error([&] { opt.set_lr(-1); }, kInvalid, {"AdamW", "lr", "-1"});
  expect_error([&] { opt.set_lr(INFINITY); }, kInvalid, {"AdamW", "lr", "inf"});
}

// The kernels read lr, momentum, weight decay and eps as f32: a value past
// the f32 range used to be accepted and became inf there (review finding:
// SGD at lr 1e39 turned every parameter into -inf or NaN at its first step).
TEST(OptimTest, RejectsHyperParametersPastTheF32Range) {
  Tensor p = make_param({2}, 1);
  p.set_grad(ones({2}));
  expect_error([&] { SGD({p}, {.lr = 1e39}); }, kInvalid, {"SGD", "lr", "f32", "1e+39"});
  expect_error([&] { SGD({p}, {.lr = 0.1, .momentum = 1e39}); }, kInvalid, {"SGD", "momentum", "f32", "1e+39"});
  expect_error([&] { SGD({p}, {.lr = 0.1, .weight_decay = 1e39}); }, kInvalid,
               {"SGD", "weight_decay", "f32", "1e+39"});
  expect_error([&] { SGD({p}, {.lr = 0.1, .momentum = NAN}); }, kInvalid, {"SGD", "momentum", "nan"});
  expect_error([&] { AdamW({p}, {.weight_decay = 1e39}); }, kInvalid, {"AdamW", "weight_decay", "f32", "1e+39"});
  expect_error([&] { AdamW({p}, {.weight_decay = -0.1}); }, kInvalid, {"AdamW", "weight_decay", "-0.1"});
  for (double eps : {1e39, -1e39, double{INFINITY}}) {
    expect_error([&] { AdamW({p}, {.eps = eps}); }, kInvalid, {"AdamW", "eps", "f32"});
  }
  expect_error([&] { AdamW({p}, {.beta1 = NAN}); }, kInvalid, {"AdamW", "beta1", "nan"});
  SGD opt({p}, {.lr = 0.5});
  expect_error([&] { opt.set_lr(1e39); }, kInvalid, {"SGD", "lr", "1e+39"});
  expect_error([&] { opt.set_lr(NAN); }, kInvalid, {"SGD", "lr", "nan"});
  EXPECT_EQ(opt.get_lr(), 0.5);                // a refused rate leaves the old one
  expect_error([&] { WarmupCosine(opt, {.base_lr = 1e39, .warmup_steps = 1000, .total_steps = 2000}); },
               kInvalid, {"WarmupCosine", "base_lr", "f32", "1e+39"});
  opt.step();
  for (float v : p.to_vector<float>()) EXPECT_TRUE(std::isfinite(v));   // no refused value took effect
}

// ---- clip_grad_norm ----

// The global L2 norm of the defined gradients, in double.
double host_norm(const std::vector<Tensor>& params) {
  double s = 0;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    for (double x : values(p.grad())) s += x * x;
  }
  return std::sqrt(s);
}

TEST(ClipTest, ScalesGradsAboveMaxNorm) {
  std::vector<Tensor> params = {make_param({3, 4}, 1), make_param({7}, 2), make_param({}, 3), make_param({2}, 4)};
  params[0].set_grad(random_tensor({3, 4}, 5));
  params[1].set_grad(testing::non_contiguous(random_tensor({7}, 6)));
  params[2].set_grad(random_tensor({}, 7));   // params[3] has no gradient
  const double norm = host_norm(params);
  const double max_norm = norm / 3;
  std::vector<Vec> before;
  for (int i = 0; i < 3; ++i) before.push_back(values(params[i].grad()));
  Tensor total = optim::clip_grad_norm(params, max_norm);
  EXPECT_EQ(total.dim(), 0);
  EXPECT_EQ(total.dtype(), kFloat32);
  EXPECT_NEAR(total.item<float>(), norm, 1e-5 * norm);
  const double scale = max_norm / (norm + 1e-6);
  for (int i = 0; i < 3; ++i) {
    Vec expected = before[i];
    for (double& x : expected) x *= scale;
    expect_near(params[i].grad(), expected);
  }
  EXPECT_FALSE(params[3].grad().defined());
  EXPECT_NEAR(host_norm(params), max_norm, 1e-5);
}

TEST(ClipTest, LeavesGradsUntouchedBelowMaxNorm) {
  std::vector<Tensor> params = {make_param({5}, 1), make_param({2, 2}, 2)};
  params[0].set_grad(random_tensor({5}, 3));
  params[1].set_grad(random_tensor({2, 2}, 4));
  const std::vector<float> g0 = params[0].grad().to_vector<float>(), g1 = params[1].grad().to_vector<float>();
  const double norm = host_norm(params);
  Tensor total = optim::clip_grad_norm(params, 2 * norm);
  EXPECT_NEAR(total.item<float>(), norm, 1e-5 * norm);
  EXPECT_EQ(params[0].grad().to_vector<float>(), g0);   // bit for bit
  EXPECT_EQ(params[1].grad().to_vector<float>(), g1);
}

TEST(ClipTest, LargeAndHalfPrecisionGrads) {
  // 300k elements span several fixed chunks (and threads) of the sum of squares.
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    std::vector<Tensor> params = {make_param({300, 1000}, 1, dtype), make_param({3}, 2, dtype)};
    params[0].set_grad(random_tensor({300, 1000}, 3, dtype));
    params[1].set_grad(random_tensor({3}, 4, dtype));
    const double norm = host_norm(params);
    const Vec g1 = values(params[1].grad());
    Tensor total = optim::clip_grad_norm(params, 1.0);
    EXPECT_NEAR(total.item<float>(), norm, 1e-5 * norm);
    // The scaled value is rounded to the gradient's dtype: 2^-8 relative for bf16.
    const double tol = dtype == kFloat32 ? 1e-6 : 4e-3;
    Vec expected = g1;
    for (double& x : expected) x /= norm + 1e-6;
    expect_near(params[1].grad(), expected, tol, tol);
  }
}

// The f32 sum of squares (a clone per x86-64 level, 8 double lanes) in its
// documented order, modelled here: fixed chunks of the gradient (by its
// size alone), in each the lanes j, j + 8, ... in double, the tail first
// into the chunk's sum, then the lanes in order; chunks added in order. The
// norm's bits must be the model's at one and two threads.
TEST(ClipTest, FloatSumOfSquaresIsTheLaneOrderBitForBitAtOneAndTwoThreads) {
  const int64_t n = 300007;
  const std::vector<float> g = random_tensor({n}, 5).to_vector<float>();
  const int64_t chunks = std::min<int64_t>(64, (n + 32767) / 32768), size = (n + chunks - 1) / chunks;
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = std::min(n, c * size), e = std::min(n, b + size);
    double lane[8] = {};
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
      for (int j = 0; j < 8; ++j) lane[j] += static_cast<double>(g[i + j]) * static_cast<double>(g[i + j]);
    }
    double s = 0.0;
    for (; i < e; ++i) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    for (double l : lane) s += l;
    total += s;
  }
  // The gradient's norm, its root rounded once (the sum of one exact f32 square is that f32 again).
  const float want = static_cast<float>(std::sqrt(total));
  for (int threads : {1, 2}) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor p = zeros({n}).requires_grad_();
    p.set_grad(from_vector<float>(g, {n}));
    const float got = optim::clip_grad_norm({p}, 1e30).item<float>();
    omp_set_num_threads(before);
    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << threads << " threads: " << got << " vs " << want;
  }
}

// A norm f32 holds is finite though its square is not: each gradient's sum
// of squares (in double) goes to f32 as its root. Gradients of 2e19 used to
// give an infinite norm (the sum 8e38 rounded to f32) and were zeroed.
TEST(ClipTest, NormsWhoseSquareOverflowsF32AreFinite) {
  std::vector<Tensor> params = {make_param({2}, 1), make_param({2}, 2)};
  params[0].set_grad(full({2}, 2e19));
  params[1].set_grad(full({2}, 1e19));
  const double norm = std::sqrt(2 * 4e38 + 2 * 1e38);   // sqrt(1e39) = 3.16e19
  const float total = optim::clip_grad_norm(params, 1.0).item<float>();
  EXPECT_NEAR(total, norm, 1e-6 * norm);
  expect_near(params[0].grad(), {2e19 / norm, 2e19 / norm}, 1e-6, 1e-6);
  expect_near(params[1].grad(), {1e19 / norm, 1e19 / norm}, 1e-6, 1e-6);
}

TEST(ClipTest, NoGradsGiveZeroAndNoHostReadsInside) {
  Tensor p = make_param({3}, 1);
  EXPECT_EQ(optim::clip_grad_norm({p}, 1.0).item<float>(), 0.0f);
  p.set_grad(full({3}, 2.0));
  Tensor total;
  std::vector<RecordedLaunch> launches = record([&] { total = optim::clip_grad_norm({p}, 1.0); });
  // sum_of_squares reads the gradient; the last kernel writes it.
  bool reads_grad = false, writes_grad = false;
  for (const RecordedLaunch& l : launches) {
    reads_grad = reads_grad || (l.op == std::string("sum_of_squares") && contains(l.reads, p.grad()));
    writes_grad = writes_grad || (l.op == std::string("scale_in_place") && contains(l.writes, p.grad()));
  }
  EXPECT_TRUE(reads_grad && writes_grad);
  EXPECT_NEAR(total.item<float>(), std::sqrt(12.0), 1e-6);
  expect_near(p.grad(), Vec(3, 2.0 / (std::sqrt(12.0) + 1e-6)));
}

TEST(ClipTest, RejectsBadArguments) {
  Tensor p = make_param({3}, 1);
  p.set_grad(ones({3}));
  expect_error([&] { optim::clip_grad_norm({p}, -1.0); }, kInvalid, {"clip_grad_norm", "max_norm", "-1"});
  expect_error([&] { optim::clip_grad_norm({p}, NAN); }, kInvalid, {"clip_grad_norm", "max_norm"});
  // A broadcast gradient, which could not be scaled in place, is refused when it is set.
  expect_error([&] { p.set_grad(ones({1}).expand({3})); }, kInvalid, {"set_grad", "[3]", "broadcast"});
}

// A parameter listed twice, or two whose gradients view one memory, used to be
// counted twice in the norm and scaled twice (review finding: [3, 4] listed
// twice came back as [0.06, 0.08] with a norm of 7.07 instead of [0.6, 0.8]
// and 5). The optimizers refuse such a list; clip_grad_norm does too.
TEST(ClipTest, RefusesAGradientListedTwice) {
  Tensor p = make_param({2}, 1), q = make_param({2}, 2), r = make_param({3}, 3);
  p.set_grad(from_vector<float>({3, 4}));
  expect_error([&] { optim::clip_grad_norm({p, r, p}, 1.0); }, kInvalid,
               {"clip_grad_norm", "parameter 2", "[2]", "parameter 0", "twice"});
  q.set_grad(p.grad().view({2}));   // one tensor for both is refused by set_grad; a view is not
  expect_error([&] { optim::clip_grad_norm({p, q}, 1.0); }, kInvalid,
               {"clip_grad_norm", "parameter 1", "parameter 0", "twice"});
  expect_near(p.grad(), {3, 4});               // refused before any kernel ran
  Tensor norm = optim::clip_grad_norm({p, r, r}, 1.0);   // r has no gradient: nothing to count twice
  EXPECT_NEAR(norm.item<float>(), 5.0, 1e-6);
  expect_near(p.grad(), {3 / (5 + 1e-6), 4 / (5 + 1e-6)});
}

// ---- WarmupCosine ----

// The schedule's formula, written out independently of the implementation.
double schedule_ref(double base, double min, int64_t warmup, int64_t total, int64_t s) {
  if (s < warmup) return base * (s + 1.0) / warmup;
  if (s >= total) return min;
  return min + 0.5 * (base - min) * (1 + std::cos(std::numbers::pi * (s - warmup) / double(total - warmup)));
}

TEST(ScheduleTest, LrAtKeyPoints) {
  Tensor p = make_param({2}, 1);
  SGD opt({p}, {.lr = 1.0});
  const WarmupCosineOptions o{.base_lr = 0.1, .min_lr = 0.01, .warmup_steps = 10, .total_steps = 110};
  WarmupCosine sched(opt, o);
  EXPECT_DOUBLE_EQ(sched.lr_at(0), 0.01);   // 0.1 * 1 / 10
  EXPECT_DOUBLE_EQ(sched.lr_at(9), 0.1);    // warm-up ends at base_lr
  EXPECT_DOUBLE_EQ(sched.lr_at(10), 0.1);   // cosine starts at base_lr
  EXPECT_DOUBLE_EQ(sched.lr_at(60), 0.055); // half-way: the mean of base and min
  EXPECT_DOUBLE_EQ(sched.lr_at(110), 0.01);
  EXPECT_DOUBLE_EQ(sched.lr_at(5000), 0.01);
  for (int64_t s : {0, 1, 5, 9, 10, 11, 37, 60, 99, 108, 109, 110, 111, 1000}) {
    EXPECT_NEAR(sched.lr_at(s), schedule_ref(0.1, 0.01, 10, 110, s), 1e-15) << "step " << s;
  }
  EXPECT_GT(sched.lr_at(109), 0.01);
  EXPECT_LT(sched.lr_at(109), 0.0101);
  for (int64_t s = 1; s < 120; ++s) {
    if (s < 10) {
      EXPECT_GT(sched.lr_at(s), sched.lr_at(s - 1)) << "step " << s;
    } else if (s > 10) {
      EXPECT_LE(sched.lr_at(s), sched.lr_at(s - 1)) << "step " << s;
    }
  }
}

TEST(ScheduleTest, EdgeWarmups) {
  Tensor p = make_param({2}, 1);
  SGD opt({p}, {.lr = 1.0});
  WarmupCosine none(opt, {.base_lr = 0.5, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 4});
  EXPECT_DOUBLE_EQ(none.lr_at(0), 0.5);
  EXPECT_NEAR(none.lr_at(2), 0.25, 1e-15);
  EXPECT_DOUBLE_EQ(none.lr_at(4), 0.0);
  WarmupCosine all(opt, {.base_lr = 0.4, .min_lr = 0.1, .warmup_steps = 4, .total_steps = 4});
  EXPECT_DOUBLE_EQ(all.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(all.lr_at(3), 0.4);
  EXPECT_DOUBLE_EQ(all.lr_at(4), 0.1);
}

TEST(ScheduleTest, StepWritesIntoTheLrTensor) {
  Tensor p = make_param({3}, 1);
  Tensor g = random_tensor({3}, 2);
  p.set_grad(g);
  AdamW opt({p}, {.lr = 1.0});
  void* lr_storage = opt.lr().data_ptr();
  WarmupCosine sched(opt, {.base_lr = 0.2, .min_lr = 0.02, .warmup_steps = 3, .total_steps = 8});
  EXPECT_DOUBLE_EQ(opt.get_lr(), f32(sched.lr_at(0)));   // the constructor writes lr(0)
  AdamRef ref(values(p));
  for (int64_t s = 0; s < 10; ++s) {
    EXPECT_EQ(sched.current_step(), s);
    EXPECT_DOUBLE_EQ(opt.get_lr(), f32(schedule_ref(0.2, 0.02, 3, 8, s)));
    adamw_ref(ref, values(g), f32(sched.lr_at(s)), opt.options(), static_cast<int>(s + 1));
    opt.step();
    sched.step();
  }
  EXPECT_EQ(opt.lr().data_ptr(), lr_storage);
  expect_near(p, ref.p);
}

// An observer that refuses host transfers, as capture() does inside a step.
class RefusesHostWrites : public StepObserver {
 public:
  bool on_launch(const LaunchRecord&) override { return true; }
  void on_host_access(const char* op) override {
    throw_error(absl::StatusCode::kFailedPrecondition, absl::StrCat(op, ": refused inside the step"));
  }

 private:
  StepObserverScope observe_{this};
};

// A schedule step whose lr write is refused (inside a captured step) leaves
// the schedule where it was (review finding: the counter moved anyway, so
// the next step() skipped one rate of the schedule).
TEST(ScheduleTest, ARefusedLrWriteLeavesTheStepCounter) {
  Tensor p = make_param({2}, 1);
  SGD opt({p}, {.lr = 1.0});
  WarmupCosine sched(opt, {.base_lr = 0.4, .min_lr = 0.0, .warmup_steps = 4, .total_steps = 8});
  {
    RefusesHostWrites refuse;
    expect_error([&] { sched.step(); }, absl::StatusCode::kFailedPrecondition, {"set_lr", "refused"});
    expect_error([&] { sched.set_step(5); }, absl::StatusCode::kFailedPrecondition, {"set_lr", "refused"});
  }
  EXPECT_EQ(sched.current_step(), 0);
  sched.step();
  EXPECT_EQ(sched.current_step(), 1);
  EXPECT_DOUBLE_EQ(opt.get_lr(), f32(0.2));    // lr(1) = 0.4 * 2 / 4
}

// set_step(INT64_MAX) is a valid position (lr = min_lr), but a step() past
// it would overflow the counter: refused, naming it, and nothing changes.
TEST(ScheduleTest, AStepPastTheLastCountableStepIsRefused) {
  Tensor p = make_param({2}, 1);
  SGD opt({p}, {.lr = 1.0});
  WarmupCosine sched(opt, {.base_lr = 0.4, .min_lr = 0.1, .warmup_steps = 4, .total_steps = 8});
  const int64_t max = std::numeric_limits<int64_t>::max();
  sched.set_step(max);
  EXPECT_DOUBLE_EQ(opt.get_lr(), f32(0.1));
  expect_error([&] { sched.step(); }, absl::StatusCode::kOutOfRange,
               {"WarmupCosine", "step()", "9223372036854775807", "overflow"});
  EXPECT_EQ(sched.current_step(), max);
  EXPECT_DOUBLE_EQ(opt.get_lr(), f32(0.1));
  sched.set_step(max - 1);
  sched.step();
  EXPECT_EQ(sched.current_step(), max);
}

TEST(ScheduleTest, RejectsBadOptions) {
  Tensor p = make_param({2}, 1);
  SGD opt({p}, {.lr = 1.0});
  expect_error([&] { WarmupCosine(opt, {.base_lr = 0.1, .warmup_steps = 11, .total_steps = 10}); }, kInvalid,
               {"WarmupCosine", "warmup_steps", "11", "10"});
  expect_error([&] { WarmupCosine(opt, {.base_lr = 0.1, .warmup_steps = -1, .total_steps = 10}); }, kInvalid,
               {"WarmupCosine", "warmup_steps", "-1"});
  expect_error([&] { WarmupCosine(opt, {.base_lr = 0.1, .min_lr = 0.2, .total_steps = 10}); }, kInvalid,
               {"WarmupCosine", "min_lr", "0.2", "0.1"});
  expect_error([&] { WarmupCosine(opt, {.base_lr = 0.1, .min_lr = -0.1, .total_steps = 10}); }, kInvalid,
               {"WarmupCosine", "min_lr", "-0.1"});
  expect_error([&] { WarmupCosine(opt, {.base_lr = 0.0, .total_steps = 10}); }, kInvalid,
               {"WarmupCosine", "base_lr", "0"});
  expect_error([&] { WarmupCosine(opt, {.base_lr = 0.1, .total_steps = 0}); }, kInvalid,
               {"WarmupCosine", "total_steps", "0"});
  WarmupCosine sched(opt, {.base_lr = 0.1, .total_steps = 10});
  expect_error([&] { (void)sched.lr_at(-1); }, kInvalid, {"WarmupCosine", "lr_at", "-1"});
}

// NOTE [ One AdamW launch ]: dense parameters of one dtype update in one
// launch, with the same bits as one launch per parameter (forced here by a
// non-contiguous parameter), and a gradient whose storage changes is picked up.
class CountAdamW final : public StepObserver {
 public:
  bool on_launch(const LaunchRecord& launch) override {
    if (std::strcmp(launch.op, "adamw") == 0) ++count;
    return true;
  }
  void on_host_access(const char*) override {}
  int count = 0;
};

TEST(OptimTest, AdamWUpdatesEveryParameterInOneLaunchWithTheSameBits) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    // fused: three dense parameters; split: the same values, the first one a transposed view.
    std::vector<Tensor> fused, split;
    for (int i = 0; i < 3; ++i) {
      Tensor v = random_tensor({i == 0 ? 5 : 300, 7}, 20 + i).to(dtype);
      fused.push_back(v.clone().requires_grad_());
      split.push_back(i == 0 ? v.t().contiguous().t().detach().requires_grad_() : v.clone().requires_grad_());
    }
    ASSERT_FALSE(split[0].is_contiguous());
    AdamW a(fused, {.lr = 1e-2, .weight_decay = 0.1}), b(split, {.lr = 1e-2, .weight_decay = 0.1});
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < fused.size(); ++i) {
        Tensor g = random_tensor(fused[i].shape(), 100 * step + static_cast<int>(i)).to(dtype);
        if (step == 2 && i == 1) {
          fused[i].set_grad(g.clone());   // new gradient storage: the table must follow
          split[i].set_grad(g.clone());
        } else if (fused[i].grad().defined()) {
          NoGradGuard no_grad;
          fused[i].grad().copy_(g);
          split[i].grad().copy_(g);
        } else {
          fused[i].set_grad(g.clone());
          split[i].set_grad(g.clone());
        }
      }
      CountAdamW count;
      {
        StepObserverScope observe(&count);
        a.step();
      }
      EXPECT_EQ(count.count, 1) << "step " << step;
      b.step();
      for (size_t i = 0; i < fused.size(); ++i) {
        EXPECT_EQ(testing::values(fused[i]), testing::values(split[i])) << "step " << step << " parameter " << i;
      }
    }
  }
}

// The fused update splits the table's elements over the threads (above the
// threading threshold): parameters cut at odd places by the chunks must get
// the bits of a one-thread update.
TEST(OptimTest, AdamWOneLaunchGivesTheSameBitsAtOneAndTwoThreads) {
  std::vector<std::vector<float>> result[2];
  for (int threads : {1, 2}) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<Tensor> params;
    for (Shape s : {Shape{5, 7}, Shape{3001, 7}, Shape{4001}, Shape{9}, Shape{700, 31}}) {
      params.push_back(random_tensor(s, static_cast<uint64_t>(s[0])).requires_grad_());
    }
    AdamW opt(params, {.lr = 1e-2, .weight_decay = 0.1});
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < params.size(); ++i) {
        params[i].set_grad(random_tensor(params[i].shape(), 50 * step + static_cast<int>(i)));
      }
      opt.step();
    }
    for (const Tensor& p : params) result[threads - 1].push_back(p.detach().to_vector<float>());
    omp_set_num_threads(before);
  }
  EXPECT_EQ(result[1], result[0]);
}

// SGD's dense f32 path (one clone per x86-64 level, split over the threads
// above the threshold) against NOTE [ SGD arithmetic ] written as a plain
// float loop here, bit for bit, for every mode, with and without weight
// decay, at one and two threads (131,075 elements: several chunks, a tail).
TEST(OptimTest, SgdDenseUpdateIsThePlainLoopBitForBitAtOneAndTwoThreads) {
  struct Mode { double momentum; bool nesterov; double wd; };
  for (Mode m : {Mode{0, false, 0}, Mode{0, false, 1e-2}, Mode{0.9, false, 0}, Mode{0.9, false, 1e-2},
                 Mode{0.9, true, 0}, Mode{0.9, true, 1e-2}}) {
    SCOPED_TRACE("momentum " + std::to_string(m.momentum) + (m.nesterov ? " nesterov" : "") + " wd " +
                 std::to_string(m.wd));
    const int64_t n = 131075;
    const float lr = 0.01f, mu = static_cast<float>(m.momentum), wd = static_cast<float>(m.wd);
    std::vector<float> p = random_tensor({n}, 3).to_vector<float>(), buf(n, 0.0f);
    std::vector<std::vector<float>> grads;
    for (int step = 0; step < 3; ++step) grads.push_back(random_tensor({n}, 10 + step).to_vector<float>());
    for (int step = 0; step < 3; ++step) {
      for (int64_t i = 0; i < n; ++i) {
        float d = grads[step][i];
        if (wd != 0.0f) d = d + wd * p[i];
        if (mu != 0.0f) {
          buf[i] = mu * buf[i] + d;
          d = m.nesterov ? d + mu * buf[i] : buf[i];
        }
        p[i] = p[i] - lr * d;
      }
    }
    for (int threads : {1, 2}) {
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      Tensor param = random_tensor({n}, 3).requires_grad_();
      SGD opt({param}, {.lr = 0.01, .momentum = m.momentum, .nesterov = m.nesterov, .weight_decay = m.wd});
      for (int step = 0; step < 3; ++step) {
        param.set_grad(from_vector<float>(grads[step], {n}));
        opt.step();
      }
      omp_set_num_threads(before);
      const std::vector<float> got = param.detach().to_vector<float>();
      ASSERT_EQ(got.size(), p.size());
      EXPECT_EQ(std::memcmp(got.data(), p.data(), p.size() * sizeof(float)), 0) << threads << " threads";
    }
  }
}

// The backend functions check their arguments themselves (src/backends/optim.cpp),
// naming the op, the argument and what came, before any kernel reads them.
TEST(OptimTest, BackendLaunchersNameBadArguments) {
  const Tensor p = zeros({3, 2}), g = zeros({3, 2}), m = zeros({3, 2}), v = zeros({3, 2});
  const Tensor lr = full({}, 0.1), step = zeros({}, kInt64);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  expect_error([&] { backend::adamw_update(p, g, zeros({2, 3}), v, lr, step, 0.9, 0.999, 1e-8, 0.0); }, kInvalid,
               {"adamw", "exp_avg", "[3, 2]", "[2, 3]", "like the parameter on cpu"});
  expect_error([&] { backend::adamw_update(p, zeros({3, 2}, kBFloat16), m, v, lr, step, 0.9, 0.999, 1e-8, 0.0); },
               kInvalid, {"adamw", "grad", "bf16"});
  expect_error([&] { backend::adamw_update(p, g, m, v, zeros({2}), step, 0.9, 0.999, 1e-8, 0.0); }, kInvalid,
               {"adamw", "lr", "one element on the cpu", "[2]"});
  expect_error([&] { backend::adamw_update(p, g, m, v, lr, full({}, 1.0), 0.9, 0.999, 1e-8, 0.0); }, kInvalid,
               {"adamw", "step", "i64", "f32"});
  expect_error([&] { backend::sgd_update(p, g, zeros({4}), lr, 0.9, false, 0.0); }, kInvalid,
               {"sgd", "momentum buffer", "[4]"});
  expect_error([&] { backend::increment(zeros({})); }, kInvalid, {"increment", "counter", "i64"});
  const Tensor table = zeros({5}, kInt64);   // 40 bytes: not one 48-byte row
  expect_error([&] { backend::adamw_update_many(table, 1, 6, kFloat32, {}, {}, lr, step, 0.9, 0.999, 1e-8, 0.0); },
               kInvalid, {"adamw", "table", "[5]", "1 entries"});
}

}  // namespace
}  // namespace encore
