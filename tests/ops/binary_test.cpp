// add, sub, mul, div and their scalar forms against host loops (double math)
// over broadcast shape pairs, layouts and dtypes; their errors; their backward
// against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::broadcast_index;
using testing::expect_error;
using testing::expect_gradients_match;
using testing::expect_near;
using testing::non_contiguous;
using testing::unravel;
using testing::values;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr DType kAllNumeric[] = {kFloat32, kFloat16, kBFloat16, kInt32, kInt64};

enum class Op { kAdd, kSub, kMul, kDiv };
constexpr Op kOps[] = {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv};
const char* op_name(Op op) {
  constexpr const char* kNames[] = {"add", "sub", "mul", "div"};
  return kNames[static_cast<int>(op)];
}
Tensor run(Op op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case Op::kAdd: return a + b;
    case Op::kSub: return a - b;
    case Op::kMul: return a * b;
    case Op::kDiv: return a / b;
  }
  return Tensor();
}
double apply(Op op, double x, double y) {
  switch (op) {
    case Op::kAdd: return x + y;
    case Op::kSub: return x - y;
    case Op::kMul: return x * y;
    case Op::kDiv: return x / y;
  }
  return 0;
}

// NumPy broadcasting, written out independently of the library.
Shape host_broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i + a.size() < n ? 1 : a[i + a.size() - n];
    const int64_t db = i + b.size() < n ? 1 : b[i + b.size() - n];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<double> host_binary(Op op, const Tensor& a, const Tensor& b, const Shape& shape) {
  const std::vector<double> av = values(a), bv = values(b);
  std::vector<double> out(numel_of(shape));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    const std::vector<int64_t> idx = unravel(i, shape);
    out[i] = apply(op, av[broadcast_index(idx, a.shape())], bv[broadcast_index(idx, b.shape())]);
  }
  return out;
}

// Host-generated values: floats in [-3, 3], integers in [-9, 9]. With
// away_from_zero, |v| >= 1: safe divisors.
Tensor make(const Shape& shape, uint64_t seed, DType dt = kFloat32, bool away_from_zero = false) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::vector<float> v(numel_of(shape));
  for (float& x : v) {
    double d = u(rng);
    if (!is_floating(dt)) d = std::round(d * 3.0);
    if (away_from_zero && std::abs(d) < 1.0) d = d < 0 ? d - 1.0 : d + 1.0;
    x = static_cast<float>(d);
  }
  return from_vector<float>(v, shape).to(dt);
}

// f16/bf16 results are f32 results rounded once: half an ulp relative, plus
// a little for f32 cancellation in add/sub.
double rtol_of(DType dt) {
  switch (dt) {
    case kFloat16: return 1e-3;    // 2^-11 = 4.9e-4
    case kBFloat16: return 8e-3;   // 2^-8 = 3.9e-3
    case kFloat32: return 1e-6;
    default: return 0.0;           // integers: exact
  }
}
double atol_of(DType dt) { return is_floating(dt) ? 1e-5 : 0.0; }

struct ShapePair { Shape a, b; };
const std::vector<ShapePair>& shape_pairs() {
  static const std::vector<ShapePair> pairs = {
      {{2, 3}, {2, 3}},       {{2, 3}, {3}},          {{3}, {2, 3}},     {{2, 1, 4}, {3, 1}},
      {{}, {2, 2}},           {{2, 2}, {}},           {{}, {}},          {{0, 3}, {1, 3}},
      {{1, 3}, {0, 3}},       {{3, 0}, {3, 1}},       {{4, 1}, {1, 5}},  {{1}, {3, 1, 2}},
      {{5, 1, 1, 3}, {1, 4, 1}}, {{1, 1}, {1}},       {{2, 3, 4}, {1, 3, 1}},
  };
  return pairs;
}

// Every op, shape pair and dtype, with contiguous and non-contiguous operands.
TEST(BinaryTest, MatchesHostReferenceOverBroadcastShapesAndDtypes) {
  uint64_t seed = 1;
  for (DType dt : kAllNumeric) {
    for (Op op : kOps) {
      if (op == Op::kDiv && !is_floating(dt)) continue;   // rejected, see IntegerDivIsRejected
      for (const ShapePair& p : shape_pairs()) {
        for (bool strided : {false, true}) {
          SCOPED_TRACE(::testing::Message() << op_name(op) << " " << dtype_name(dt) << " " << shape_str(p.a)
                                            << " " << shape_str(p.b) << (strided ? " strided" : ""));
          Tensor a = make(p.a, seed++, dt), b = make(p.b, seed++, dt, op == Op::kDiv);
          if (strided) {
            a = non_contiguous(a);
            b = non_contiguous(b);
          }
          const Shape shape = host_broadcast(p.a, p.b);
          Tensor out = run(op, a, b);
          EXPECT_EQ(out.dtype(), dt);
          EXPECT_EQ(out.shape(), shape);
          EXPECT_TRUE(out.is_contiguous());
          expect_near(out, host_binary(op, a, b, shape), atol_of(dt), rtol_of(dt));
          if (is_floating(dt) && dt != kFloat32) {   // vs the f32 op on the same values
            expect_near(out.to(kFloat32), run(op, a.to(kFloat32), b.to(kFloat32)), atol_of(dt), rtol_of(dt));
          }
        }
      }
    }
  }
}

// Views that make_layout must not merge naively: transposes, stepped slices,
// expanded (stride 0) operands, an offset into a bigger buffer.
TEST(BinaryTest, NonContiguousLayouts) {
  Tensor base = make({6, 8}, 1);
  Tensor other = make({8, 6}, 2, kFloat32, true);
  struct Case { const char* name; Tensor a, b; };
  const Case cases[] = {
      {"transposed", base.t(), other},
      {"both transposed", base.t(), other.t().t()},
      {"stepped slices", base.slice(0, 1, 6, 2).slice(1, 0, 8, 3), other.slice(0, 2, 5).slice(1, 3, 6)},
      {"expanded", base.slice(1, 2, 3).expand({6, 4}), other.slice(0, 0, 1).slice(1, 0, 4)},
      {"permuted 3d", base.reshape({2, 3, 8}).permute({2, 0, 1}), make({8, 1, 3}, 3, kFloat32, true)},
      {"selected row with column", base.select(0, 3), other.select(1, 2).slice(0, 0, 8)},
      {"same tensor twice", base, base},
  };
  for (const Case& c : cases) {
    for (Op op : kOps) {
      SCOPED_TRACE(::testing::Message() << c.name << " " << op_name(op));
      const Shape shape = host_broadcast(c.a.shape(), c.b.shape());
      expect_near(run(op, c.a, c.b), host_binary(op, c.a, c.b, shape), 1e-6, 1e-6);
    }
  }
}

// Big enough to split over threads (grain 32768), with a transposed operand
// so that chunks start in the middle of rows. The reference indexes directly
// (out[i][j] = a[i][j] op b[j]) to stay fast.
TEST(BinaryTest, LargeStridedTensorsSplitOverThreads) {
  constexpr int64_t kRows = 301, kCols = 257;
  for (DType dt : {kFloat32, kBFloat16, kInt64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor a = make({kCols, kRows}, 4, dt).t();   // [kRows, kCols], transposed
    Tensor b = make({kCols}, 5, dt, true);
    const std::vector<double> av = values(a), bv = values(b);
    for (Op op : {Op::kAdd, Op::kSub, Op::kMul}) {
      SCOPED_TRACE(op_name(op));
      std::vector<double> expected(kRows * kCols);
      for (int64_t i = 0; i < kRows * kCols; ++i) expected[i] = apply(op, av[i], bv[i % kCols]);
      expect_near(run(op, a, b), expected, atol_of(dt), rtol_of(dt));
    }
  }
}

TEST(BinaryTest, ResultIsFreshMemory) {
  Tensor a = make({2, 3}, 1), b = make({2, 3}, 2);
  Tensor out = a + b;
  EXPECT_NE(out.storage(), a.storage());
  EXPECT_NE(out.storage(), b.storage());
  const std::vector<double> before = values(out);
  a.fill_(100.0);
  EXPECT_EQ(values(out), before);
}

// ---- scalar forms ----

struct ScalarCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  bool integers;   // defined on i32/i64 (integral scalars only)
};
const std::vector<ScalarCase>& scalar_cases() {
  static const std::vector<ScalarCase> cases = {
      {"a+1.5", [](const Tensor& a) { return a + 1.5; }, [](double x) { return x + 1.5; }, false},
      {"1.5+a", [](const Tensor& a) { return 1.5 + a; }, [](double x) { return 1.5 + x; }, false},
      {"a-0.25", [](const Tensor& a) { return a - 0.25; }, [](double x) { return x - 0.25; }, false},
      {"2-a", [](const Tensor& a) { return 2.0 - a; }, [](double x) { return 2.0 - x; }, true},
      {"a*3", [](const Tensor& a) { return a * 3.0; }, [](double x) { return x * 3.0; }, true},
      {"3*a", [](const Tensor& a) { return 3.0 * a; }, [](double x) { return 3.0 * x; }, true},
      {"a*-0.5", [](const Tensor& a) { return a * -0.5; }, [](double x) { return x * -0.5; }, false},
      {"a/4", [](const Tensor& a) { return a / 4.0; }, [](double x) { return x / 4.0; }, false},
      {"2/a", [](const Tensor& a) { return 2.0 / a; }, [](double x) { return 2.0 / x; }, false},
      {"-a", [](const Tensor& a) { return -a; }, [](double x) { return -x; }, true},
      {"a+2", [](const Tensor& a) { return a + 2.0; }, [](double x) { return x + 2.0; }, true},
      {"a-7", [](const Tensor& a) { return a - 7.0; }, [](double x) { return x - 7.0; }, true},
  };
  return cases;
}

TEST(BinaryTest, ScalarFormsMatchHostReference) {
  const Shape shapes[] = {{}, {5}, {2, 3}, {0, 4}, {1, 3, 1}};
  uint64_t seed = 100;
  for (DType dt : kAllNumeric) {
    for (const ScalarCase& c : scalar_cases()) {
      if (!is_floating(dt) && !c.integers) continue;
      for (const Shape& shape : shapes) {
        for (bool strided : {false, true}) {
          SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(dt) << " " << shape_str(shape)
                                            << (strided ? " strided" : ""));
          Tensor a = make(shape, seed++, dt, true);
          if (strided) a = non_contiguous(a);
          std::vector<double> expected = values(a);
          for (double& x : expected) x = c.ref(x);
          Tensor out = c.fn(a);
          EXPECT_EQ(out.dtype(), dt);
          EXPECT_EQ(out.shape(), shape);
          expect_near(out, expected, atol_of(dt), rtol_of(dt));
        }
      }
    }
  }
}

// a / s is rounded once, as a plain loop's x / s in the compute type (f32;
// f16 and bf16 through f32, then rounded to their own), not a * (1 / s),
// which differs in the last bit for about a third of the values (0.3f / 10).
TEST(BinaryTest, DivisionByAScalarIsRoundedOnce) {
  uint64_t seed = 300;
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    for (double s : {3.0, 10.0, 255.0, 0.1, -7.0, 1e-3}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " / " << s);
      Tensor a = make({1000}, seed++, dt);
      std::vector<float> want = a.to(kFloat32).to_vector<float>();
      for (float& x : want) x = x / static_cast<float>(s);
      const Tensor expected = from_vector<float>(want).to(dt);
      for (const Tensor& got : {a / s, div(a, s), div(a.clone(), s)}) {
        ASSERT_EQ(got.dtype(), dt);
        EXPECT_EQ(got.to(kFloat32).to_vector<float>(), expected.to(kFloat32).to_vector<float>())
            << "differs from x / s rounded once";
      }
    }
  }
  EXPECT_EQ((from_vector<float>({0.3f}) / 10.0).item<float>(), 0.3f / 10.0f);
  expect_error([] { (void)(from_vector<int32_t>({4, 6}) / 2.0); }, kInvalid,
               {"div_scalar", "i32", "[2]", ".to(kFloat32)"});
}

// An integer tensor with a fractional scalar (a * 0.5, a / 2.0 = a * 0.5,
// a + 1.5) must never be computed with the scalar truncated to the integer
// type ([1, 2, 3, 4] * 0.5 giving zeros): each case either gives the value
// computed from the real scalar, truncated toward zero, or throws
// InvalidArgument. Today every case throws (ops::check_scalar_fits: "not a
// whole number").
TEST(BinaryTest, IntegerTensorWithFractionalScalarIsNotTruncatedSilently) {
  Tensor a = from_vector<int32_t>({1, 2, 3, 4, -3});
  const std::vector<std::pair<std::function<Tensor()>, std::vector<double>>> cases = {
      {[&] { return a * 0.5; }, {0, 1, 1, 2, -1}},
      {[&] { return a / 2.0; }, {0, 1, 1, 2, -1}},
      {[&] { return a + 1.5; }, {2, 3, 4, 5, -1}},
  };
  for (const auto& entry : cases) {
    const auto& fn = entry.first;  // NOTE [ No structured bindings in lambdas ]
    const auto& expected = entry.second;
    const absl::Status s = status_of([&] { expect_near(fn(), expected, 0, 0); });
    if (!s.ok()) {
      EXPECT_EQ(s.code(), kInvalid) << s;
    }
  }
}

// i32/i64 +, - and * (alpha and the scalar forms included) wrap around on
// overflow, two's complement, as sum, abs and neg do, contiguous or
// strided. Before, they overflowed signed integers in the kernel: undefined
// behaviour, which a -fsanitize=undefined build reports on this test.
TEST(BinaryTest, IntegerOverflowWrapsAround) {
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min(), kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min(), kMax64 = std::numeric_limits<int64_t>::max();
  for (bool strided : {false, true}) {
    SCOPED_TRACE(strided ? "strided" : "contiguous");
    auto layout = [&](const Tensor& t) { return strided ? non_contiguous(t) : t; };
    const Tensor a = layout(from_vector<int32_t>({2000000000, -2000000000, kMax32, kMin32, 46341}));
    const Tensor b = layout(from_vector<int32_t>({2000000000, 2000000000, 1, 1, 46341}));
    using V32 = std::vector<int32_t>;
    EXPECT_EQ((a + b).to_vector<int32_t>(), (V32{-294967296, 0, kMin32, kMin32 + 1, 92682}));
    EXPECT_EQ((a - b).to_vector<int32_t>(), (V32{0, 294967296, kMax32 - 1, kMax32, 0}));
    EXPECT_EQ((a * b).to_vector<int32_t>(), (V32{-1651507200, 1651507200, kMax32, kMin32, -2147479015}));
    EXPECT_EQ(a.clone().add_(b, 3).to_vector<int32_t>(),
              (V32{-589934592, -294967296, kMin32 + 2, kMin32 + 3, 185364}));
    EXPECT_EQ(add(a, 2e9).to_vector<int32_t>(), (V32{-294967296, 0, -147483649, -147483648, 2000046341}));
    EXPECT_EQ(mul(a, 3).to_vector<int32_t>(), (V32{1705032704, -1705032704, kMax32 - 2, kMin32, 139023}));
    EXPECT_EQ(rsub(a, -2e9).to_vector<int32_t>(), (V32{294967296, 0, 147483649, 147483648, -2000046341}));

    const Tensor c = layout(from_vector<int64_t>({kMax64, kMin64, 3037000500, -5}));
    const Tensor d = layout(from_vector<int64_t>({1, 1, 3037000500, kMin64}));
    using V64 = std::vector<int64_t>;
    EXPECT_EQ((c + d).to_vector<int64_t>(), (V64{kMin64, kMin64 + 1, 6074001000, kMax64 - 4}));
    EXPECT_EQ((c - d).to_vector<int64_t>(), (V64{kMax64 - 1, kMax64, 0, kMax64 - 4}));
    EXPECT_EQ((c * d).to_vector<int64_t>(), (V64{kMax64, kMin64, -9223372036709301616, kMin64}));
    const double two62 = std::ldexp(1.0, 62);
    EXPECT_EQ(add(c, two62).to_vector<int64_t>(),
              (V64{kMin64 + kMax64 / 2, kMin64 / 2, 4611686021464388404, 4611686018427387899}));
    EXPECT_EQ(mul(c, 3037000500.0).to_vector<int64_t>(), (V64{-3037000500, 0, -9223372036709301616, -15185002500}));
    EXPECT_EQ(rsub(c, two62).to_vector<int64_t>(),
              (V64{-4611686018427387903, kMin64 / 2, 4611686015390387404, 4611686018427387909}));
  }
}

// ---- errors ----

TEST(BinaryTest, IntegerDivIsRejected) {
  for (DType dt : {kInt32, kInt64}) {
    const std::string name(dtype_name(dt));
    Tensor a = make({2, 3}, 1, dt), b = make({3}, 2, dt, true);
    expect_error([&] { (void)(a / b); }, kInvalid, {"div", "[2, 3]", "[3]", name});
    expect_error([&] { (void)(2.0 / a); }, kInvalid, {"rdiv", "[2, 3]", name});
  }
}

TEST(BinaryTest, BoolArithmeticIsRejected) {
  Tensor a = from_vector<bool>({true, false, true}), b = from_vector<bool>({false, false, true});
  for (Op op : kOps) {
    expect_error([&] { (void)run(op, a, b); }, kInvalid, {op_name(op), "bool", "[3]"});
  }
  expect_error([&] { (void)(a + 1.0); }, kInvalid, {"add_scalar", "bool", "[3]"});
  expect_error([&] { (void)(a * 2.0); }, kInvalid, {"mul_scalar", "bool", "[3]"});
  expect_error([&] { (void)(1.0 - a); }, kInvalid, {"rsub_scalar", "bool", "[3]"});
  expect_error([&] { (void)(1.0 / a); }, kInvalid, {"rdiv_scalar", "bool", "[3]"});
  expect_error([&] { (void)(-a); }, kInvalid, {"neg", "bool", "[3]"});
}

// A broadcast whose element count does not fit in int64 is refused naming
// the op (issue #17): [2^32, 1] + [1, 2^32], both broadcast views.
TEST(BinaryTest, BroadcastsWhoseSizeOverflowsAreRefused) {
  constexpr int64_t k2to32 = int64_t{1} << 32;
  const Tensor a = ones({1, 1}).expand({k2to32, 1}), b = ones({1, 1}).expand({1, k2to32});
  expect_error([&] { (void)add(a, b); }, kInvalid, {"add", "[4294967296, 4294967296]", "2^63 elements"});
  expect_error([&] { (void)mul(a, b); }, kInvalid, {"mul", "[4294967296, 4294967296]", "2^63 elements"});
}

TEST(BinaryTest, DtypeMismatchNamesOpShapesAndDtypes) {
  Tensor f = make({2, 3}, 1), h = make({3}, 2, kFloat16), i = make({3}, 3, kInt64);
  for (Op op : kOps) {
    expect_error([&] { (void)run(op, f, h); }, kInvalid, {op_name(op), "[2, 3]", "f32", "[3]", "f16"});
    expect_error([&] { (void)run(op, i, f); }, kInvalid, {op_name(op), "[3]", "i64", "[2, 3]", "f32"});
  }
}

TEST(BinaryTest, ShapeMismatchNamesOpShapesAndDtypes) {
  Tensor a = make({2, 3}, 1), b = make({4}, 2), c = make({2, 1, 5}, 3);
  for (Op op : kOps) {
    expect_error([&] { (void)run(op, a, b); }, kInvalid, {op_name(op), "[2, 3]", "[4]", "f32", "broadcast"});
    expect_error([&] { (void)run(op, c, a); }, kInvalid, {op_name(op), "[2, 1, 5]", "[2, 3]"});
  }
  expect_error([&] { (void)(make({0}, 4) + make({2}, 5)); }, kInvalid, {"add", "[0]", "[2]"});
  Tensor bf = make({3}, 6, kBFloat16), bf2 = make({2}, 7, kBFloat16);
  expect_error([&] { (void)(bf * bf2); }, kInvalid, {"mul", "[3]", "[2]", "bf16"});
}

TEST(BinaryTest, UndefinedOperandsAreRejected) {
  Tensor a = make({2}, 1);
  expect_error([&] { (void)(a + Tensor()); }, kInvalid, {"add", "undefined"});
  expect_error([&] { (void)(Tensor() * a); }, kInvalid, {"mul", "undefined"});
  expect_error([&] { (void)(Tensor() + 1.0); }, kInvalid, {"add_scalar", "undefined"});
  expect_error([&] { (void)(-Tensor()); }, kInvalid, {"neg", "undefined"});
}

// ---- backward ----

TEST(BinaryTest, BackwardSameShapes) {
  for (Op op : kOps) {
    SCOPED_TRACE(op_name(op));
    expect_gradients_match([op](const auto& in) { return run(op, in[0], in[1]); },
                           {make({2, 3}, 1), make({2, 3}, 2, kFloat32, true)});
  }
}

TEST(BinaryTest, BackwardBroadcasting) {
  for (const ShapePair& p : shape_pairs()) {
    if (numel_of(host_broadcast(p.a, p.b)) == 0) continue;
    for (Op op : kOps) {
      SCOPED_TRACE(::testing::Message() << op_name(op) << " " << shape_str(p.a) << " " << shape_str(p.b));
      expect_gradients_match([op](const auto& in) { return run(op, in[0], in[1]); },
                             {make(p.a, 3), make(p.b, 4, kFloat32, true)});
    }
  }
}

TEST(BinaryTest, BackwardNonContiguousAndSharedInputs) {
  for (Op op : kOps) {
    SCOPED_TRACE(op_name(op));
    expect_gradients_match([op](const auto& in) { return run(op, in[0].t(), in[1]); },
                           {make({3, 2}, 5), make({3}, 6, kFloat32, true)});
    // The same input on both sides: both gradients accumulate.
    expect_gradients_match([op](const auto& in) { return run(op, in[0], in[0]); },
                           {make({2, 2}, 7, kFloat32, true)});
  }
}

TEST(BinaryTest, BackwardOnlyReachesInputsThatRequireGrad) {
  for (Op op : kOps) {
    SCOPED_TRACE(op_name(op));
    Tensor a = make({2, 3}, 1).requires_grad_(), b = make({3}, 2, kFloat32, true);
    Tensor out = run(op, a, b);
    EXPECT_TRUE(out.requires_grad());
    out.backward(ones({2, 3}));
    ASSERT_TRUE(a.grad().defined());
    EXPECT_EQ(a.grad().shape(), Shape({2, 3}));
    EXPECT_FALSE(b.grad().defined());
  }
  // mul saves only the other operand: a may change after the forward when
  // only a requires grad (its gradient needs b, not a).
  Tensor a = make({3}, 3).requires_grad_(), b = make({3}, 4);
  Tensor out = a * b;
  {
    NoGradGuard no_grad;
    a.mul_(2.0);
  }
  out.backward(ones({3}));
  expect_near(a.grad(), values(b), 0, 0);
}

TEST(BinaryTest, ScalarFormsBackward) {
  for (const ScalarCase& c : scalar_cases()) {
    SCOPED_TRACE(c.name);
    expect_gradients_match([&c](const auto& in) { return c.fn(in[0]); }, {make({2, 3}, 8, kFloat32, true)});
    expect_gradients_match([&c](const auto& in) { return c.fn(in[0]); }, {make({}, 9, kFloat32, true)});
  }
}

TEST(BinaryTest, NoRecordingWithoutGradOrUnderNoGradGuard) {
  Tensor a = make({2}, 1), b = make({2}, 2).requires_grad_();
  EXPECT_FALSE((a * 2.0).requires_grad());
  EXPECT_TRUE((b * 2.0).requires_grad());
  NoGradGuard no_grad;
  EXPECT_FALSE((a + b).requires_grad());
  EXPECT_FALSE((2.0 / b).requires_grad());
}

}  // namespace
}  // namespace encore
