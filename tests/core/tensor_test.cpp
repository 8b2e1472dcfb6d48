// Tensor metadata, creation, views' geometry and host access.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "encore/encore.h"
#include "src/core/tensor_internal.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::expect_near;

TEST(TensorTest, ZerosHasContiguousGeometry) {
  Tensor t = zeros({2, 3, 4});
  EXPECT_EQ(t.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(t.strides(), Shape({12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_TRUE(t.is_contiguous());
  expect_near(t, std::vector<double>(24, 0.0));
}

TEST(TensorTest, FullOnesAndArangeInEveryDtype) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kInt32, kInt64}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    expect_near(full({3}, 2.5 * (is_floating(dt) ? 1 : 0) + 2, dt), std::vector<double>(3, is_floating(dt) ? 4.5 : 2));
    expect_near(ones({2, 2}, dt), std::vector<double>(4, 1.0));
    expect_near(arange(1, 7, 2, dt), {1, 3, 5});
  }
  expect_near(ones({2}, kBool), {1, 1});
  EXPECT_EQ(arange(5, 0, -2).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
}

// arange takes integers: a float argument used to be truncated silently
// (arange(0.5, 3.5) gave [0, 1, 2], arange(0, 1, 0.1) refused "step 0"),
// so such calls no longer compile; integer calls of every form still do.
template <typename... Args>
constexpr bool arange_compiles = requires(Args... args) { arange(args...); };
static_assert(arange_compiles<int, int> && arange_compiles<int64_t, int64_t, int64_t> && arange_compiles<int>);
static_assert(arange_compiles<int, int, int, DType, Device> && arange_compiles<long, unsigned>);
static_assert(!arange_compiles<double> && !arange_compiles<double, int> && !arange_compiles<int, float>);
static_assert(!arange_compiles<int, int, double> && !arange_compiles<int, int, double, DType>);

TEST(TensorTest, FromVectorItemAndToVector) {
  Tensor t = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_FLOAT_EQ(t.slice(1, 2, 3).slice(0, 1, 2).item<float>(), 6.0f);
  EXPECT_TRUE(from_vector<bool>({true, false}).to_vector<int32_t>() == (std::vector<int32_t>{1, 0}));
  expect_error([&] { (void)t.item<float>(); }, absl::StatusCode::kInvalidArgument, {"item", "[2, 3]", "6"});
  expect_error([] { (void)from_vector<float>({1, 2, 3}, {2, 2}); }, absl::StatusCode::kInvalidArgument,
               {"from_vector", "[2, 2]", "f32"});
}

TEST(TensorTest, NegativeShapeIsRejected) {
  expect_error([] { (void)zeros({2, -1}); }, absl::StatusCode::kInvalidArgument, {"[2, -1]"});
}

// A CUDA ordinal is stored in an int8_t: one outside [0, 127] used to wrap
// (cuda(256) named cuda:0, cuda(-1) a device -1).
TEST(DeviceTest, CudaIndicesOutsideTheStoredRangeAreRefused) {
  EXPECT_EQ(Device::cuda(127).index, 127);
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  for (int index : {128, 256, -1}) {
    expect_error([&] { (void)Device::cuda(index); }, absl::StatusCode::kInvalidArgument,
                 {"Device::cuda", std::to_string(index), "[0, 127]"});
  }
}

TEST(TensorTest, PrintingShowsValuesShapeAndDtype) {
  Tensor t = from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(t.to_string(), "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=i32, device=cpu)");
  Tensor f = from_vector<float>({0.5f});
  EXPECT_EQ(f.reshape({}).to_string(), "tensor(0.5, shape=[], dtype=f32, device=cpu)");
  std::string big = zeros({2000}).to_string();
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_LT(big.size(), 200u);
}

TEST(TensorTest, RandomDrawsAreSeededAndAdvanceTheOffset) {
  Generator g(42);
  Tensor a = randn({1000}, kFloat32, kCPU, &g);
  EXPECT_EQ(g.offset(), 1000u);
  Tensor b = randn({1000}, kFloat32, kCPU, &g);
  g.manual_seed(42);
  Tensor c = randn({1000}, kFloat32, kCPU, &g);
  EXPECT_EQ(a.to_vector<float>(), c.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
  double mean = 0, sq = 0;
  for (float v : a.to_vector<float>()) { mean += v; sq += v * v; }
  mean /= 1000;
  EXPECT_NEAR(mean, 0.0, 0.15);
  EXPECT_NEAR(sq / 1000 - mean * mean, 1.0, 0.15);
  for (float v : rand({1000}, kFloat32, kCPU, &g).to_vector<float>()) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 1.0f);
  }
}

// Sizes whose element or byte count does not fit in int64 are refused naming
// the op and the shape (issue #17: they wrapped to tiny or zero allocations
// that kernels then wrote past).
TEST(TensorTest, ShapesWhoseSizeOverflowsAreRefused) {
  constexpr int64_t k2to32 = int64_t{1} << 32, k2to61 = int64_t{1} << 61, k2to62 = int64_t{1} << 62;
  expect_error([&] { (void)empty({k2to32, k2to32}); }, absl::StatusCode::kInvalidArgument,
               {"empty", "[4294967296, 4294967296]", "2^63 elements"});
  expect_error([&] { (void)ones({k2to61}); }, absl::StatusCode::kResourceExhausted, {"ones", "2^63 bytes"});
  expect_error([&] { (void)zeros({k2to62}); }, absl::StatusCode::kResourceExhausted, {"zeros", "2^63 bytes"});
  expect_error([&] { (void)arange(0, k2to62); }, absl::StatusCode::kResourceExhausted, {"arange", "2^63 bytes"});
  expect_error([&] { (void)arange(INT64_MIN, INT64_MAX); }, absl::StatusCode::kInvalidArgument,
               {"arange", "2^63 elements"});
  const Tensor one = zeros({1, 1});
  expect_error([&] { (void)one.expand({k2to32, k2to32}); }, absl::StatusCode::kInvalidArgument,
               {"expand", "2^63 elements"});
  expect_error([&] { (void)zeros({0}).view({-1, k2to32, k2to32}); }, absl::StatusCode::kInvalidArgument,
               {"view", "2^63 elements"});
  EXPECT_EQ(zeros({0, k2to62}).numel(), 0);   // an empty tensor of any width is fine
}

// empty() refuses more than kMaxDims dims; views are held to the same limit
// (they used to pass, leaving the refusal to whichever kernel met them).
TEST(TensorTest, ViewsWithMoreThanMaxDimsAreRefused) {
  const Tensor full_rank = zeros(Shape(kMaxDims, 1));
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(full_rank.squeeze(0).unsqueeze(0).dim(), kMaxDims);
  expect_error([&] { (void)zeros(Shape(kMaxDims + 1, 1)); }, kInvalid, {"zeros", "more than 8 dims"});
  expect_error([&] { (void)full_rank.unsqueeze(0); }, kInvalid, {"unsqueeze", "more than 8 dims"});
  expect_error([&] { (void)zeros({1}).view(Shape(kMaxDims + 1, 1)); }, kInvalid, {"view", "more than 8 dims"});
  expect_error([&] { (void)full_rank.reshape(Shape(kMaxDims + 1, 1)); }, kInvalid, {"reshape", "more than 8 dims"});
  expect_error([&] { (void)zeros({1}).expand(Shape(kMaxDims + 1, 1)); }, kInvalid, {"expand", "more than 8 dims"});
}

// NOTE [ Views stay inside their storage ]: make_view, which every view op
// goes through, refuses geometry that reaches outside the storage or whose
// offsets overflow, naming the op and the geometry (issue #17).
TEST(TensorTest, ViewsReachingOutsideTheirStorageAreRefused) {
  const Tensor base = zeros({4});   // 4 f32 elements
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(make_view("as_strided", base, {2}, {3}, 0).shape(), Shape({2}));   // elements 0 and 3
  EXPECT_EQ(make_view("as_strided", base, {2, 2}, {0, 1}, 2).numel(), 4);      // a broadcast of 2, 3
  EXPECT_EQ(make_view("as_strided", base, {0, 3}, {INT64_MAX, 1}, 9).numel(), 0);   // empty: reaches nothing
  expect_error([&] { (void)make_view("as_strided", base, {5}, {1}, 0); }, kInvalid,
               {"as_strided", "shape [5]", "strides [1]", "offset 0", "elements [0, 4]", "4 f32 elements"});
  expect_error([&] { (void)make_view("as_strided", base, {2}, {3}, 1); }, kInvalid, {"as_strided", "[1, 4]"});
  expect_error([&] { (void)make_view("as_strided", base, {2}, {-1}, 0); }, kInvalid, {"as_strided", "[-1, 0]"});
  expect_error([&] { (void)make_view("as_strided", base, {1}, {1}, -1); }, kInvalid, {"as_strided", "offset -1"});
  expect_error([&] { (void)make_view("as_strided", base, {3}, {INT64_MAX}, 0); }, kInvalid,
               {"as_strided", "shape [3]", "overflow int64"});
  expect_error([&] { (void)make_view("as_strided", base, {2, 2}, {INT64_MAX, 1}, 1); }, kInvalid,
               {"as_strided", "overflow int64"});
  expect_error([&] { (void)make_view("as_strided", base, {0, 3}, {1, INT64_MAX}, 1); }, kInvalid,
               {"as_strided", "overflow int64"});   // even empty, offsets are computed
  // An empty view keeps its base's offset, whatever its op computed.
  EXPECT_EQ(make_view("as_strided", base, {0, 2}, {1, INT64_MAX}, 3).storage_offset(), 0);
  EXPECT_EQ(make_view("as_strided", base.slice(0, 2, 4), {0}, {1}, 7).storage_offset(), 2);
}

// A default-constructed Tensor, or grad() before backward() reached the
// leaf, holds nothing: asking it for its metadata or data throws naming the
// accessor instead of dereferencing a null pointer (it was a segfault).
TEST(TensorTest, UndefinedTensorsRefuseMetadataAndDataAccess) {
  const Tensor undefined;
  const Tensor leaf = zeros({2}).requires_grad_();
  ASSERT_FALSE(leaf.grad().defined());   // before any backward()
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  for (const Tensor& t : {undefined, leaf.grad()}) {
    EXPECT_FALSE(t.defined());
    EXPECT_FALSE(t.requires_grad());   // a question with an answer: nothing requires grad
    expect_error([&] { (void)t.shape(); }, kInvalid, {"shape()", "undefined tensor"});
    expect_error([&] { (void)t.strides(); }, kInvalid, {"strides()", "undefined tensor"});
    expect_error([&] { (void)t.dim(); }, kInvalid, {"shape()", "undefined tensor"});
    expect_error([&] { (void)t.size(0); }, kInvalid, {"shape()", "undefined tensor"});
    expect_error([&] { (void)t.numel(); }, kInvalid, {"numel()", "undefined tensor"});
    expect_error([&] { (void)t.dtype(); }, kInvalid, {"dtype()", "undefined tensor"});
    expect_error([&] { (void)t.device(); }, kInvalid, {"device()", "undefined tensor"});
    expect_error([&] { (void)t.storage_offset(); }, kInvalid, {"storage_offset()", "undefined tensor"});
    expect_error([&] { (void)t.is_contiguous(); }, kInvalid, {"is_contiguous()", "undefined tensor"});
    expect_error([&] { (void)t.storage(); }, kInvalid, {"storage()", "undefined tensor"});
    expect_error([&] { (void)t.version(); }, kInvalid, {"storage()", "undefined tensor"});
    expect_error([&] { (void)t.data_ptr(); }, kInvalid, {"data_ptr()", "undefined tensor"});
    expect_error([&] { (void)t.data<float>(); }, kInvalid, {"dtype()", "undefined tensor"});
    expect_error([&] { (void)t.is_leaf(); }, kInvalid, {"is_leaf()", "undefined tensor"});
    expect_error([&] { (void)t.grad(); }, kInvalid, {"grad()", "undefined tensor"});
    expect_error([&] { (void)t.grad_fn(); }, kInvalid, {"grad_fn()", "undefined tensor"});
    expect_error([&] { (void)t.detach(); }, kInvalid, {"detach()", "undefined tensor"});
    expect_error([&] { Tensor u = t; u.requires_grad_(); }, kInvalid, {"requires_grad_()", "undefined tensor"});
    expect_error([&] { Tensor u = t; u.set_grad(Tensor()); }, kInvalid, {"set_grad()", "undefined tensor"});
  }
  EXPECT_EQ(Tensor().to_string(), "tensor(undefined)");   // printing stays allowed
}

// NOTE [ Objects that outlive their thread's cache ]: tensors freed after the
// thread's object caches are gone (a thread_local made before them, a static
// freed at exit) go to the heap instead of into a destroyed cache (issue #17:
// heap-use-after-free under ASan, "free(): unaligned chunk" aborts).
TEST(TensorTest, TensorsOutlivingTheirThreadsObjectCachesAreFreedSafely) {
  std::thread([] {
    thread_local Tensor held;   // made before this thread's object caches ...
    held = ones({4}).reshape({2, 2});   // ... which its first allocations create
    EXPECT_EQ(held.to_vector<float>(), std::vector<float>(4, 1.0f));
  }).join();   // at thread exit the caches go first, then `held`
  // A static freed after main's thread_locals, at exit: the test binary must exit cleanly.
  static const Tensor kept_until_exit = full({16}, 3.0);
  EXPECT_EQ(kept_until_exit.to_vector<float>(), std::vector<float>(16, 3.0f));
}

// item<T>() of an integer T refuses a value T cannot hold, as libtorch's
// does, instead of wrapping it (2^40 as i32 was 0) or saturating it.
TEST(TensorTest, ItemRefusesAValueItsTypeCannotHold) {
  const int64_t big = int64_t{1} << 40;
  expect_error([&] { (void)from_vector<int64_t>({big}).item<int32_t>(); }, absl::StatusCode::kInvalidArgument,
               {"item", "1099511627776", "i64", "i32"});
  expect_error([] { (void)from_vector<float>({1e10f}).item<int32_t>(); }, absl::StatusCode::kInvalidArgument,
               {"item", "f32", "i32"});
  expect_error([] { (void)from_vector<float>({1e19f}).item<int64_t>(); }, absl::StatusCode::kInvalidArgument,
               {"item", "f32", "i64"});
  expect_error([] { (void)from_vector<float>({std::nanf("")}).item<int64_t>(); },
               absl::StatusCode::kInvalidArgument, {"item", "nan"});
  expect_error([] { (void)full({1}, 3e38, kBFloat16).item<int64_t>(); }, absl::StatusCode::kInvalidArgument,
               {"item", "bf16", "i64"});
  EXPECT_EQ(full({1}, 65504.0, kFloat16).item<int32_t>(), 65504);
  // What fits is read, floats truncated toward zero.
  EXPECT_EQ(from_vector<int64_t>({-2147483648LL}).item<int32_t>(), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(from_vector<int64_t>({2147483647LL}).item<int32_t>(), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(from_vector<float>({-3.75f}).item<int32_t>(), -3);
  EXPECT_EQ(from_vector<float>({2147483520.0f}).item<int32_t>(), 2147483520);
  EXPECT_EQ(from_vector<float>({-9.2233720e18f}).item<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(from_vector<int32_t>({-7}).item<int64_t>(), -7);
}

TEST(TensorTest, ExchangeMemoryMovesTheBytesAndKeepsIdentities) {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {4});
  Tensor b = from_vector<float>({5, 6, 7, 8}, {4});
  Tensor a_view = a.slice(0, 1, 3);   // a view shares a's Storage object
  const uint64_t a_id = a.storage()->id(), b_id = b.storage()->id();
  void* const a_data = a.storage()->data();
  b.add_(ones({4}));   // bumps b's version
  const uint32_t a_version = a.version(), b_version = b.version();
  a.storage()->exchange_memory(*b.storage());
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{6, 7, 8, 9}));
  EXPECT_EQ(a_view.to_vector<float>(), (std::vector<float>{7, 8}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(b.storage()->data(), a_data);
  EXPECT_EQ(a.storage()->id(), a_id);
  EXPECT_EQ(b.storage()->id(), b_id);
  EXPECT_EQ(a.version(), a_version);
  EXPECT_EQ(b.version(), b_version);
}

TEST(TensorTest, ExchangeMemoryRefusesStoragesOfAnotherSize) {
  Tensor a = zeros({4}), b = zeros({5});
  expect_error([&] { a.storage()->exchange_memory(*b.storage()); }, absl::StatusCode::kInvalidArgument,
               {"exchange_memory", "16 bytes", "20 bytes", "need one size and device"});
  EXPECT_EQ(a.numel(), 4);
}

}  // namespace
}  // namespace encore
