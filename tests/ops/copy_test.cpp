// Copies, conversions, in-place writes, host access, printing, creation and
// random draws; their errors; the backward of clone and to(dtype); and
// autograd's check that saved tensors were not modified in place.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "absl/types/span.h"
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

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr DType kAllDtypes[] = {kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kBool};

// A tensor of dtype dt holding `v` (each value must be representable in dt),
// built with from_vector of dt's own element type (not through a conversion).
Tensor make_exact(DType dt, const std::vector<double>& v, Shape shape) {
  auto build = [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> host;
    for (double x : v) host.push_back(static_cast<T>(static_cast<float>(x)));
    return from_vector<T>(host, shape);
  };
  switch (dt) {
    case kFloat32: return build(float{});
    case kFloat16: return build(Half{});
    case kBFloat16: return build(BFloat16{});
    case kInt32: return build(int32_t{});
    case kInt64: return build(int64_t{});
    case kBool: {
      std::vector<bool> b;
      for (double x : v) b.push_back(x != 0);
      return from_vector<bool>(b, shape);
    }
  }
  return Tensor();
}

// Source values per dtype: exactly representable in it (f16/bf16 need <= 8
// significant bits), with fractions and negatives where the dtype has them.
std::vector<double> source_values(DType dt) {
  if (is_floating(dt)) return {-3, -2.5, -1, -0.75, 0, 0.5, 1, 2.75, 7, 100};
  if (dt == kBool) return {1, 0, 0, 1, 1, 0, 1, 1, 0, 1};
  return {-3, -2, -1, 0, 0, 5, 1, 2, 7, 100};
}

// The value a conversion to dt must store (the sources above are exactly
// representable in every float dtype): integers truncate toward zero, bool is != 0.
double converted(double x, DType dt) {
  if (dt == kBool) return x != 0 ? 1 : 0;
  if (!is_floating(dt)) return std::trunc(x);
  return x;
}

// ---- copy_ ----

TEST(CopyTest, CopyConvertsEveryPairOfDtypesIntoStridedDestinations) {
  for (DType from : kAllDtypes) {
    for (DType to : kAllDtypes) {
      const std::vector<double> src_values = source_values(from);
      for (int layout = 0; layout < 3; ++layout) {
        SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(to) << " layout " << layout);
        Tensor src = make_exact(from, src_values, {2, 5});
        Tensor dst = zeros({2, 5}, to);
        if (layout == 1) dst = zeros({5, 2}, to).t();   // transposed destination
        if (layout == 2) {                             // both non-contiguous
          src = non_contiguous(src);
          dst = zeros({2, 10}, to).slice(1, 1, 10, 2);
        }
        Tensor& r = dst.copy_(src);
        EXPECT_TRUE(r.is_same(dst));
        EXPECT_EQ(dst.dtype(), to);
        std::vector<double> expected;
        for (double x : src_values) expected.push_back(converted(x, to));
        expect_near(dst, expected, 0, 0);
      }
    }
  }
}

TEST(CopyTest, CopyBroadcastsTheSource) {
  for (DType to : kAllDtypes) {
    SCOPED_TRACE(std::string(dtype_name(to)));
    Tensor dst = zeros({4, 3}, to).t();   // [3, 4], transposed
    dst.copy_(make_exact(kFloat32, {1, -2, 3, 0}, {4}));
    expect_near(dst, {converted(1, to), converted(-2, to), converted(3, to), converted(0, to),
                      converted(1, to), converted(-2, to), converted(3, to), converted(0, to),
                      converted(1, to), converted(-2, to), converted(3, to), converted(0, to)}, 0, 0);
    dst.copy_(make_exact(kInt64, {5, 6, 7}, {3, 1}));
    expect_near(dst, {converted(5, to), converted(5, to), converted(5, to), converted(5, to), converted(6, to),
                      converted(6, to), converted(6, to), converted(6, to), converted(7, to), converted(7, to),
                      converted(7, to), converted(7, to)}, 0, 0);
    dst.copy_(scalar_tensor(1.0));
    expect_near(dst, std::vector<double>(12, 1.0), 0, 0);
  }
  // The source broadcasts to the destination, not the other way: [1] into [] is refused.
  expect_error([] { scalar_tensor(0).copy_(from_vector<float>({4.5f}, {1})); }, kInvalid, {"copy_", "[1]", "[]"});
}

TEST(CopyTest, CopyIntoASliceLeavesTheRestUntouched) {
  Tensor a = zeros({3, 4});
  a.slice(1, 1, 3).copy_(from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  expect_near(a, {0, 1, 2, 0, 0, 3, 4, 0, 0, 5, 6, 0}, 0, 0);
  a.select(0, 2).slice(0, 0, 4, 3).copy_(from_vector<float>({9, 8}));
  expect_near(a, {0, 1, 2, 0, 0, 3, 4, 0, 9, 5, 6, 8}, 0, 0);
}

TEST(CopyTest, LargeCopyWithConversionSplitsOverThreads) {
  Tensor src = random_tensor({300, 257}, 1);
  Tensor dst = zeros({257, 300}, kBFloat16).t();   // strided destination
  dst.copy_(src);
  std::vector<double> expected = values(src);
  for (double& x : expected) x = static_cast<float>(BFloat16(static_cast<float>(x)));
  expect_near(dst, expected, 0, 0);
}

// ---- fill_, zero_, add_, mul_ ----

TEST(CopyTest, FillAndZeroInEveryDtypeThroughViews) {
  for (DType dt : kAllDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor a = zeros({3, 4}, dt);
    a.select(1, 1).fill_(2.0);   // a column: strided
    const double two = converted(2.0, dt);
    expect_near(a, {0, two, 0, 0, 0, two, 0, 0, 0, two, 0, 0}, 0, 0);
    a.t().slice(0, 2, 4).fill_(1.0);
    expect_near(a, {0, two, 1, 1, 0, two, 1, 1, 0, two, 1, 1}, 0, 0);
    a.zero_();
    expect_near(a, std::vector<double>(12, 0.0), 0, 0);
    Tensor s = zeros({}, dt);
    s.fill_(-1.0);
    expect_near(s, {converted(-1.0, dt)}, 0, 0);
  }
  // Conversions of the fill value follow copy's: truncation, != 0, rounding.
  expect_near(zeros({2}, kInt32).fill_(2.7), {2, 2}, 0, 0);
  expect_near(zeros({2}, kInt64).fill_(-2.7), {-2, -2}, 0, 0);
  expect_near(zeros({2}, kBool).fill_(0.5), {1, 1}, 0, 0);
  expect_near(zeros({1}, kBFloat16).fill_(1.0 / 3.0), {static_cast<float>(BFloat16(1.0f / 3.0f))}, 0, 0);
  zeros({0, 3}).fill_(1.0);   // empty: nothing to do
}

TEST(CopyTest, AddInPlaceWithAlphaAndBroadcasting) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor a = make_exact(dt, {1, 2, 3, 4, 5, 6}, {3, 2}).t();   // [2, 3] transposed view
    Tensor other = make_exact(dt, {0.5, -1, 2}, {3});
    Tensor& r = a.add_(other, 0.5);
    EXPECT_TRUE(r.is_same(a));
    // a (row-major of the view) = [[1, 3, 5], [2, 4, 6]]; + 0.5 * [0.5, -1, 2].
    expect_near(a, {1.25, 2.5, 6, 2.25, 3.5, 7}, 0, 0);
    a.add_(a);   // aliasing itself
    expect_near(a, {2.5, 5, 12, 4.5, 7, 14}, 0, 0);
  }
  Tensor i = make_exact(kInt32, {1, 2, 3}, {3});
  i.add_(make_exact(kInt32, {10, 20, 30}, {3}), 2.0);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{21, 42, 63}));
  i.add_(make_exact(kInt32, {1}, {1}), -1.0);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{20, 41, 62}));
}

TEST(CopyTest, MulInPlace) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor a = make_exact(dt, {1, -2, 3, 0.5}, {2, 2});
    Tensor view = a.t();
    Tensor& r = view.mul_(2.5);
    EXPECT_TRUE(r.is_same(view));
    expect_near(a, {2.5, -5, 7.5, 1.25}, 0, 0);
    Tensor big = full({70000}, 1.5, dt);   // above the threads' grain
    big.mul_(-2.0);
    expect_near(big, std::vector<double>(70000, -3.0), 0, 0);
  }
  Tensor i = make_exact(kInt64, {1, -2, 3}, {3});
  i.mul_(-3.0);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{-3, 6, -9}));
}

// ---- clone, to(dtype) ----

TEST(CopyTest, CloneIsAnIndependentContiguousCopy) {
  for (DType dt : kAllDtypes) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor a = make_exact(dt, source_values(dt), {5, 2}).t();
    Tensor c = a.clone();
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_EQ(c.shape(), a.shape());
    EXPECT_EQ(c.dtype(), dt);
    EXPECT_NE(c.storage(), a.storage());
    expect_near(c, values(a), 0, 0);
    const std::vector<double> before = values(c);
    a.fill_(1.0);
    EXPECT_EQ(values(c), before);
  }
  EXPECT_EQ(zeros({0, 2}).clone().shape(), Shape({0, 2}));
  EXPECT_EQ(scalar_tensor(3).clone().item<float>(), 3.0f);
}

TEST(CopyTest, ToDtypeRoundTrips) {
  Tensor f = random_tensor({64}, 2);
  EXPECT_TRUE(f.to(kFloat32).is_same(f));   // same dtype: no copy
  // f32 -> bf16 -> f32 within half a bf16 ulp (7 stored bits: 2^-8 relative);
  // f16 (10 stored bits): 2^-11 relative in the normal range, 2^-25 absolute below it.
  Tensor bf = f.to(kBFloat16);
  EXPECT_EQ(bf.dtype(), kBFloat16);
  expect_near(bf.to(kFloat32), values(f), 0, std::ldexp(1.0, -8));
  expect_near(f.to(kFloat16).to(kFloat32), values(f), 1e-7, std::ldexp(1.0, -11));
  // Round trips through a wider type are exact.
  expect_near(bf.to(kFloat32).to(kBFloat16), values(bf), 0, 0);
  Tensor i = from_vector<int32_t>({-7, 0, 3, 2147483647, -2147483647 - 1});
  EXPECT_EQ(i.to(kInt64).to(kInt32).to_vector<int32_t>(), i.to_vector<int32_t>());
  Tensor big = from_vector<int64_t>({-(int64_t{1} << 24), 16777215, 123456, 0});
  EXPECT_EQ(big.to(kFloat32).to(kInt64).to_vector<int64_t>(), big.to_vector<int64_t>());
  Tensor j = make_exact(kInt32, {-2, 0, 5}, {3});
  expect_near(j.to(kBool).to(kInt32), {1, 0, 1}, 0, 0);
  expect_near(make_exact(kFloat32, {-1.9, -0.5, 0.5, 1.9}, {4}).to(kInt32), {-1, 0, 0, 1}, 0, 0);
  Tensor strided = non_contiguous(random_tensor({3, 4}, 3));
  expect_near(strided.to(kFloat16), values(strided), 1e-7, std::ldexp(1.0, -11));
}

// A float element that an integer type cannot hold converts the same way on
// every backend (copy / .to): NaN -> 0, beyond the range -> the type's limit,
// else truncated toward zero (backend::float_to_int).
TEST(CopyTest, FloatToIntegerSaturatesAndMapsNanToZero) {
  const std::vector<float> edges = {NAN, -NAN, INFINITY, -INFINITY, 3e9f, -3e9f, 2147483520.f, -2147483648.f,
                                    1e19f, -1e19f, 9.3e18f, -0.f, 2.99f, -2.99f};
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max(), kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max(), kMin64 = std::numeric_limits<int64_t>::min();
  const std::vector<int32_t> want32 = {0, 0, kMax32, kMin32, kMax32, kMin32, 2147483520, kMin32,
                                       kMax32, kMin32, kMax32, 0, 2, -2};
  const std::vector<int64_t> want64 = {0, 0, kMax64, kMin64, 3000000000, -3000000000, 2147483520, -2147483648,
                                       kMax64, kMin64, kMax64, 0, 2, -2};
  const Tensor f = from_vector<float>(edges);
  EXPECT_EQ(f.to(kInt32).to_vector<int32_t>(), want32);
  EXPECT_EQ(f.to(kInt64).to_vector<int64_t>(), want64);
  // f16 holds none of the large values (they become inf): the same limits.
  EXPECT_EQ(f.to(kFloat16).to(kInt32).to_vector<int32_t>(),
            (std::vector<int32_t>{0, 0, kMax32, kMin32, kMax32, kMin32, kMax32, kMin32, kMax32, kMin32, kMax32, 0, 2,
                                  -2}));
  EXPECT_EQ(f.to(kBFloat16).to(kInt64).to_vector<int64_t>()[10], kMax64);
}

// One op call given a value its tensor cannot hold.
struct RefusedValue {
  const char* op;
  std::function<void()> call;
};

// Each call throws InvalidArgument whose message starts "<op>: value " and
// says `why`.
void expect_values_refused(absl::Span<const RefusedValue> cases, const std::string& why) {
  for (const RefusedValue& c : cases) {
    SCOPED_TRACE(c.op);
    try {
      c.call();
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
      const std::string msg(e.status().message());
      EXPECT_EQ(msg.rfind(std::string(c.op) + ": value ", 0), 0u) << msg;
      EXPECT_NE(msg.find(why), std::string::npos) << msg;
    }
  }
}

// A scalar beyond an integer tensor's range (or NaN) is refused by every op
// that takes one, and a fraction by every op but fill_ and full (which
// truncate, as PyTorch does), naming the op and the value.
TEST(CopyTest, ScalarsThatDoNotFitAnIntegerTensorAreRefused) {
  const Tensor i32 = zeros({3}, kInt32), i64 = zeros({2}, kInt64);
  const Tensor mask = from_vector<bool>({true, false, true});
  const RefusedValue cases[] = {
      {"full", [] { full({2}, 1e20, kInt64); }},
      {"full", [] { full({1}, std::nan(""), kInt32); }},
      {"fill_", [&] { zeros({3}, kInt32).fill_(2147483648.0); }},
      {"add_", [&] { zeros({3}, kInt32).add_(i32, 0.5); }},
      {"mul_", [&] { zeros({2}, kInt64).mul_(9.3e18); }},
      {"masked_fill", [&] { masked_fill(i32, mask, -1e10); }},
      {"add_scalar", [&] { add(i64, INFINITY); }},
      {"mul_scalar", [&] { mul(i32, 1.5); }},
  };
  expect_values_refused(cases, "does not fit the i");
  // The limits themselves fit; fill_ and full truncate fractions.
  EXPECT_EQ(full({1}, -2.9, kInt64).to_vector<int64_t>(), std::vector<int64_t>{-2});
  EXPECT_EQ(zeros({1}, kInt32).fill_(2147483647.9).to_vector<int32_t>(), std::vector<int32_t>{2147483647});
  EXPECT_EQ(full({1}, -2147483648.0, kInt32).to_vector<int32_t>(), std::vector<int32_t>{std::numeric_limits<int32_t>::min()});
  EXPECT_EQ(masked_fill(i64, from_vector<bool>({true, false}), -9223372036854775808.0).to_vector<int64_t>()[0],
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(add(i32, 2147483647.0).to_vector<int32_t>()[0], 2147483647);
}

// A finite value beyond a float tensor's largest finite value is refused by
// fill_, full and masked_fill, as PyTorch does ("value cannot be converted to
// type at::Half without overflow"), where encore stored inf. Infinities, NaN
// and the largest values themselves are kept.
TEST(CopyTest, FillValuesThatOverflowAFloatTensorAreRefused) {
  const Tensor mask = from_vector<bool>({true, false});
  const RefusedValue cases[] = {
      {"full", [] { full({2}, 65520.0, kFloat16); }},
      {"full", [] { full({2}, -1e39, kFloat32); }},
      {"full", [] { full({2}, 1e39, kBFloat16); }},
      {"scalar_tensor", [] { scalar_tensor(1e300); }},
      {"fill_", [] { zeros({2}, kFloat16).fill_(-70000.0); }},
      {"masked_fill", [&] { masked_fill(zeros({2}, kFloat16), mask, 1e6); }},
      {"masked_fill", [&] { masked_fill(zeros({2}), mask, -1e40); }},
  };
  expect_values_refused(cases, "largest finite value");
  EXPECT_EQ(testing::values(full({1}, 65504.0, kFloat16)), std::vector<double>{65504.0});
  EXPECT_EQ(testing::values(full({1}, -3.4028234663852886e38, kFloat32)), std::vector<double>{-3.4028234663852886e38});
  EXPECT_EQ(testing::values(zeros({1}, kBFloat16).fill_(-INFINITY)), std::vector<double>{-INFINITY});
  EXPECT_TRUE(std::isnan(testing::values(masked_fill(zeros({2}, kFloat16), mask, NAN))[0]));
  EXPECT_EQ(testing::values(masked_fill(zeros({2}, kFloat16), mask, -INFINITY))[0], -INFINITY);
}

// ---- host access ----

TEST(CopyTest, ItemAndToVectorInEveryType) {
  Tensor f = from_vector<float>({1.5f, -2.0f, 3.25f}, {3});
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{1.5, -2.0, 3.25}));
  EXPECT_EQ(f.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(f.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  std::vector<Half> h = f.to_vector<Half>();
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(static_cast<float>(h[2]), 3.25f);
  EXPECT_EQ(static_cast<float>(f.to_vector<BFloat16>()[0]), 1.5f);
  EXPECT_EQ(f.slice(0, 1, 2).item<float>(), -2.0f);
  EXPECT_EQ(f.slice(0, 2, 3).item<double>(), 3.25);
  EXPECT_EQ(f.slice(0, 2, 3).item<int32_t>(), 3);
  EXPECT_EQ(static_cast<float>(f.select(0, 0).item<Half>()), 1.5f);
  EXPECT_EQ(static_cast<float>(f.select(0, 0).item<BFloat16>()), 1.5f);
  EXPECT_EQ(scalar_tensor(0, kBool).item<bool>(), false);
  EXPECT_EQ(scalar_tensor(5, kInt32).item<bool>(), true);
  EXPECT_EQ(scalar_tensor(-9, kInt64).item<int64_t>(), -9);
  const int64_t max_exact = (int64_t{1} << 53) - 1;   // doubles hold i64 exactly up to 2^53
  EXPECT_EQ(from_vector<int64_t>({max_exact}).item<double>(), static_cast<double>(max_exact));
  EXPECT_EQ(from_vector<bool>({true, false}).to_vector<double>(), (std::vector<double>{1, 0}));
  Tensor t = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}).t();   // non-contiguous: row-major of the view
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_TRUE(zeros({0, 4}).to_vector<float>().empty());
  // A tensor that requires grad can be read.
  EXPECT_EQ(scalar_tensor(2).requires_grad_().item<float>(), 2.0f);
}

TEST(CopyTest, ItemErrors) {
  expect_error([] { (void)zeros({2, 3}).item<float>(); }, kInvalid, {"item", "[2, 3]", "f32", "6"});
  expect_error([] { (void)zeros({0}, kInt32).item<int32_t>(); }, kInvalid, {"item", "[0]", "i32", "0"});
  expect_error([] { (void)zeros({2}).item<double>(); }, kInvalid, {"item", "[2]"});
  expect_error([] { (void)zeros({2}, kBool).item<bool>(); }, kInvalid, {"item", "[2]"});
  expect_error([] { (void)Tensor().item<float>(); }, kInvalid, {"item", "undefined"});
  expect_error([] { (void)Tensor().to_vector<int64_t>(); }, kInvalid, {"to_vector", "undefined"});
}

// BUG (src/ops/copy.cpp, Tensor::item<double>): unlike item<T> for other T
// it calls numel() before checking that the tensor is defined, so
// Tensor().item<double>() dereferences a null TensorImpl (crash) instead of
// throwing kInvalidArgument "item: input is an undefined tensor". Enable when fixed.
TEST(CopyTest, ItemDoubleOfUndefinedTensorThrows) {
  expect_error([] { (void)Tensor().item<double>(); }, kInvalid, {"item", "undefined"});
}

// BUG (src/ops/copy.cpp, Tensor::item<bool>): it reads through
// item<int32_t>(), which truncates floats, so scalar_tensor(0.5).item<bool>()
// is false while scalar_tensor(0.5).to(kBool).item<bool>() (copy's != 0 rule)
// and bool(0.5f) are true. Expected: true (x != 0). Enable when fixed.
TEST(CopyTest, ItemBoolOfAFractionIsTrue) {
  EXPECT_TRUE(scalar_tensor(0.5).to(kBool).item<bool>());
  EXPECT_TRUE(scalar_tensor(0.5).item<bool>());
  EXPECT_TRUE(scalar_tensor(-0.25, kBFloat16).item<bool>());
}

// ---- printing ----

TEST(CopyTest, PrintingFormat) {
  EXPECT_EQ(from_vector<int32_t>({1, 2, 3, 4}, {2, 2}).to_string(),
            "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=i32, device=cpu)");
  EXPECT_EQ(from_vector<float>({1.5f, -2.0f, 1e-7f}, {3}).to_string(),
            "tensor([1.5, -2, 1e-07], shape=[3], dtype=f32, device=cpu)");
  EXPECT_EQ(scalar_tensor(0.25).to_string(), "tensor(0.25, shape=[], dtype=f32, device=cpu)");
  EXPECT_EQ(from_vector<bool>({true, false}).to_string(), "tensor([1, 0], shape=[2], dtype=bool, device=cpu)");
  EXPECT_EQ(arange(8, 0, -1).reshape({2, 2, 2}).to_string(),
            "tensor([[[8, 7], [6, 5]], [[4, 3], [2, 1]]], shape=[2, 2, 2], dtype=i64, device=cpu)");
  EXPECT_EQ(zeros({0}).to_string(), "tensor([], shape=[0], dtype=f32, device=cpu)");
  EXPECT_EQ(zeros({2, 0}, kBFloat16).to_string(), "tensor([[], []], shape=[2, 0], dtype=bf16, device=cpu)");
  EXPECT_EQ(full({2}, 0.5, kFloat16).to_string(), "tensor([0.5, 0.5], shape=[2], dtype=f16, device=cpu)");
  EXPECT_EQ(ones({1}).requires_grad_().to_string(),
            "tensor([1], shape=[1], dtype=f32, device=cpu, requires_grad=true)");
  EXPECT_EQ(from_vector<int64_t>({1, 2, 3, 4}, {2, 2}).t().to_string(),
            "tensor([[1, 3], [2, 4]], shape=[2, 2], dtype=i64, device=cpu)");
  EXPECT_EQ(Tensor().to_string(), "tensor(undefined)");
  std::ostringstream os;
  os << scalar_tensor(3, kInt32);
  EXPECT_EQ(os.str(), "tensor(3, shape=[], dtype=i32, device=cpu)");
}

TEST(CopyTest, PrintingSummarisesLargeTensors) {
  EXPECT_EQ(arange(2000).to_string(), "tensor([0, 1, 2, ..., 1997, 1998, 1999], shape=[2000], dtype=i64, device=cpu)");
  EXPECT_EQ(arange(1000).to_string().find("..."), std::string::npos);   // up to 1000 elements: all of them
  EXPECT_NE(arange(1001).to_string().find("..., 998, 999, 1000]"), std::string::npos);
  // Every dim is cut to 3 + 3: rows too.
  const std::string s = arange(40 * 40).reshape({40, 40}).to_string();
  EXPECT_EQ(s, "tensor([[0, 1, 2, ..., 37, 38, 39], [40, 41, 42, ..., 77, 78, 79], [80, 81, 82, ..., 117, 118, 119], "
               "..., [1480, 1481, 1482, ..., 1517, 1518, 1519], [1520, 1521, 1522, ..., 1557, 1558, 1559], "
               "[1560, 1561, 1562, ..., 1597, 1598, 1599]], shape=[40, 40], dtype=i64, device=cpu)");
  // Short dims of a large tensor print whole.
  const std::string narrow = zeros({500, 3}).to_string();
  EXPECT_NE(narrow.find("[0, 0, 0], [0, 0, 0], [0, 0, 0], ..., [0, 0, 0]"), std::string::npos);
  EXPECT_LT(narrow.size(), 200u);
}

// Printing a large tensor reads and formats only the 3 + 3 edge items of
// each dim: it formatted every element first (GPT-2's [50257, 768] token
// embedding took 31 s and 2.4 GB to print 458 characters), and a broadcast
// view too large to copy could not be printed at all.
TEST(CopyTest, PrintingReadsOnlyTheEdgesOfLargeTensors) {
  const int64_t k2to61 = int64_t{1} << 61;   // 2^63 bytes of f32 if made dense
  EXPECT_EQ(zeros({1}).expand({k2to61}).to_string(),
            "tensor([0, 0, 0, ..., 0, 0, 0], shape=[2305843009213693952], dtype=f32, device=cpu)");
  EXPECT_EQ(arange(4).expand({int64_t{1} << 40, 4}).to_string(),
            "tensor([[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3], ..., [0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]], "
            "shape=[1099511627776, 4], dtype=i64, device=cpu)");
  // A strided view keeps its element order.
  EXPECT_EQ(arange(3000).reshape({2, 1500}).t().to_string(),
            "tensor([[0, 1500], [1, 1501], [2, 1502], ..., [1497, 2997], [1498, 2998], [1499, 2999]], "
            "shape=[1500, 2], dtype=i64, device=cpu)");
}

// Integers print exactly (through i64, not double): i64 values beyond 2^53
// printed rounded once.
TEST(CopyTest, PrintingLargeInt64IsExact) {
  const int64_t v = (int64_t{1} << 62) + 1;
  EXPECT_EQ(from_vector<int64_t>({v, -v}).to_string(),
            "tensor([4611686018427387905, -4611686018427387905], shape=[2], dtype=i64, device=cpu)");
}

// ---- creation ----

TEST(CopyTest, FromVectorInEveryDtype) {
  Tensor f = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(f.shape(), Shape({2, 3}));
  EXPECT_TRUE(f.is_contiguous());
  expect_near(f, {1, 2, 3, 4, 5, 6}, 0, 0);
  Tensor h = from_vector<Half>({Half(0.5f), Half(-1.0f), Half(65504.0f)});
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_EQ(h.shape(), Shape({3}));
  expect_near(h, {0.5, -1, 65504}, 0, 0);
  Tensor b = from_vector<BFloat16>({BFloat16(1.5f), BFloat16(-256.0f)}, {2, 1});
  EXPECT_EQ(b.dtype(), kBFloat16);
  expect_near(b, {1.5, -256}, 0, 0);
  Tensor i = from_vector<int32_t>({7, -8}, {1, 2});
  EXPECT_EQ(i.dtype(), kInt32);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{7, -8}));
  const int64_t huge = int64_t{1} << 62;
  Tensor l = from_vector<int64_t>({huge, -huge});
  EXPECT_EQ(l.dtype(), kInt64);
  EXPECT_EQ(l.to_vector<int64_t>(), (std::vector<int64_t>{huge, -huge}));
  Tensor z = from_vector<bool>({true, false, true}, {3, 1});
  EXPECT_EQ(z.dtype(), kBool);
  EXPECT_EQ(z.shape(), Shape({3, 1}));
  expect_near(z, {1, 0, 1}, 0, 0);
  Tensor e = from_vector<float>({});
  EXPECT_EQ(e.shape(), Shape({0}));
  Tensor s = from_vector<float>({2.5f}, {1, 1});
  EXPECT_EQ(s.shape(), Shape({1, 1}));
  // The host vector is copied: changing it afterwards changes nothing.
  std::vector<float> host = {1, 2};
  Tensor c = from_vector<float>(host);
  host[0] = 9;
  expect_near(c, {1, 2}, 0, 0);
  expect_error([] { (void)from_vector<int64_t>({1, 2, 3}, {2, 2}); }, kInvalid, {"from_vector", "[2, 2]", "i64", "3"});
  expect_error([] { (void)from_vector<bool>({true}, {2}); }, kInvalid, {"from_vector", "[2]"});
}

// BUG (src/ops/factory.cpp, from_vector): include/encore/tensor.h says the
// shape "defaults to 1-D of values.size()", but a single value without a
// shape gives a 0-d tensor: from_vector<float>({0.5f}).shape() is [] instead
// of [1]. Either the code or the header comment should change; enable
// this test if the header's rule is kept.
TEST(CopyTest, FromVectorOfOneValueDefaultsTo1D) {
  EXPECT_EQ(from_vector<float>({0.5f}).shape(), Shape({1}));
}

TEST(CopyTest, ArangeMatchesHostLoops) {
  struct Case { int64_t start, end, step; };
  const Case cases[] = {{0, 10, 3}, {10, 0, -3}, {-5, 5, 4}, {5, 0, 1}, {0, 5, -1}, {3, 3, 1},
                        {-2, -9, -2}, {0, 1, 100}, {7, -7, -7}};
  for (const Case& c : cases) {
    for (DType dt : {kInt64, kInt32, kFloat32, kFloat16, kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << c.start << ":" << c.end << ":" << c.step << " " << dtype_name(dt));
      std::vector<double> expected;
      for (int64_t x = c.start; c.step > 0 ? x < c.end : x > c.end; x += c.step) expected.push_back(x);
      Tensor t = arange(c.start, c.end, c.step, dt);
      EXPECT_EQ(t.dtype(), dt);
      EXPECT_EQ(t.shape(), Shape({static_cast<int64_t>(expected.size())}));
      expect_near(t, expected, 0, 0);
    }
  }
  EXPECT_EQ(arange(4).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
  expect_error([] { (void)arange(0, 5, 0); }, kInvalid, {"arange", "step", "0"});
  expect_error([] { (void)arange(0, 5, 1, kBool); }, kInvalid, {"arange", "bool"});
  // The dtype is refused before anything is allocated: 2^62 bools (4 EiB)
  // were first asked of the allocator (a fuzz finding under ASan).
  expect_error([] { (void)arange(0, int64_t{1} << 62, 1, kBool); }, kInvalid, {"arange", "bool"});
}

// Integer ranges past 2^53 (where a double no longer holds every integer)
// and up to INT64_MAX: each element is start + step * i exactly (it was
// computed in double: arange(INT64_MAX - 3, INT64_MAX) gave INT64_MAX three
// times, arange(2^53 + 1, 2^53 + 6) repeated values); floats round that
// integer once. An i32 range whose values leave i32 is refused (it
// saturated silently).
TEST(CopyTest, ArangeIsExactForLargeIntegers) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t k53 = int64_t{1} << 53;
  EXPECT_EQ(arange(kMax - 3, kMax).to_vector<int64_t>(), (std::vector<int64_t>{kMax - 3, kMax - 2, kMax - 1}));
  EXPECT_EQ(arange(k53 + 1, k53 + 6).to_vector<int64_t>(),
            (std::vector<int64_t>{k53 + 1, k53 + 2, k53 + 3, k53 + 4, k53 + 5}));
  EXPECT_EQ(arange(-kMax, kMax, kMax).to_vector<int64_t>(), (std::vector<int64_t>{-kMax, 0}));
  EXPECT_EQ(arange(kMax, 0, -(int64_t{1} << 62)).to_vector<int64_t>(),
            (std::vector<int64_t>{kMax, kMax - (int64_t{1} << 62)}));
  // f32: 2^24 + 1 rounds to even (2^24), 2^24 + 3 to 2^24 + 4, each from the exact integer.
  EXPECT_EQ(arange((1 << 24) + 1, (1 << 24) + 4, 1, kFloat32).to_vector<float>(),
            (std::vector<float>{16777216.0f, 16777218.0f, 16777220.0f}));
  EXPECT_EQ(arange(2147483645, 2147483648LL, 1, kInt32).to_vector<int32_t>(),
            (std::vector<int32_t>{2147483645, 2147483646, 2147483647}));
  expect_error([] { (void)arange(2147483646, 2147483649LL, 1, kInt32); }, kInvalid,
               {"arange", "2147483648", "i32"});
  expect_error([] { (void)arange(-2147483649LL, 0, 1000, kInt32); }, kInvalid, {"arange", "-2147483649", "i32"});
}

// ---- random ----

TEST(CopyTest, RandomDrawsAreReproducibleFromTheSeed) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Generator g1(123), g2(123), g3(124);
    EXPECT_EQ(values(rand({50}, dt, kCPU, &g1)), values(rand({50}, dt, kCPU, &g2)));
    EXPECT_EQ(values(randn({7, 3}, dt, kCPU, &g1)), values(randn({7, 3}, dt, kCPU, &g2)));
    EXPECT_NE(values(rand({50}, dt, kCPU, &g1)), values(rand({50}, dt, kCPU, &g3)));
  }
  // Counter-based: two draws of 4 are the first and second half of one draw of 8.
  Generator a(5), b(5);
  std::vector<double> first = values(rand({4}, kFloat32, kCPU, &a));
  std::vector<double> second = values(rand({2, 2}, kFloat32, kCPU, &a));
  EXPECT_EQ(a.offset(), 8u);
  EXPECT_EQ(a.seed(), 5u);
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(values(rand({8}, kFloat32, kCPU, &b)), first);
  // manual_seed restarts the stream.
  a.manual_seed(5);
  EXPECT_EQ(a.offset(), 0u);
  EXPECT_EQ(values(rand({4}, kFloat32, kCPU, &a)), std::vector<double>(first.begin(), first.begin() + 4));
  // f16/bf16 draws are the f32 draws rounded once.
  Generator c(9), d(9);
  std::vector<double> f32 = values(randn({100}, kFloat32, kCPU, &c));
  std::vector<double> f16 = values(randn({100}, kFloat16, kCPU, &d));
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(f16[i], static_cast<float>(Half(static_cast<float>(f32[i]))));
  // The default generator.
  manual_seed(77);
  std::vector<double> x = values(randn({10}));
  manual_seed(77);
  EXPECT_EQ(values(randn({10})), x);
  EXPECT_EQ(rand({0}).numel(), 0);
}

// BUG (src/ops/factory.cpp, Generator::manual_seed): the seed is written with
// backend::fill, whose value is a double, so seeds above 2^53 are rounded:
// Generator((1 << 60) + 1).seed() is 2^60, and seeds 2^60 and 2^60 + 1 draw
// the same numbers. Expected: every 64-bit seed kept exactly. Enable when fixed.
TEST(CopyTest, LargeSeedsAreKeptExactly) {
  const uint64_t seed = (uint64_t{1} << 60) + 1;
  Generator g(seed), h(seed - 1);
  EXPECT_EQ(g.seed(), seed);
  EXPECT_NE(values(rand({8}, kFloat32, kCPU, &g)), values(rand({8}, kFloat32, kCPU, &h)));
}

TEST(CopyTest, RandomDrawsHaveTheRightDistribution) {
  Generator g(2024);
  const std::vector<double> u = values(rand({20000}, kFloat32, kCPU, &g));
  double mean = 0, sq = 0;
  for (double x : u) {
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    mean += x;
    sq += x * x;
  }
  mean /= u.size();
  EXPECT_NEAR(mean, 0.5, 0.01);                     // sd of the mean: 0.29 / sqrt(20000) = 0.002
  EXPECT_NEAR(sq / u.size() - mean * mean, 1.0 / 12, 0.005);
  const std::vector<double> n = values(randn({20000}, kFloat32, kCPU, &g));
  mean = sq = 0;
  int beyond_2sd = 0;
  for (double x : n) {
    mean += x;
    sq += x * x;
    beyond_2sd += std::abs(x) > 2;
  }
  mean /= n.size();
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(sq / n.size() - mean * mean, 1.0, 0.05);
  EXPECT_NEAR(beyond_2sd / 20000.0, 0.0455, 0.008);
  expect_error([] { (void)rand({2}, kInt32); }, kInvalid, {"rand", "i32", "[2]"});
  expect_error([] { (void)randn({2}, kBool); }, kInvalid, {"randn", "bool", "[2]"});
}

// BUG (src/backends/cpu/copy.cpp, random_kernel): rand() promises [0, 1),
// but f16/bf16 draws are f32 draws rounded to nearest, so every f32 draw
// above 1 - 2^-9 (bf16; 1 - 2^-12 for f16) becomes exactly 1.0: about 1 in
// 512 bf16 draws. Expected: every value < 1 (e.g. round down, or draw only
// as many bits as the type holds). Enable when fixed.
TEST(CopyTest, LowPrecisionRandStaysBelowOne) {
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Generator g(1);
    int64_t at_or_above_one = 0;
    for (double x : values(rand({100000}, dt, kCPU, &g))) at_or_above_one += x >= 1.0;
    EXPECT_EQ(at_or_above_one, 0);
  }
}

// ---- in-place errors ----

TEST(CopyTest, InPlaceOnATensorThatRequiresGradIsRefused) {
  Tensor w = random_tensor({2, 3}, 1).requires_grad_();
  const std::vector<std::string> parts = {"requires grad", "NoGradGuard", "[2, 3]", "f32"};
  auto with_op = [&](const char* op) {
    std::vector<std::string> p = parts;
    p.push_back(op);
    return p;
  };
  const std::vector<double> before = values(w);
  expect_error([&] { w.fill_(1.0); }, kInvalid, with_op("fill_"));
  expect_error([&] { w.zero_(); }, kInvalid, with_op("fill_"));
  expect_error([&] { w.copy_(zeros({2, 3})); }, kInvalid, with_op("copy_"));
  expect_error([&] { w.add_(ones({3})); }, kInvalid, with_op("add_"));
  expect_error([&] { w.mul_(2.0); }, kInvalid, with_op("mul_"));
  EXPECT_EQ(values(w), before);   // nothing was written
  // Under NoGradGuard (an optimizer update) it is allowed.
  {
    NoGradGuard no_grad;
    w.add_(ones({2, 3}), -0.5);
  }
  std::vector<double> expected = before;
  for (double& x : expected) x -= 0.5;
  expect_near(w, expected, 1e-6, 0);
}

TEST(CopyTest, InPlaceIntoAnExpandedViewIsRefused) {
  Tensor e = zeros({3, 1}).expand({3, 4});
  expect_error([&] { e.fill_(1.0); }, kInvalid, {"fill_", "broadcast", "[3, 4]", "clone"});
  expect_error([&] { e.copy_(ones({3, 4})); }, kInvalid, {"copy_", "broadcast", "[3, 4]"});
  expect_error([&] { e.add_(ones({3, 4})); }, kInvalid, {"add_", "broadcast", "[3, 4]"});
  expect_error([&] { e.mul_(2.0); }, kInvalid, {"mul_", "broadcast", "[3, 4]"});
  // Expanding size-1 dims to size 1 writes each element once: allowed.
  Tensor ok = zeros({3, 1}).expand({1, 3, 1});
  ok.fill_(2.0);
  expect_near(ok, {2, 2, 2}, 0, 0);
}

TEST(CopyTest, CopyFromASourceThatRequiresGradIsRefused) {
  Tensor src = random_tensor({2}, 1).requires_grad_();
  Tensor dst = zeros({2});
  expect_error([&] { dst.copy_(src); }, kInvalid, {"copy_", "requires grad", "[2]", "detach"});
  expect_error([&] { dst.add_(src); }, kInvalid, {"add_", "requires grad", "[2]"});
  dst.copy_(src.detach());
  expect_near(dst, values(src), 0, 0);
  NoGradGuard no_grad;
  dst.zero_();
  dst.copy_(src);
  expect_near(dst, values(src), 0, 0);
}

TEST(CopyTest, InPlaceShapeErrors) {
  Tensor a = zeros({2, 3});
  expect_error([&] { a.copy_(ones({4})); }, kInvalid, {"copy_", "[2, 3]", "[4]"});
  expect_error([&] { zeros({3}).copy_(ones({2, 3})); }, kInvalid, {"copy_", "[2, 3]", "[3]", "f32"});
  expect_error([&] { a.add_(ones({2, 1, 3})); }, kInvalid, {"add_", "[2, 1, 3]", "[2, 3]"});
  expect_error([&] { a.add_(ones({3}, kFloat16)); }, kInvalid, {"add_", "f32", "f16", "[3]"});
  expect_error([&] { a.copy_(Tensor()); }, kInvalid, {"copy_", "source", "undefined"});
  expect_error([&] { Tensor().fill_(1.0); }, kInvalid, {"fill_", "undefined"});
  expect_error([&] { zeros({2}, kBool).add_(ones({2}, kBool)); }, kInvalid, {"add", "bool"});
}

// BUG (src/ops/copy.cpp, begin_inplace and its callers): the version counter
// is bumped before add_ checks the dtypes (and before the kernel dispatch
// rejects bool for add_/mul_), so a rejected in-place op still counts as a
// write: a tensor saved for backward then fails the "modified in place"
// check although nothing changed. Expected: version unchanged after a throw.
// Enable when fixed.
TEST(CopyTest, RejectedInPlaceOpDoesNotBumpTheVersion) {
  Tensor a = zeros({2, 3});
  const uint32_t v = a.version();
  EXPECT_FALSE(status_of([&] { a.add_(ones({3}, kFloat16)); }).ok());
  EXPECT_EQ(a.version(), v);
  Tensor b = zeros({2}, kBool);
  const uint32_t vb = b.version();
  EXPECT_FALSE(status_of([&] { b.mul_(2.0); }).ok());
  EXPECT_EQ(b.version(), vb);
}

// ---- backward ----

TEST(CopyTest, CloneAndToBackward) {
  expect_gradients_match([](const auto& in) { return in[0].clone() * 3.0; }, {random_tensor({2, 3}, 1)});
  expect_gradients_match([](const auto& in) { return in[0].t().clone(); }, {random_tensor({2, 3}, 2)});
  expect_gradients_match([](const auto& in) { return in[0].contiguous(); }, {random_tensor({3}, 3)});
  // Inputs and steps on a 1/16 grid with |x| < 4: x and x +- eps are exact in
  // f16 and bf16, so the round trip is exactly the identity there. The
  // analytic gradient is w rounded to the low dtype (2^-8 relative for bf16).
  Tensor grid = from_vector<float>({0.5f, -1.25f, 2.0f, 0.75f, -3.5f, 1.0625f}, {2, 3});
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    expect_gradients_match([dt](const auto& in) { return in[0].to(dt).to(kFloat32) * 2.0; }, {grid}, 0.0625);
    expect_gradients_match([dt](const auto& in) { return in[0].t().to(dt).to(kFloat32); }, {grid}, 0.0625);
  }
  Tensor x = random_tensor({3}, 6).requires_grad_();
  Tensor h = x.to(kBFloat16);
  EXPECT_TRUE(h.requires_grad());
  h.backward(ones({3}, kBFloat16));
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  expect_near(x.grad(), {1, 1, 1}, 0, 0);
  expect_error([&] { (void)x.to(kInt32); }, kInvalid, {"to", "[3]", "f32", "i32", "gradient"});
  NoGradGuard no_grad;
  EXPECT_EQ(x.to(kInt64).dtype(), kInt64);
}

// NOTE [ Version counter ]: a tensor saved for backward and then modified in
// place (under NoGradGuard, through any view) makes backward refuse to run.
TEST(CopyTest, BackwardRefusesTensorsModifiedInPlace) {
  Tensor x = random_tensor({3}, 1).requires_grad_();
  Tensor w = random_tensor({3}, 2).requires_grad_();
  Tensor y = x * w;
  {
    NoGradGuard no_grad;
    w.mul_(2.0);
  }
  expect_error([&] { y.backward(ones({3})); }, absl::StatusCode::kFailedPrecondition,
               {"mul", "modified in place", "[3]"});

  // Through a view of the saved tensor.
  Tensor a = random_tensor({2, 2}, 3).requires_grad_();
  Tensor b = random_tensor({2, 2}, 4);
  Tensor z = 1.0 / (a * 1.0);   // rdiv saves its input and output
  Tensor q = a * b;             // mul saves b
  {
    NoGradGuard no_grad;
    b.t().select(0, 1).fill_(0.0);
  }
  expect_error([&] { q.backward(ones({2, 2})); }, absl::StatusCode::kFailedPrecondition, {"modified in place"});
  // Unrelated writes do not matter.
  {
    NoGradGuard no_grad;
    b.zero_();
  }
  z.backward(ones({2, 2}));
  ASSERT_TRUE(a.grad().defined());
  std::vector<double> expected = values(a);
  for (double& v : expected) v = -1.0 / (v * v);
  expect_near(a.grad(), expected, 1e-5, 1e-4);
}

// NOTE [ Overlapping in-place writes ]: in-place ops whose source overlaps the
// output are refused (a[1:] += a[:-1] gave [0, 1, 3, 6]); the same view and
// disjoint views of one storage work.
TEST(CopyTest, InPlaceWritesFromAnOverlappingSourceAreRefused) {
  Tensor a = from_vector<float>({0, 1, 2, 3});
  testing::expect_error([&] { a.slice(0, 1, 4).add_(a.slice(0, 0, 3)); }, absl::StatusCode::kInvalidArgument,
                        {"add_", "overlaps the output", "clone()"});
  testing::expect_error([&] { a.slice(0, 1, 4).copy_(a.slice(0, 0, 3)); }, absl::StatusCode::kInvalidArgument,
                        {"copy_", "overlaps the output"});
  testing::expect_error([&] { a.slice(0, 0, 4, 2).copy_(a.slice(0, 1, 4, 2)); }, absl::StatusCode::kInvalidArgument,
                        {"copy_", "overlaps"});   // interleaved: judged on byte ranges
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>({0, 1, 2, 3}));   // refused writes change nothing
  a.slice(0, 1, 4).add_(a.slice(0, 0, 3).clone());                     // as advised
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>({0, 1, 3, 5}));
  a.slice(0, 0, 2).copy_(a.slice(0, 2, 4));                            // disjoint views of one storage
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>({3, 5, 3, 5}));
  a.add_(a);                                                           // the same view: elementwise
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>({6, 10, 6, 10}));
}

}  // namespace
}  // namespace encore
