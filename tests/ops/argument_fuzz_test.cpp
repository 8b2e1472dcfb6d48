// Bad input gets a clear error, never a crash: the ops, factories and
// conversions (the TEST_Ps below list them) are each called 1000 times with
// seeded random arguments, most of them wrong (shapes
// that do not broadcast, dims out of range, integer or bool tensors where
// floats belong, empty and 0-d tensors, non-contiguous views, NaN and huge
// scalars, class ids and indices out of range). Each call must either succeed
// or throw encore::Error with a caller's code (never kInternal or kUnknown)
// and a message that starts with the op's name ("matmul: ..."); a float
// result that requires grad must also survive backward(). A crash, another
// exception or a sanitizer report fails the test. It runs on the CPU and,
// where a GPU answers, on CUDA, where it must also accept and refuse exactly
// what the CPU does (and an illegal address on an odd layout would show).
// Under ./run sanitize it is the memory-safety check of every op's argument
// checking.
//
// A failure names the op and the call (the suite is part of ops_test):
//   build/tests/ops/ops_test --gtest_filter='*ArgumentFuzz*Matmul*'
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "encore/encore.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {

// Test names and failure messages print the device ("cpu", "cuda:0").
void PrintTo(const Device& d, std::ostream* os) { *os << d.str(); }

namespace {

constexpr int kCalls = 1000;   // per op

class Args {
 public:
  Args(uint64_t seed, Device device) : g_(seed), device_(device) {}
  Device device() const { return device_; }

  int pick(int n) { return static_cast<int>(g_() % static_cast<uint64_t>(n)); }
  bool coin() { return pick(2) == 0; }

  int64_t dim_size() { const int64_t d[] = {0, 1, 2, 3, 5}; return d[pick(5)]; }
  Shape shape(int max_rank = 4) {
    Shape s(pick(max_rank + 1));
    for (int64_t& d : s) d = pick(6) == 0 ? 0 : 1 + pick(4);
    return s;
  }
  // A dim for a tensor of rank r: usually valid (possibly negative), sometimes not.
  int64_t dim(int64_t r) {
    if (pick(6) == 0) return (coin() ? 1 : -1) * (r + 1 + pick(3));
    if (r == 0) return coin() ? 0 : -1;
    return pick(static_cast<int>(2 * r)) - r;
  }
  std::vector<int64_t> dims(int64_t r) {
    std::vector<int64_t> d(pick(3));
    for (int64_t& x : d) x = dim(r);
    return d;
  }
  double scalar() {
    const double s[] = {0.0, 1.0, -2.5, 0.5, 3.0, 1e40, -1e40,
                        std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 7.0};
    return s[pick(10)];
  }
  DType dtype() {
    const DType f[] = {kFloat32, kFloat32, kFloat32, kBFloat16, kFloat16, kInt32, kInt64, kBool};
    return f[pick(8)];
  }
  DType float_dtype() { const DType f[] = {kFloat32, kFloat32, kBFloat16, kFloat16}; return f[pick(4)]; }

  // A tensor of `shape` and `dt`: random values (small integers for integer
  // types), sometimes a non-contiguous view, sometimes a float leaf that
  // requires grad.
  Tensor tensor(const Shape& s, DType dt) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(static_cast<int>(g_() % 9) - 3) * (is_floating(dt) ? 0.37f : 1.0f);
    Tensor t = from_vector<float>(v, s).to(dt).to(device_);
    if (s.size() >= 2 && pick(4) == 0) t = t.transpose(0, 1).contiguous().transpose(0, 1);          // transposed strides, same shape
    if (is_floating(dt) && pick(3) == 0) t.requires_grad_();
    if (s.size() >= 1 && s.back() > 1 && pick(5) == 0) t = t.slice(-1, 0, s.back(), 2);   // strided
    return t;
  }
  Tensor tensor() {
    const Shape s = shape();   // then the dtype: one seed, one sequence of calls
    return tensor(s, dtype());
  }
  // Class ids / indices: mostly in [0, n), sometimes out of range.
  Tensor indices(const Shape& s, int64_t n) {
    int64_t count = 1;
    for (int64_t d : s) count *= d;
    std::vector<int64_t> v(count);
    for (int64_t& x : v) x = pick(12) == 0 ? (coin() ? -1 - pick(3) : n + pick(3)) : (n > 0 ? pick(static_cast<int>(n)) : 0);
    return from_vector<int64_t>(v, s).to(pick(3) == 0 ? kInt32 : (pick(8) == 0 ? kFloat32 : kInt64)).to(device_);
  }

 private:
  std::mt19937_64 g_;
  Device device_;
};

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + (t.is_contiguous() ? "" : " strided");
}

// Whether message starts with "name:" for one of names (after "cuda::",
// which the CUDA backend's own checks put first), or is a CUDA kernel's
// deferred report naming it ("cuda:0: a kernel queued since the last
// synchronization met bad data: embedding met ...", src/core/kernel_errors.cpp).
bool names_the_op(absl::string_view message, const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (absl::StrContains(message, "met bad data: " + n + " met")) return true;
  }
  if (absl::StartsWith(message, "cuda::")) message.remove_prefix(6);
  for (const std::string& n : names) {
    if (absl::StartsWith(message, n + ":")) return true;
  }
  return false;
}

// FNV-1a: a seed from the op's name that every compiler and library agree on.
uint64_t seed_of(absl::string_view name) {
  uint64_t h = 14695981039346656037ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// Calls `call` kCalls times with fresh arguments on `device`; each must
// succeed (then backward through a float result that requires grad) or throw
// a caller's encore::Error whose message starts with `op:` (or with one of
// `also`, the other entry points the call may use). On CUDA a kernel reports
// bad data (an index out of range) at the next synchronization, which follows
// each call. Stops an op after 10 failures, and at a kInternal error on CUDA
// (a sticky CUDA error would fail every later call the same way). Returns
// each call's outcome.
using Call = std::function<Tensor(Args&, std::string&)>;
struct Outcome {
  bool accepted;
  std::string call;   // the arguments, described
};
std::vector<Outcome> fuzz_on(Device device, const char* op, const Call& call, const std::vector<std::string>& also) {
  Args args(seed_of(op), device);
  std::vector<Outcome> outcomes;
  std::vector<std::string> names = also;
  names.push_back(op);
  int ok = 0, refused = 0;
  const int failures_before = ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
  auto too_many_failures = [&] {
    return ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count() - failures_before >= 10;
  };
  for (int i = 0; i < kCalls; ++i) {
    if (too_many_failures()) return outcomes;
    std::string what;
    Tensor out;
    try {
      out = call(args, what);
      if (device.is_cuda()) synchronize(device);
    } catch (const Error& e) {
      ++refused;
      outcomes.push_back({false, what});
      const absl::StatusCode code = e.status().code();
      EXPECT_NE(code, absl::StatusCode::kUnknown) << op << "(" << what << "): " << e.what();
      if (code == absl::StatusCode::kInternal) {
        ADD_FAILURE() << op << "(" << what << "): an internal error: " << e.what();
        if (device.is_cuda()) return outcomes;
        continue;
      }
      EXPECT_TRUE(names_the_op(e.status().message(), names))
          << "the error does not start with " << op << ": " << op << "(" << what << "): " << e.what();
      continue;
    } catch (const std::exception& e) {
      ADD_FAILURE() << op << "(" << what << ") threw a non-encore exception: " << e.what();
      outcomes.push_back({false, what});
      continue;
    }
    ++ok;
    outcomes.push_back({true, what});
    if (out.defined() && out.requires_grad() && is_floating(out.dtype())) {
      const absl::Status s = status_of([&] {
        out.to(kFloat32).sum().backward();
        if (device.is_cuda()) synchronize(device);
      });
      EXPECT_TRUE(s.ok()) << op << "(" << what << ") backward: " << s;
    }
  }
  // Both outcomes must occur, or the fuzzing missed half of what it is for.
  EXPECT_GT(ok, kCalls / 20) << op << ": too few valid calls";
  EXPECT_GT(refused, kCalls / 20) << op << ": too few invalid calls";
  return outcomes;
}

// The suite runs on the CPU and, where a GPU answers, on CUDA. There the
// same calls (the arguments do not depend on the device) run on the CPU
// first, and CUDA must accept and refuse exactly the calls the CPU does: the
// ops' checks are shared, so a difference is a CUDA backend refusing valid
// input (or missing a bad index).
class ArgumentFuzzTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda()) ENCORE_SKIP_WITHOUT_GPU();
  }
  void fuzz(const char* op, const Call& call, const std::vector<std::string>& also = {}) {
    if (GetParam().is_cpu()) {
      fuzz_on(kCPU, op, call, also);
      return;
    }
    const std::vector<Outcome> on_cpu = fuzz_on(kCPU, op, call, also);
    const std::vector<Outcome> on_gpu = fuzz_on(GetParam(), op, call, also);
    int reported = 0;
    for (size_t i = 0; i < std::min(on_cpu.size(), on_gpu.size()) && reported < 10; ++i) {
      if (on_cpu[i].accepted != on_gpu[i].accepted) {
        ADD_FAILURE() << op << "(" << on_gpu[i].call << "): the CPU " << (on_cpu[i].accepted ? "accepted" : "refused")
                      << " it, CUDA " << (on_gpu[i].accepted ? "accepted" : "refused") << " it";
        ++reported;
      }
    }
  }
};

// Two tensors whose shapes often broadcast: b's shape is a's, trimmed from the
// left and with some dims set to 1, or a random shape.
std::pair<Tensor, Tensor> pair_of(Args& g, bool same_dtype_often = true) {
  const Shape sa = g.shape();
  Shape sb = sa;
  if (g.pick(3) == 0) {
    sb = g.shape();
  } else {
    sb.erase(sb.begin(), sb.begin() + g.pick(static_cast<int>(sb.size()) + 1));
    for (int64_t& d : sb) if (g.pick(3) == 0) d = 1;
  }
  const DType da = g.dtype();
  const DType db = same_dtype_often && g.pick(4) != 0 ? da : g.dtype();
  return {g.tensor(sa, da), g.tensor(sb, db)};
}

TEST_P(ArgumentFuzzTest, BinaryOps) {
  using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, BinaryFn> ops[] = {{"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}};
  for (const auto& entry : ops) {
    const auto& name = entry.first;  // NOTE [ No structured bindings in lambdas ]
    const auto& fn = entry.second;
    fuzz(name, [fn](Args& g, std::string& what) {
      auto [a, b] = pair_of(g);
      what = describe(a) + ", " + describe(b);
      return fn(a, b);
    });
  }
}

TEST_P(ArgumentFuzzTest, ScalarOps) {
  using ScalarFn = Tensor (*)(const Tensor&, double);
  const std::pair<const char*, ScalarFn> ops[] = {
      {"add_scalar", add}, {"mul_scalar", mul}, {"rsub_scalar", rsub}, {"rdiv_scalar", rdiv}, {"div_scalar", div}};
  for (const auto& entry : ops) {
    const auto& name = entry.first;  // NOTE [ No structured bindings in lambdas ]
    const auto& fn = entry.second;
    fuzz(name, [fn](Args& g, std::string& what) {
      Tensor a = g.tensor();
      const double s = g.scalar();
      what = describe(a) + ", " + std::to_string(s);
      return fn(a, s);
    });
  }
}

TEST_P(ArgumentFuzzTest, UnaryOps) {
  using UnaryFn = Tensor (*)(const Tensor&);
  const std::pair<const char*, UnaryFn> ops[] = {
      {"neg", neg}, {"exp", exp}, {"log", log}, {"sqrt", sqrt}, {"rsqrt", rsqrt}, {"abs", abs}, {"tanh", tanh},
      {"sigmoid", sigmoid}, {"relu", relu}, {"silu", silu}};
  for (const auto& entry : ops) {
    const auto& name = entry.first;  // NOTE [ No structured bindings in lambdas ]
    const auto& fn = entry.second;
    fuzz(name, [fn](Args& g, std::string& what) {
      Tensor a = g.tensor();
      what = describe(a);
      return fn(a);
    });
  }
  fuzz("gelu", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    what = describe(a);
    return gelu(a, g.coin() ? GeluApprox::kTanh : GeluApprox::kNone);
  }, {"gelu_tanh"});
  fuzz("pow", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const double e = g.scalar();
    what = describe(a) + ", " + std::to_string(e);
    return pow(a, e);
  });
  fuzz("clamp", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const double lo = g.scalar(), hi = g.scalar();
    what = describe(a) + ", " + std::to_string(lo) + ", " + std::to_string(hi);
    return clamp(a, lo, hi);
  });
}

TEST_P(ArgumentFuzzTest, Selection) {
  fuzz("where", [](Args& g, std::string& what) {
    auto [a, b] = pair_of(g);
    const Shape sc = g.coin() ? a.shape() : g.shape();
    Tensor cond = g.tensor(sc, g.pick(4) == 0 ? g.dtype() : kBool);
    what = describe(cond) + ", " + describe(a) + ", " + describe(b);
    return where(cond, a, b);
  });
  fuzz("masked_fill", [](Args& g, std::string& what) {
    auto [a, mask] = pair_of(g);
    if (g.pick(4) != 0) mask = mask.detach().to(kBool);
    const double v = g.scalar();
    what = describe(a) + ", " + describe(mask) + ", " + std::to_string(v);
    return masked_fill(a, mask, v);
  });
}

TEST_P(ArgumentFuzzTest, Reductions) {
  using DimsFn = Tensor (*)(const Tensor&, std::vector<int64_t>, bool);
  const std::pair<const char*, DimsFn> ops[] = {{"sum", sum}, {"mean", mean}};
  for (const auto& entry : ops) {
    const auto& name = entry.first;  // NOTE [ No structured bindings in lambdas ]
    const auto& fn = entry.second;
    fuzz(name, [fn](Args& g, std::string& what) {
      Tensor a = g.tensor();
      std::vector<int64_t> dims = g.dims(a.dim());
      what = describe(a) + ", " + std::to_string(dims.size()) + " dims";
      return fn(a, dims, g.coin());
    });
  }
  fuzz("var", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    std::vector<int64_t> dims = g.dims(a.dim());
    const int64_t correction = g.pick(4) - 1;
    what = describe(a) + ", " + std::to_string(dims.size()) + " dims, correction " + std::to_string(correction);
    return var(a, dims, correction, g.coin());
  });
  fuzz("max", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    what = describe(a);
    if (g.coin()) return max(a);
    const int64_t d = g.dim(a.dim());
    what += ", dim " + std::to_string(d);
    return max(a, d, g.coin()).first;
  });
  fuzz("argmax", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const int64_t d = g.dim(a.dim());
    what = describe(a) + ", dim " + std::to_string(d);
    return argmax(a, d, g.coin());
  });
  fuzz("sum_to", [](Args& g, std::string& what) {
    auto [a, b] = pair_of(g);
    what = describe(a) + " to " + describe(b);
    return sum_to(a, b.shape());
  });
}

TEST_P(ArgumentFuzzTest, Matmul) {
  fuzz("matmul", [](Args& g, std::string& what) {
    Shape sa = g.shape(3), sb = g.shape(3);
    if (!sa.empty() && !sb.empty() && g.pick(3) != 0) sb[sb.size() >= 2 ? sb.size() - 2 : 0] = sa.back();
    const DType dt = g.float_dtype();
    Tensor a = g.tensor(sa, g.pick(6) == 0 ? g.dtype() : dt), b = g.tensor(sb, g.pick(6) == 0 ? g.dtype() : dt);
    what = describe(a) + ", " + describe(b);
    return matmul(a, b);
  });
  fuzz("linear", [](Args& g, std::string& what) {
    const int64_t in = g.dim_size(), out = g.dim_size();
    const DType dt = g.float_dtype();
    Shape sx = g.shape(3);
    if (g.pick(4) != 0) sx.push_back(in);
    Tensor x = g.tensor(sx, dt);
    const Shape sw = g.pick(4) != 0 ? Shape{out, in} : g.shape(2);
    Tensor w = g.tensor(sw, g.pick(6) == 0 ? g.dtype() : dt);
    Tensor b = g.coin() ? Tensor() : g.tensor(g.pick(4) != 0 ? Shape{out} : g.shape(2), dt);
    what = describe(x) + ", " + describe(w) + ", " + describe(b);
    return linear(x, w, b);
  });
}

TEST_P(ArgumentFuzzTest, NeuralNetworkOps) {
  for (const bool log : {false, true}) {
    fuzz(log ? "log_softmax" : "softmax", [log](Args& g, std::string& what) {
      Tensor a = g.tensor();
      const int64_t d = g.dim(a.dim());
      what = describe(a) + ", dim " + std::to_string(d);
      return log ? log_softmax(a, d) : softmax(a, d);
    });
  }
  fuzz("cross_entropy", [](Args& g, std::string& what) {
    const int64_t n = g.dim_size(), c = g.dim_size();
    const Shape sl = g.pick(5) != 0 ? Shape{n, c} : g.shape(3);
    Tensor logits = g.tensor(sl, g.pick(6) == 0 ? g.dtype() : g.float_dtype());
    Tensor target = g.indices(g.pick(5) != 0 ? Shape{n} : g.shape(2), c);
    const int64_t ignore = g.coin() ? -100 : g.pick(3);
    what = describe(logits) + ", " + describe(target) + ", ignore " + std::to_string(ignore);
    return cross_entropy(logits, target, ignore);
  });
  fuzz("layer_norm", [](Args& g, std::string& what) {
    const Shape sx = g.shape();
    Tensor x = g.tensor(sx, g.pick(6) == 0 ? g.dtype() : g.float_dtype());
    Shape norm;
    if (x.dim() > 0 && g.pick(4) != 0) norm.assign(x.shape().end() - 1 - g.pick(static_cast<int>(std::min<int64_t>(x.dim(), 2))), x.shape().end());
    else norm = g.shape(2);
    Tensor w = g.coin() ? Tensor() : g.tensor(g.pick(4) != 0 ? norm : g.shape(2), x.dtype());
    Tensor b = g.coin() ? Tensor() : g.tensor(g.pick(4) != 0 ? norm : g.shape(2), x.dtype());
    const double eps = g.pick(5) == 0 ? g.scalar() : 1e-5;
    what = describe(x) + ", norm rank " + std::to_string(norm.size()) + ", " + describe(w) + ", " + describe(b) +
           ", eps " + std::to_string(eps);
    return layer_norm(x, norm, w, b, eps);
  });
  fuzz("embedding", [](Args& g, std::string& what) {
    const int64_t v = g.dim_size(), d = g.dim_size();
    const Shape sw = g.pick(5) != 0 ? Shape{v, d} : g.shape(3);
    Tensor w = g.tensor(sw, g.pick(6) == 0 ? g.dtype() : g.float_dtype());
    Tensor idx = g.indices(g.shape(3), v);
    what = describe(w) + ", " + describe(idx);
    return embedding(w, idx);
  });
  fuzz("dropout", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const double p = g.pick(3) == 0 ? g.scalar() : 0.25 * g.pick(4);
    what = describe(a) + ", p " + std::to_string(p);
    return dropout(a, p, g.pick(4) != 0);
  });
}

TEST_P(ArgumentFuzzTest, Comparisons) {
  using CompareFn = Tensor (*)(const Tensor&, const Tensor&);
  using CompareScalarFn = Tensor (*)(const Tensor&, double);
  const std::pair<const char*, CompareFn> ops[] = {{"eq", eq}, {"ne", ne}, {"lt", lt}, {"le", le}, {"gt", gt}, {"ge", ge}};
  for (const auto& entry : ops) {
    const auto& name = entry.first;  // NOTE [ No structured bindings in lambdas ]
    const auto& fn = entry.second;
    fuzz(name, [fn](Args& g, std::string& what) {
      auto [a, b] = pair_of(g);
      what = describe(a) + ", " + describe(b);
      return fn(a, b);
    });
  }
  const std::pair<const char*, CompareScalarFn> scalar_ops[] = {{"eq", eq}, {"lt", lt}, {"ge", ge}};
  for (const auto& entry : scalar_ops) {
    const auto& name = entry.first;
    const auto& fn = entry.second;
    fuzz(name, [fn](Args& g, std::string& what) {
      Tensor a = g.tensor();
      const double s = g.scalar();
      what = describe(a) + ", " + std::to_string(s);
      return fn(a, s);
    });
  }
}

Reduction reduction_of(Args& g) {
  const Reduction r[] = {Reduction::kMean, Reduction::kSum, Reduction::kNone};
  return r[g.pick(3)];
}

TEST_P(ArgumentFuzzTest, Losses) {
  fuzz("mse_loss", [](Args& g, std::string& what) {
    auto [a, b] = pair_of(g);
    what = describe(a) + ", " + describe(b);
    return mse_loss(a, b, reduction_of(g));
  }, {"sub", "mul"});
  fuzz("binary_cross_entropy_with_logits", [](Args& g, std::string& what) {
    auto [x, t] = pair_of(g);
    if (g.pick(3) != 0) t = g.tensor(x.shape(), x.dtype());
    Tensor w = g.coin() ? Tensor() : g.tensor(g.coin() ? x.shape() : g.shape(), g.pick(6) == 0 ? g.dtype() : x.dtype());
    Tensor pw;
    if (g.coin()) {
      Shape s = x.dim() > 0 && g.coin() ? Shape{x.size(-1)} : g.shape();
      pw = g.tensor(s, g.pick(6) == 0 ? g.dtype() : x.dtype());
    }
    what = describe(x) + ", " + describe(t) + ", " + describe(w) + ", " + describe(pw);
    return binary_cross_entropy_with_logits(x, t, w, pw, reduction_of(g));
  }, {"mul"});
  fuzz("nll_loss", [](Args& g, std::string& what) {
    const int64_t n = g.dim_size(), c = g.dim_size();
    Shape sx = g.pick(5) != 0 ? Shape{n, c} : g.shape(3);
    if (g.pick(4) == 0) sx.push_back(g.dim_size());   // spatial
    Tensor x = g.tensor(sx, g.pick(6) == 0 ? g.dtype() : g.float_dtype());
    Shape st = sx.size() >= 2 ? sx : Shape{};
    if (sx.size() >= 2) st.erase(st.begin() + 1);
    if (g.pick(5) == 0) st = g.shape(2);
    const int64_t classes = sx.size() >= 2 ? sx[1] : (sx.empty() ? 0 : sx[0]);
    Tensor t = g.indices(st, classes);
    Tensor w = g.pick(3) == 0 ? g.tensor(g.pick(4) != 0 ? Shape{classes} : g.shape(2), x.dtype()).detach() : Tensor();
    const int64_t ignore = g.coin() ? -100 : g.pick(3);
    what = describe(x) + ", " + describe(t) + ", " + describe(w) + ", ignore " + std::to_string(ignore);
    return nll_loss(x, t, w, ignore, reduction_of(g));
  }, {"div"});
}

TEST_P(ArgumentFuzzTest, Indexing) {
  // An index for `x` along d: x's rank (sometimes not), sizes at most x's (sometimes larger).
  auto index_for = [](Args& g, const Tensor& x, int64_t d) {
    Shape s = x.shape();
    for (int64_t& v : s) v = v > 0 && g.coin() ? 1 + g.pick(static_cast<int>(v)) : v;
    if (!s.empty() && d >= -x.dim() && d < x.dim()) s[d < 0 ? d + x.dim() : d] = g.dim_size();
    if (g.pick(6) == 0) s = g.shape();
    const int64_t size = x.dim() == 0 ? 1 : (d >= -x.dim() && d < x.dim() ? x.size(d) : 1);
    return g.indices(s, size);
  };
  fuzz("gather", [&](Args& g, std::string& what) {
    Tensor x = g.tensor();
    const int64_t d = g.dim(x.dim());
    Tensor idx = index_for(g, x, d);
    what = describe(x) + ", dim " + std::to_string(d) + ", " + describe(idx);
    return gather(x, d, idx);
  });
  fuzz("index_select", [](Args& g, std::string& what) {
    Tensor x = g.tensor();
    const int64_t d = g.dim(x.dim());
    const int64_t size = x.dim() == 0 ? 1 : (d >= -x.dim() && d < x.dim() ? x.size(d) : 1);
    Tensor idx = g.indices(g.pick(5) != 0 ? Shape{g.dim_size()} : g.shape(2), size);
    what = describe(x) + ", dim " + std::to_string(d) + ", " + describe(idx);
    return index_select(x, d, idx);
  }, {"gather"});
  fuzz("scatter_add", [&](Args& g, std::string& what) {
    Tensor x = g.tensor();
    const int64_t d = g.dim(x.dim());
    Tensor idx = index_for(g, x, d);
    Shape ss = idx.shape();
    for (int64_t& v : ss) v += g.pick(4) == 0 ? 1 : 0;
    if (g.pick(6) == 0) ss = g.shape();
    Tensor src = g.tensor(ss, g.pick(6) == 0 ? g.dtype() : x.dtype());
    what = describe(x) + ", dim " + std::to_string(d) + ", " + describe(idx) + ", " + describe(src);
    return scatter_add(x, d, idx, src);
  });
  fuzz("topk", [](Args& g, std::string& what) {
    Tensor x = g.tensor();
    const int64_t d = g.dim(x.dim()), k = g.pick(5) - 1;
    what = describe(x) + ", k " + std::to_string(k) + ", dim " + std::to_string(d);
    return topk(x, k, d, g.coin()).first;
  });
  fuzz("multinomial", [](Args& g, std::string& what) {
    Tensor p = g.tensor(g.pick(4) != 0 ? Shape{g.dim_size(), g.dim_size()} : g.shape(), g.pick(6) == 0 ? g.dtype() : g.float_dtype());
    if (is_floating(p.dtype()) && g.pick(3) != 0) p = abs(p.detach());
    const int64_t n = g.pick(5) - 1;
    const bool replacement = g.coin();
    what = describe(p) + ", " + std::to_string(n) + (replacement ? " with" : " without") + " replacement";
    return multinomial(p, n, replacement).to(kFloat32);
  });
}

TEST_P(ArgumentFuzzTest, JoinAndSplit) {
  auto list = [](Args& g, std::string& what) {
    Tensor first = g.tensor();
    std::vector<Tensor> ts{first};
    what = describe(first);
    for (int i = g.pick(3); i > 0; --i) {
      Shape s = first.shape();
      if (!s.empty() && g.coin()) s[g.pick(static_cast<int>(s.size()))] = g.dim_size();
      if (g.pick(5) == 0) s = g.shape();
      ts.push_back(g.tensor(s, g.pick(5) == 0 ? g.dtype() : first.dtype()));
      what += ", " + describe(ts.back());
    }
    if (g.pick(20) == 0) ts.clear();
    return ts;
  };
  fuzz("concat", [&](Args& g, std::string& what) {
    std::vector<Tensor> ts = list(g, what);
    const int64_t d = g.dim(ts.empty() ? 1 : ts[0].dim());
    what += "; dim " + std::to_string(d);
    return concat(ts, d);
  });
  fuzz("stack", [&](Args& g, std::string& what) {
    std::vector<Tensor> ts = list(g, what);
    const int64_t d = g.dim(ts.empty() ? 1 : ts[0].dim() + 1);
    what += "; dim " + std::to_string(d);
    return stack(ts, d);
  });
  fuzz("split", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const int64_t size = g.pick(4) - 1, d = g.dim(a.dim());
    what = describe(a) + ", size " + std::to_string(size) + ", dim " + std::to_string(d);
    std::vector<Tensor> parts = split(a, size, d);
    return parts.empty() ? Tensor() : parts[g.pick(static_cast<int>(parts.size()))];
  });
}

TEST_P(ArgumentFuzzTest, Views) {
  for (const bool view : {true, false}) {
    fuzz(view ? "view" : "reshape", [view](Args& g, std::string& what) {
      Tensor a = g.tensor();
      Shape s = g.coin() ? g.shape() : Shape{-1};
      if (g.pick(4) == 0 && !s.empty()) s[0] = -1;
      what = describe(a) + " to rank " + std::to_string(s.size());
      return view ? a.view(s) : a.reshape(s);
    });
  }
  fuzz("transpose", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const int64_t d0 = g.dim(a.dim()), d1 = g.dim(a.dim());
    what = describe(a) + ", " + std::to_string(d0) + ", " + std::to_string(d1);
    return a.transpose(d0, d1);
  });
  fuzz("permute", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    Shape perm(g.pick(4) == 0 ? g.pick(5) : a.dim());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = g.pick(5) == 0 ? g.dim(a.dim()) : static_cast<int64_t>(i);
    if (perm.size() >= 2 && g.coin()) std::swap(perm[0], perm[perm.size() - 1]);
    what = describe(a) + ", rank " + std::to_string(perm.size());
    return a.permute(perm);
  });
  fuzz("slice", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const int64_t d = g.dim(a.dim()), start = g.pick(7) - 2, end = g.pick(9) - 2, step = g.pick(4) - 1;
    what = describe(a) + ", dim " + std::to_string(d) + ", " + std::to_string(start) + ":" + std::to_string(end) +
           ":" + std::to_string(step);
    return a.slice(d, start, end, step);
  });
  fuzz("select", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const int64_t d = g.dim(a.dim()), index = g.pick(7) - 3;
    what = describe(a) + ", dim " + std::to_string(d) + ", index " + std::to_string(index);
    return a.select(d, index);
  });
  fuzz("expand", [](Args& g, std::string& what) {
    auto [b, a] = pair_of(g);
    Shape s = b.shape();
    if (!s.empty() && g.pick(5) == 0) s[0] = -1;
    what = describe(a) + " to rank " + std::to_string(s.size());
    return a.expand(s);
  });
  for (const bool un : {false, true}) {
    fuzz(un ? "unsqueeze" : "squeeze", [un](Args& g, std::string& what) {
      Tensor a = g.tensor();
      const int64_t d = g.dim(a.dim() + (un ? 1 : 0));
      what = describe(a) + ", dim " + std::to_string(d);
      return un ? a.unsqueeze(d) : a.squeeze(d);
    });
  }
}

TEST_P(ArgumentFuzzTest, CopiesAndInPlace) {
  fuzz("copy_", [](Args& g, std::string& what) {
    auto [dst, src] = pair_of(g, /*same_dtype_often=*/false);
    dst = dst.detach();
    what = describe(dst) + " <- " + describe(src);
    dst.copy_(src);
    return dst;
  });
  fuzz("fill_", [](Args& g, std::string& what) {
    Tensor a = g.tensor().detach();
    const double v = g.scalar();
    what = describe(a) + ", " + std::to_string(v);
    return a.fill_(v);
  });
  fuzz("add_", [](Args& g, std::string& what) {
    auto [a, b] = pair_of(g);
    a = a.detach();
    const double alpha = g.scalar();
    what = describe(a) + ", " + describe(b) + ", alpha " + std::to_string(alpha);
    return a.add_(b, alpha);
  });
  fuzz("mul_", [](Args& g, std::string& what) {
    Tensor a = g.tensor().detach();
    const double v = g.scalar();
    what = describe(a) + ", " + std::to_string(v);
    return a.mul_(v);
  });
}

// Copies and conversions, reading a value, and gradient clipping.
TEST_P(ArgumentFuzzTest, ConversionsAndClipping) {
  fuzz("clone", [](Args& g, std::string& what) {
    Tensor a = g.pick(20) == 0 ? Tensor() : g.tensor();
    what = describe(a);
    return a.clone();
  });
  fuzz("to", [](Args& g, std::string& what) {
    Tensor a = g.pick(20) == 0 ? Tensor() : g.tensor();
    const DType dt = g.dtype();
    what = describe(a) + " to " + std::string(dtype_name(dt));
    return g.coin() ? a.to(dt) : a.to(g.coin() ? kCPU : g.device());
  });
  fuzz("item", [](Args& g, std::string& what) {
    const Shape s = g.coin() ? Shape{} : g.shape();
    Tensor a = g.tensor(s, g.dtype());
    what = describe(a);
    return scalar_tensor(a.item<float>(), kFloat32, g.device());
  });
  fuzz("clip_grad_norm", [](Args& g, std::string& what) {
    std::vector<Tensor> params;
    for (int i = g.pick(4); i > 0; --i) {
      const Shape s = g.shape(3);
      Tensor p = g.tensor(s, g.float_dtype()).detach().requires_grad_();
      if (g.pick(4) != 0) (p.to(kFloat32) * 2.0).sum().backward();   // a gradient of p's dtype
      if (g.pick(30) == 0) p = Tensor();
      params.push_back(p);
      what += describe(p) + (p.defined() && p.grad().defined() ? " with grad, " : ", ");
    }
    const double max_norm = g.pick(4) == 0 ? g.scalar() : 1.0;
    what += "max_norm " + std::to_string(max_norm);
    return optim::clip_grad_norm(params, max_norm);
  });
}

// Factories: negative sizes, too many dims, values an integer dtype cannot
// hold, integer dtypes for random draws, arange steps.
TEST_P(ArgumentFuzzTest, Factories) {
  auto shape = [](Args& g) {
    Shape s = g.shape();
    if (g.pick(6) == 0) s.push_back(-1 - g.pick(2));
    if (g.pick(10) == 0) s.resize(9, 1);
    return s;
  };
  auto describe_call = [](const Shape& s, DType dt) {
    return std::string(dtype_name(dt)) + " " + shape_str(s);
  };
  fuzz("full", [&](Args& g, std::string& what) {
    const Shape s = shape(g);
    const DType dt = g.dtype();
    const double v = g.scalar();
    what = describe_call(s, dt) + ", " + std::to_string(v);
    return full(s, v, dt, g.device());
  });
  for (const bool one : {false, true}) {
    fuzz(one ? "ones" : "zeros", [&, one](Args& g, std::string& what) {
      const Shape s = shape(g);
      const DType dt = g.dtype();
      what = describe_call(s, dt);
      return one ? ones(s, dt, g.device()) : zeros(s, dt, g.device());
    });
  }
  fuzz("scalar_tensor", [&](Args& g, std::string& what) {
    const DType dt = g.dtype();
    const double v = g.scalar();
    what = describe_call({}, dt) + ", " + std::to_string(v);
    return scalar_tensor(v, dt, g.device());
  });
  for (const bool normal : {false, true}) {
    fuzz(normal ? "randn" : "rand", [&, normal](Args& g, std::string& what) {
      const Shape s = shape(g);
      const DType dt = g.dtype();
      what = describe_call(s, dt);
      return normal ? randn(s, dt, g.device()) : rand(s, dt, g.device());
    });
  }
  fuzz("arange", [&](Args& g, std::string& what) {
    const int64_t start = g.pick(7) - 3, end = g.pick(7) - 3, step = g.pick(5) - 2;
    const DType dt = g.dtype();
    what = std::to_string(start) + ":" + std::to_string(end) + ":" + std::to_string(step) + " " +
           std::string(dtype_name(dt));
    return arange(start, end, step, dt, g.device());
  });
  fuzz("from_vector", [&](Args& g, std::string& what) {
    const Shape s = shape(g);
    std::vector<float> v(g.pick(7));
    what = std::to_string(v.size()) + " values into " + shape_str(s);
    return from_vector<float>(v, s, g.device());
  });
}

// Convolutional ops (issue 21): mostly 4-D inputs of small sizes, with
// ranks, channel counts, groups, strides, paddings, dilations and kernel
// sizes that are sometimes wrong (zero, negative, too big, not dividing).
TEST_P(ArgumentFuzzTest, ConvolutionalOps) {
  auto image = [](Args& g, std::string& what) {
    Shape s = g.pick(6) == 0 ? g.shape() : Shape{g.pick(5) == 0 ? 0 : 1 + g.pick(2), 1 + g.pick(4), 1 + g.pick(6),
                                                  1 + g.pick(6)};
    Tensor x = g.tensor(s, g.pick(6) == 0 ? g.dtype() : g.float_dtype());
    what = describe(x);
    return x;
  };
  auto size2 = [](Args& g, int lo, int n) { return g.coin() ? Size2(lo + g.pick(n)) : Size2(lo + g.pick(n), lo + g.pick(n)); };
  auto str2 = [](Size2 v) { return absl::StrCat("(", v.h, ", ", v.w, ")"); };
  fuzz("conv2d", [&](Args& g, std::string& what) {
    Tensor x = image(g, what);
    const int64_t c = x.dim() == 4 ? x.size(1) : 1 + g.pick(3);
    const int64_t groups = g.pick(4) == 0 ? g.pick(4) : (c % 2 == 0 && g.coin() ? 2 : 1);
    const int64_t k = (g.pick(8) == 0 ? 0 : 1 + g.pick(3)) * std::max<int64_t>(groups, 1);
    const int64_t cin = g.pick(8) == 0 ? c + 1 : c / std::max<int64_t>(groups, 1);
    Tensor w = g.tensor({k, cin, 1 + g.pick(3), 1 + g.pick(3)}, g.pick(8) == 0 ? g.dtype() : x.dtype());
    Tensor b = g.coin() ? Tensor() : g.tensor({g.pick(8) == 0 ? k + 1 : k}, x.dtype());
    const Size2 stride = size2(g, 0, 3), padding = size2(g, -1, 3), dilation = size2(g, 0, 3);
    what += ", weight " + describe(w) + ", bias " + describe(b) + ", stride " + str2(stride) + ", padding " +
            str2(padding) + ", dilation " + str2(dilation) + ", groups " + std::to_string(groups);
    return conv2d(x, w, b, stride, padding, dilation, groups);
  }, {"conv2d_backward_data", "conv2d_backward_weights"});
  fuzz("max_pool2d", [&](Args& g, std::string& what) {
    Tensor x = image(g, what);
    const Size2 kernel = size2(g, 0, 4), padding = size2(g, -1, 3), dilation = size2(g, 0, 3);
    const std::optional<Size2> stride = g.coin() ? std::nullopt : std::optional<Size2>(size2(g, 0, 3));
    const bool ceil_mode = g.coin();
    what += ", kernel " + str2(kernel) + ", padding " + str2(padding) + ", dilation " + str2(dilation) +
            (stride ? ", stride " + str2(*stride) : "") + (ceil_mode ? ", ceil" : "");
    return max_pool2d(x, kernel, stride, padding, dilation, ceil_mode);
  }, {"max_pool2d_backward"});
  fuzz("avg_pool2d", [&](Args& g, std::string& what) {
    Tensor x = image(g, what);
    const Size2 kernel = size2(g, 0, 4), padding = size2(g, -1, 3);
    const std::optional<Size2> stride = g.coin() ? std::nullopt : std::optional<Size2>(size2(g, 0, 3));
    const bool ceil_mode = g.coin(), include_pad = g.coin();
    what += ", kernel " + str2(kernel) + ", padding " + str2(padding) + (stride ? ", stride " + str2(*stride) : "") +
            (ceil_mode ? ", ceil" : "") + (include_pad ? ", include_pad" : "");
    return avg_pool2d(x, kernel, stride, padding, ceil_mode, include_pad);
  }, {"avg_pool2d_backward"});
  fuzz("adaptive_avg_pool2d", [&](Args& g, std::string& what) {
    Tensor x = image(g, what);
    const Size2 out = size2(g, -1, 8);
    what += ", output " + str2(out);
    return adaptive_avg_pool2d(x, out);
  }, {"adaptive_avg_pool2d_backward"});
  fuzz("flatten", [](Args& g, std::string& what) {
    Tensor a = g.tensor();
    const int64_t start = g.dim(a.dim()), end = g.dim(a.dim());
    what = describe(a) + ", " + std::to_string(start) + ", " + std::to_string(end);
    return flatten(a, start, end);
  }, {"reshape", "view"});
  fuzz("batch_norm", [&](Args& g, std::string& what) {
    Tensor x = image(g, what);
    const int64_t c = x.dim() >= 2 ? x.size(1) : 1 + g.pick(3);
    auto stat = [&](double fill) {
      if (g.pick(4) == 0) return Tensor();
      Tensor t = full({g.pick(10) == 0 ? c + 1 : c}, fill, g.pick(10) == 0 ? g.dtype() : x.dtype(), g.device());
      return t;
    };
    Tensor rm = stat(0.0), rv = stat(1.0);
    Tensor w = g.coin() ? Tensor() : g.tensor({c}, x.dtype()), b = g.coin() ? Tensor() : g.tensor({c}, x.dtype());
    const bool training = g.coin();
    what += ", running " + describe(rm) + " / " + describe(rv) + ", weight " + describe(w) + ", bias " +
            describe(b) + (training ? ", training" : ", eval");
    return batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5);
  }, {"batch_norm_backward"});
}

// Empty tensors whose other dims are huge ([2^63 - 1, 0] and its kin,
// views of an empty tensor by expand, as ops_fuzz makes them): an op must
// do no work on them, not one step per row. softmax on [2^63 - 1, 0] ran
// 2^63 - 1 empty rows (a fuzz timeout). Each call returns at once, an empty
// result or a reduction of nothing (sum_to's zeros, cross_entropy's NaN), or
// refuses with the op's error; backward runs too.
TEST_P(ArgumentFuzzTest, EmptyTensorsWithHugeDimsDoNoWork) {
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max(), k2to61 = int64_t{1} << 61;
  const Device device = GetParam();
  const std::vector<Tensor> empties = {
      zeros({1, 0}, kFloat32, device).expand({kMax64, 0}), zeros({0, 1}, kFloat32, device).expand({0, kMax64}),
      zeros({1, 0, 3}, kFloat32, device).expand({k2to61, 0, 3}),
      zeros({3, 0, 1}, kFloat32, device).expand({3, 0, k2to61})};
  using OneFn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, OneFn>> ops = {
      {"softmax", [](const Tensor& t) { return softmax(t, 0); }},
      {"softmax", [](const Tensor& t) { return softmax(t, -1); }},
      {"log_softmax", [](const Tensor& t) { return log_softmax(t, 1); }},
      {"layer_norm", [](const Tensor& t) { return layer_norm(t, {t.size(-1)}); }},
      {"sum", [](const Tensor& t) { return sum(t, {-1}); }},
      {"mean", [](const Tensor& t) { return mean(t, {0}); }},
      {"var", [](const Tensor& t) { return var(t, {-1}); }},
      {"max", [](const Tensor& t) { return max(t, -1).first; }},
      {"max", [](const Tensor& t) { return max(t, 0).first; }},
      {"argmax", [](const Tensor& t) { return argmax(t, 0); }},
      {"dropout", [](const Tensor& t) { return dropout(t, 0.5); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t, GeluApprox::kTanh); }},
      {"contiguous", [](const Tensor& t) { return t.contiguous(); }},
      {"to", [](const Tensor& t) { return t.to(kBFloat16); }},
      {"matmul", [](const Tensor& t) { return matmul(t, t.transpose(-1, -2)); }},
      {"matmul", [](const Tensor& t) { return matmul(t.transpose(-1, -2), t); }},
      {"concat", [](const Tensor& t) { return concat({t, t}, -1); }},
      {"concat", [](const Tensor& t) { return concat({t, t}, 0); }},
      {"cross_entropy", [](const Tensor& t) {
         const Tensor logits = flatten(t, 0, -2);
         return cross_entropy(logits, zeros({1}, kInt64, t.device()).expand({logits.size(0)}));
       }},
      {"embedding",
       [](const Tensor& t) { return embedding(flatten(t, 0, -2), zeros({t.size(0), 0}, kInt64, t.device())); }},
      {"sum_to", [](const Tensor& t) { return sum_to(t, {1, t.size(-1)}); }},
      {"var", [](const Tensor& t) { return var(t, {0}); }},
      {"clamp", [](const Tensor& t) { return clamp(t, -1.0, 1.0); }},
      {"masked_fill", [](const Tensor& t) { return masked_fill(t, zeros({1}, kBool, t.device()), 2.0); }},
      {"add", [](const Tensor& t) { return add(t, t.transpose(0, -1).transpose(0, -1)); }},
      {"stack", [](const Tensor& t) { return stack({t, t}, 0); }},
      {"split", [](const Tensor& t) { return split(t, 1, 0).back(); }},
      {"where", [](const Tensor& t) { return where(gt(t, 0.0), t, t); }},
      {"mse_loss", [](const Tensor& t) { return mse_loss(t, t.detach(), Reduction::kNone); }},
      {"gather", [](const Tensor& t) { return gather(t, 0, zeros(t.shape(), kInt64, t.device())); }},
      {"index_select", [](const Tensor& t) { return index_select(t, -1, zeros({0}, kInt64, t.device())); }},
      {"flatten", [](const Tensor& t) { return flatten(t).contiguous(); }},
  };
  for (const Tensor& base : empties) {
    for (const auto& [name, fn] : ops) {
      const std::string what = name + " of " + describe(base);
      const Tensor x = base.detach().requires_grad_();
      Tensor out;
      const absl::Status s = status_of([&] {
        out = fn(x);
        if (device.is_cuda()) synchronize(device);
      });
      if (!s.ok()) {
        EXPECT_NE(s.code(), absl::StatusCode::kInternal) << what << ": " << s;
        // stack is a concat; "empty": an output that cannot be allocated ([2^63 - 1] floats)
        EXPECT_TRUE(names_the_op(s.message(), {name, "concat", "empty"})) << what << ": " << s;
        continue;
      }
      EXPECT_LE(out.numel(), 3) << what << ": " << shape_str(out.shape());   // empty, or a reduction of nothing
      if (out.requires_grad()) {
        const absl::Status b = status_of([&] {
          out.to(kFloat32).sum().backward();
          if (device.is_cuda()) synchronize(device);
        });
        EXPECT_TRUE(b.ok()) << what << " backward: " << b;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ArgumentFuzzTest, ::testing::Values(kCPU, Device::cuda(0)),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return std::string(info.param.is_cpu() ? "Cpu" : "Cuda");
                         });

}  // namespace
}  // namespace encore
