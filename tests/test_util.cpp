#include "tests/test_util.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>

namespace encore::testing {

Tensor random_tensor(Shape shape, uint64_t seed, DType dtype) {
  Generator g(seed);
  return randn(std::move(shape), kFloat32, kCPU, &g).to(dtype);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

double half_ulp(DType dtype) { return std::ldexp(1.0, dtype == kFloat16 ? -11 : dtype == kBFloat16 ? -8 : -24); }
double half_subnormal(DType dtype) { return dtype == kFloat16 ? std::ldexp(1.0, -25) : 0.0; }

void expect_f32_rounded_once(DType dtype, std::initializer_list<HalfAndF32> pairs) {
  for (const HalfAndF32& p : pairs) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.half.dtype(), dtype);
    expect_near(p.half, values(p.f32), half_subnormal(dtype), half_ulp(dtype));
  }
}

Tensor non_contiguous(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor out;
  if (t.dim() >= 2) {
    out = t.transpose(0, 1).contiguous().transpose(0, 1);
  } else {
    Shape big = t.shape();
    if (big.empty()) big = {1};
    big.back() *= 2;
    Tensor base = zeros(big, t.dtype());
    out = base.slice(-1, 0, big.back(), 2);
    if (t.dim() == 0) out = out.reshape({});
    out.copy_(t);
  }
  return out;
}

void expect_near(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol) {
  std::vector<double> a = values(actual);
  ASSERT_EQ(a.size(), expected.size()) << "shape " << shape_str(actual.shape());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << "element " << i;
      continue;
    }
    if (a[i] == expected[i]) continue;   // also equal infinities, where EXPECT_NEAR sees inf - inf = NaN
    EXPECT_NEAR(a[i], expected[i], atol + rtol * std::abs(expected[i])) << "element " << i << " of shape "
                                                                        << shape_str(actual.shape());
  }
}

void expect_near(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  ASSERT_EQ(actual.shape(), expected.shape());
  expect_near(actual, values(expected), atol, rtol);
}

std::vector<int64_t> unravel(int64_t i, absl::Span<const int64_t> shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] == 0 ? 0 : i % shape[d];
    i = shape[d] == 0 ? 0 : i / shape[d];
  }
  return idx;
}

int64_t broadcast_index(absl::Span<const int64_t> index, absl::Span<const int64_t> shape) {
  int64_t flat = 0;
  const size_t lead = index.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : index[d + lead]);
  return flat;
}

namespace {
// sum(fn(inputs) * w) in double, without autograd.
double weighted_output(const Fn& fn, const std::vector<Tensor>& inputs, const std::vector<double>& w) {
  NoGradGuard no_grad;
  std::vector<double> out = values(fn(inputs));
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * w[i];
  return s;
}
}  // namespace

void expect_gradients_match(const Fn& fn, std::vector<Tensor> inputs, double eps, double atol, double rtol) {
  for (Tensor& t : inputs) {
    ASSERT_EQ(t.dtype(), kFloat32) << "gradient checks run in f32";
    t = t.detach().clone().requires_grad_();
  }
  Tensor out = fn(inputs);
  Tensor w = random_tensor(out.shape(), 12345);
  std::vector<double> wv = values(w);
  out.backward(w);
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor analytic = inputs[k].grad();
    ASSERT_TRUE(analytic.defined()) << "input " << k << " got no gradient";
    std::vector<double> ga = values(analytic);
    Tensor x = inputs[k];
    const std::vector<double> xv = values(x);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = xv[i];
      std::vector<Tensor> plus = inputs, minus = inputs;
      Tensor xp = x.detach().clone(), xm = x.detach().clone();
      Tensor fp = xp.reshape({-1}).slice(0, i, i + 1), fm = xm.reshape({-1}).slice(0, i, i + 1);
      fp.fill_(orig + eps);
      fm.fill_(orig - eps);
      plus[k] = xp;
      minus[k] = xm;
      const double numeric = (weighted_output(fn, plus, wv) - weighted_output(fn, minus, wv)) / (2 * eps);
      EXPECT_NEAR(ga[i], numeric, atol + rtol * std::abs(numeric))
          << "input " << k << " element " << i << " of shape " << shape_str(x.shape());
    }
  }
}

void expect_error(const std::function<void()>& fn, absl::StatusCode code, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an encore::Error";
  } catch (const Error& e) {
    expect_status(e.status(), code, parts);
  }
}

void expect_status(const absl::Status& s, absl::StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& p : parts) {
    EXPECT_NE(std::string(s.message()).find(p), std::string::npos)
        << "message \"" << s.message() << "\" does not mention \"" << p << "\"";
  }
}

FileSizeLimit::FileSizeLimit(uint64_t bytes) {
  rlimit limit{};
  EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &limit), 0);
  old_cur_ = limit.rlim_cur;
  old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
  limit.rlim_cur = bytes;
  EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
}

FileSizeLimit::~FileSizeLimit() {
  rlimit limit{};
  EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &limit), 0);
  limit.rlim_cur = old_cur_;
  EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  std::signal(SIGXFSZ, old_handler_);
}

int dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

}  // namespace encore::testing
