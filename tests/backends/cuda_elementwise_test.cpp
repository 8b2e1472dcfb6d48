// The CUDA elementwise kernels (binary, unary, select, copy families) against
// the CPU backend: every op, every dtype it supports, contiguous, strided,
// broadcast and in-place operands, sizes around the block size (1, 7, 255,
// 256, 257) and one large size (100k: many blocks of the grid-stride loop).
// Kernels are called directly (backend::unary and so on, on tensors of each
// device), so a test names exactly one kernel. Tolerances: NOTE [ CUDA
// tolerances ] in cuda_test_util.h; ops with no libm call are compared bit
// for bit.
// Skips without a GPU (fails instead with ENCORE_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "src/backends/kernels.h"
#include "tests/backends/cuda_test_util.h"

namespace encore {
namespace {

using backend::BinaryOp;
using backend::RandomKind;
using backend::ScalarOp;
using backend::UnaryOp;

const Device kGpu = Device::cuda(0);
const std::vector<int64_t> kSizes = {1, 7, 255, 256, 257, 100000};
const std::vector<DType> kFloatTypes = {kFloat32, kFloat16, kBFloat16};
const std::vector<DType> kNumericTypes = {kFloat32, kFloat16, kBFloat16, kInt32, kInt64};
const std::vector<DType> kAllTypes = {kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kBool};

// ---- helpers ----

struct Tol { double atol = 0, rtol = 0; };   // {0, 0}: bit for bit (NaN equals NaN)

// Libm-based results: a few f32 ulps, one rounding step of f16/bf16. The
// f32 atol also covers the CPU's own tanh approximation inside GELU (error
// < 4e-7, scaled by |x| and |g| up to ~4 in these tests).
Tol libm_tol(DType t) {
  if (t == kFloat16) return {1e-3, 2e-3};
  if (t == kBFloat16) return {1e-2, 1e-2};
  return {4e-6, 1e-5};
}

// Expects actual == expected elementwise within tol (equal infinities and NaNs
// pass); reports at most 5 mismatches.
void expect_close(const Tensor& actual, const Tensor& expected, Tol tol) {
  ASSERT_EQ(actual.shape(), expected.shape());
  ASSERT_EQ(actual.dtype(), expected.dtype());
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 5; ++i) {
    if (a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i]))) continue;
    if (std::abs(a[i] - e[i]) <= tol.atol + tol.rtol * std::abs(e[i])) continue;
    ADD_FAILURE() << "element " << i << " of " << shape_str(actual.shape()) << " " << dtype_name(actual.dtype())
                  << ": cuda " << a[i] << ", cpu " << e[i];
    ++bad;
  }
}

// One operand of a kernel: a base tensor made on the host and the view of it
// that the kernel receives (strided, broadcast, ...; null: the base itself).
struct Operand {
  Tensor base;
  std::function<Tensor(const Tensor&)> view;
};

using Kernel = std::function<void(const std::vector<Tensor>&)>;

// Runs `kernel` on CPU copies of the operands and on CUDA copies, then expects
// every base to agree: outputs written alike, inputs and untouched elements kept.
void expect_backends_agree(const Kernel& kernel, const std::vector<Operand>& operands, Tol tol = {}) {
  std::vector<Tensor> cpu_base, gpu_base, cpu_args, gpu_args;
  for (const Operand& o : operands) {
    cpu_base.push_back(o.base.clone());
    gpu_base.push_back(o.base.to(kGpu));
    cpu_args.push_back(o.view ? o.view(cpu_base.back()) : cpu_base.back());
    gpu_args.push_back(o.view ? o.view(gpu_base.back()) : gpu_base.back());
  }
  kernel(cpu_args);
  kernel(gpu_args);
  for (size_t i = 0; i < operands.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "operand " << i);
    expect_close(gpu_base[i].to(kCPU), cpu_base[i], tol);
  }
}

Tensor transposed(const Tensor& t) { return t.transpose(0, 1); }
Tensor every_other_row(const Tensor& t) { return t.slice(0, 0, t.size(0), 2); }

// Seeded values of `dtype`: N(0, scale) for floats (scale 0 picks 1), integers
// in [-100, 100] (never 0 with nonzero), 0/1 for bool.
Tensor values_of(Shape shape, DType dtype, uint64_t seed, bool nonzero = false) {
  if (is_floating(dtype)) return testing::random_tensor(std::move(shape), seed, dtype);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(numel_of(shape));
  for (int64_t& x : v) {
    x = static_cast<int64_t>(rng() % 201) - 100;
    if (dtype == kBool) x = x > 0;
    if (nonzero && x == 0) x = 7;
  }
  return from_vector<int64_t>(v, std::move(shape)).to(dtype);
}

// Seeded floats in [0.1, 3.1): inside the domain of log, sqrt, rsqrt and pow.
Tensor positive(Shape shape, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 3.1f);
  std::vector<float> v(numel_of(shape));
  for (float& x : v) x = u(rng);
  return from_vector<float>(v, std::move(shape)).to(dtype);
}

std::string name_of(DType t, int64_t n) { return std::string(dtype_name(t)) + " n=" + std::to_string(n); }

// ---- binary ----

constexpr BinaryOp kBinaryOps[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv};
constexpr ScalarOp kScalarOps[] = {ScalarOp::kAdd, ScalarOp::kMul, ScalarOp::kRsub, ScalarOp::kRdiv, ScalarOp::kDiv};

Kernel binary_kernel(BinaryOp op, double alpha) {
  return [=](const std::vector<Tensor>& t) { backend::binary(op, t[0], t[1], t[2], alpha); };
}

double alpha_for(DType t) { return is_floating(t) ? 0.75 : 3.0; }

TEST(CudaBinaryTest, EveryOpDtypeAndSizeIsExact) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (BinaryOp op : kBinaryOps) {
    for (DType t : kNumericTypes) {
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " " << name_of(t, n));
        expect_backends_agree(binary_kernel(op, alpha_for(t)),
                              {{zeros({n}, t)}, {values_of({n}, t, 1)}, {values_of({n}, t, 2, /*nonzero=*/true)}});
      }
    }
  }
}

TEST(CudaBinaryTest, BroadcastAndStridedOperands) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (BinaryOp op : kBinaryOps) {
    for (DType t : {kFloat32, kBFloat16, kInt64}) {
      SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " " << dtype_name(t));
      const Kernel k = binary_kernel(op, alpha_for(t));
      // [37, 1] with [1, 45] into [37, 45].
      expect_backends_agree(k, {{zeros({37, 45}, t)}, {values_of({37, 1}, t, 3)}, {values_of({45}, t, 4, true)}});
      // Transposed a, b a row broadcast, out transposed too.
      expect_backends_agree(k, {{full({45, 37}, 9, t), transposed},
                                {values_of({45, 37}, t, 5), transposed},
                                {values_of({1, 45}, t, 6, true)}});
      // Three dims after merging: every other row of a and of out.
      expect_backends_agree(k, {{full({8, 10, 6}, 9, t), every_other_row},
                                {values_of({8, 10, 6}, t, 7), every_other_row},
                                {values_of({4, 1, 6}, t, 8, true)}});
    }
  }
}

TEST(CudaBinaryTest, InPlaceOutputAliasesA) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (BinaryOp op : kBinaryOps) {
    for (DType t : {kFloat32, kFloat16, kInt32}) {
      for (int64_t n : {int64_t{257}, int64_t{100000}}) {
        SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " " << name_of(t, n));
        const double alpha = alpha_for(t);
        expect_backends_agree(
            [=](const std::vector<Tensor>& x) { backend::binary(op, x[0], x[0], x[1], alpha); },
            {{values_of({n}, t, 9)}, {values_of({n}, t, 10, true)}});
      }
      // a += row, a transposed.
      expect_backends_agree(
          [=](const std::vector<Tensor>& x) { backend::binary(op, x[0], x[0], x[1], 1.0); },
          {{values_of({30, 20}, t, 11), transposed}, {values_of({30}, t, 12, true)}});
    }
  }
}

TEST(CudaBinaryTest, ScalarOpsEveryDtypeSizeAndLayout) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (ScalarOp op : kScalarOps) {
    for (DType t : kNumericTypes) {
      const double s = is_floating(t) ? -1.7 : 5.0;
      const Kernel k = [=](const std::vector<Tensor>& x) { backend::binary_scalar(op, x[0], x[1], s); };
      const Kernel in_place = [=](const std::vector<Tensor>& x) {
        backend::binary_scalar(op, x[0], x[0], s);
      };
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " " << name_of(t, n));
        expect_backends_agree(k, {{zeros({n}, t)}, {values_of({n}, t, 13, /*nonzero=*/true)}});
      }
      SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " " << dtype_name(t) << " strided");
      expect_backends_agree(k, {{zeros({37, 45}, t)}, {values_of({45, 37}, t, 14, true), transposed}});
      expect_backends_agree(in_place, {{values_of({45, 37}, t, 15, true), transposed}});
    }
  }
}

// ---- unary ----

constexpr int kUnaryOpCount = static_cast<int>(UnaryOp::kClamp) + 1;

bool needs_positive(UnaryOp op) {
  return op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt || op == UnaryOp::kPow;
}

bool exact_op(UnaryOp op) {   // no libm call: CPU and CUDA agree bit for bit
  return op == UnaryOp::kAbs || op == UnaryOp::kRelu || op == UnaryOp::kClamp || op == UnaryOp::kSqrt ||
         op == UnaryOp::kRsqrt;
}

Tensor unary_input(UnaryOp op, Shape shape, DType t, uint64_t seed) {
  return needs_positive(op) ? positive(std::move(shape), t, seed) : values_of(std::move(shape), t, seed);
}

void params_for(UnaryOp op, double& p0, double& p1) {
  p0 = op == UnaryOp::kPow ? 1.5 : (op == UnaryOp::kClamp ? -0.5 : 0.0);
  p1 = op == UnaryOp::kClamp ? 0.7 : 0.0;
}

TEST(CudaUnaryTest, EveryFloatOpDtypeAndSize) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (int k = 0; k < kUnaryOpCount; ++k) {
    const UnaryOp op = static_cast<UnaryOp>(k);
    double p0, p1;
    params_for(op, p0, p1);
    const Kernel kernel = [=](const std::vector<Tensor>& x) { backend::unary(op, x[0], x[1], p0, p1); };
    for (DType t : kFloatTypes) {
      const Tol tol = exact_op(op) ? Tol{} : libm_tol(t);
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << "op " << k << " " << name_of(t, n));
        expect_backends_agree(kernel, {{zeros({n}, t)}, {unary_input(op, {n}, t, 20 + k)}}, tol);
      }
      SCOPED_TRACE(::testing::Message() << "op " << k << " " << dtype_name(t) << " strided input");
      expect_backends_agree(kernel, {{zeros({37, 45}, t)}, {unary_input(op, {45, 37}, t, 40 + k), transposed}}, tol);
      expect_backends_agree(kernel, {{zeros({4, 6}, t)}, {unary_input(op, {8, 6}, t, 60 + k), every_other_row}},
                            tol);
    }
  }
  // pow with p0 == 2 takes the x * x path.
  expect_backends_agree(
      [](const std::vector<Tensor>& x) { backend::unary(UnaryOp::kPow, x[0], x[1], 2.0, 0.0); },
      {{zeros({257})}, {values_of({257}, kFloat32, 80)}});
}

TEST(CudaUnaryTest, IntegerAbsReluClampAreExact) {
  ENCORE_SKIP_WITHOUT_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case { UnaryOp op; double p0, p1; };
  const Case cases[] = {{UnaryOp::kAbs, 0, 0},      {UnaryOp::kRelu, 0, 0},       {UnaryOp::kClamp, -3, 5},
                        {UnaryOp::kClamp, -inf, 2}, {UnaryOp::kClamp, -1e30, 1e30}};
  for (DType t : {kInt32, kInt64}) {
    for (const Case& c : cases) {
      const Kernel kernel = [=](const std::vector<Tensor>& x) {
        backend::unary(c.op, x[0], x[1], c.p0, c.p1);
      };
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(c.op) << " " << name_of(t, n));
        expect_backends_agree(kernel, {{zeros({n}, t)}, {values_of({n}, t, 90)}});
      }
      expect_backends_agree(kernel, {{zeros({37, 45}, t)}, {values_of({45, 37}, t, 91), transposed}});
    }
    // abs of the minimum wraps to the minimum, like two's complement.
    const Tensor extremes = from_vector<int64_t>({std::numeric_limits<int64_t>::min(), -1, 0, 1,
                                                  std::numeric_limits<int64_t>::max()}, {5});
    const Tensor in = t == kInt64 ? extremes
                                  : from_vector<int32_t>({std::numeric_limits<int32_t>::min(), -1, 0, 1,
                                                          std::numeric_limits<int32_t>::max()}, {5});
    expect_backends_agree(
        [](const std::vector<Tensor>& x) { backend::unary(UnaryOp::kAbs, x[0], x[1], 0.0, 0.0); },
        {{zeros({5}, t)}, {in}});
  }
}

TEST(CudaUnaryTest, BackwardEveryOpDtypeSizeAndLayout) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (int k = 0; k < kUnaryOpCount; ++k) {
    const UnaryOp op = static_cast<UnaryOp>(k);
    double p0, p1;
    params_for(op, p0, p1);
    const Kernel kernel = [=](const std::vector<Tensor>& x) {
      backend::unary_backward(op, x[0], x[1], x[2], p0, p1);
    };
    for (DType t : kFloatTypes) {
      const Tol tol = (op == UnaryOp::kAbs || op == UnaryOp::kRelu || op == UnaryOp::kClamp) ? Tol{} : libm_tol(t);
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << "op " << k << " " << name_of(t, n));
        expect_backends_agree(kernel, {{zeros({n}, t)}, {values_of({n}, t, 100 + k)}, {unary_input(op, {n}, t, 120 + k)}},
                              tol);
      }
      SCOPED_TRACE(::testing::Message() << "op " << k << " " << dtype_name(t) << " broadcast g, transposed saved");
      expect_backends_agree(kernel,
                            {{zeros({37, 45}, t)},
                             {values_of({45}, t, 140 + k), [](const Tensor& g) { return g.expand({37, 45}); }},
                             {unary_input(op, {45, 37}, t, 160 + k), transposed}},
                            tol);
    }
  }
}

// ---- select ----

TEST(CudaSelectTest, WhereEveryDtypeSizeAndBroadcast) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Kernel kernel = [](const std::vector<Tensor>& x) { backend::where(x[0], x[1], x[2], x[3]); };
  for (DType t : kAllTypes) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(name_of(t, n));
      expect_backends_agree(kernel, {{zeros({n}, t)}, {values_of({n}, kBool, 200)}, {values_of({n}, t, 201)},
                                     {values_of({n}, t, 202)}});
    }
    SCOPED_TRACE(::testing::Message() << dtype_name(t) << " broadcast");
    expect_backends_agree(kernel, {{zeros({37, 45}, t)}, {values_of({37, 1}, kBool, 203)}, {values_of({45}, t, 204)},
                                   {values_of({45, 37}, t, 205), transposed}});
  }
}

TEST(CudaSelectTest, MaskedFillEveryDtypeSizeAndBroadcast) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType t : kAllTypes) {
    const double value = is_floating(t) ? -std::numeric_limits<double>::infinity() : (t == kBool ? 1.0 : -7.0);
    for (bool fill_when : {true, false}) {
      const Kernel kernel = [=](const std::vector<Tensor>& x) {
        backend::masked_fill(x[0], x[1], x[2], value, fill_when);
      };
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << name_of(t, n) << " fill_when " << fill_when);
        expect_backends_agree(kernel, {{zeros({n}, t)}, {values_of({n}, t, 210)}, {values_of({n}, kBool, 211)}});
      }
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " broadcast, fill_when " << fill_when);
      expect_backends_agree(kernel, {{zeros({37, 45}, t)}, {values_of({45, 37}, t, 212), transposed},
                                     {values_of({1, 45}, kBool, 213)}});
    }
  }
  // A value that f16 rounds (to nearest even) and bf16 rounds differently.
  for (DType t : kFloatTypes) {
    expect_backends_agree(
        [](const std::vector<Tensor>& x) { backend::masked_fill(x[0], x[1], x[2], 0.1, true); },
        {{zeros({257}, t)}, {values_of({257}, t, 214)}, {values_of({257}, kBool, 215)}});
  }
}

// ---- fill, copy, arange ----

TEST(CudaCopyTest, FillEveryDtypeSizeAndStrides) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType t : kAllTypes) {
    std::vector<double> fill_values = {0.0, 2.5, -3.0};
    if (is_floating(t)) fill_values.insert(fill_values.end(), {1.0 / 3.0, 1e10, -1e-30});   // rounding, overflow
    if (t == kInt32 || t == kInt64) fill_values.push_back(123456.0);
    for (double v : fill_values) {
      const Kernel kernel = [=](const std::vector<Tensor>& x) { backend::fill(x[0], v); };
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << name_of(t, n) << " value " << v);
        expect_backends_agree(kernel, {{values_of({n}, t, 220)}});
      }
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " strided, value " << v);
      expect_backends_agree(kernel, {{values_of({45, 37}, t, 221), transposed}});
      expect_backends_agree(kernel, {{values_of({8, 10, 6}, t, 222), every_other_row}});   // odd rows untouched
    }
  }
}

// Sources for conversion tests: values that exercise rounding to f16/bf16
// (ties, many mantissa bits, overflow), truncation to integers, 0/1 for bool,
// and integers beyond float's 24-bit mantissa.
Tensor conversion_source(DType t, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  if (is_floating(t)) {
    std::normal_distribution<float> d(0.f, 300.f);
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) {
      switch (i % 5) {
        case 0: v[i] = d(rng); break;
        case 1: v[i] = std::round(d(rng)) + 0.5f; break;   // ties when truncated / rounded
        case 2: v[i] = d(rng) * 1e-3f; break;
        case 3: v[i] = 2049.0f + static_cast<float>(i % 7); break;   // f16 spacing 2 here: ties to even
        default: v[i] = static_cast<float>(i % 2);
      }
    }
    return from_vector<float>(v, {n}).to(t);
  }
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = static_cast<int64_t>(rng() % 2001) - 1000;
    v[i] = t == kBool ? r > 0 : (i % 3 == 0 && t == kInt64 ? (int64_t{1} << 40) + r : r);
  }
  return from_vector<int64_t>(v, {n}).to(t);
}

TEST(CudaCopyTest, CopyEveryDtypePairMatchesCpuConvert) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Kernel kernel = [](const std::vector<Tensor>& x) { backend::copy(x[0], x[1]); };
  for (DType to : kAllTypes) {
    for (DType from : kAllTypes) {
      for (int64_t n : {int64_t{1}, int64_t{257}, int64_t{100000}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << name_of(to, n));
        expect_backends_agree(kernel, {{zeros({n}, to)}, {conversion_source(from, n, 230)}});
      }
      SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(to) << " strided/broadcast");
      const Tensor src = conversion_source(from, 45 * 37, 231).reshape({45, 37});
      expect_backends_agree(kernel, {{zeros({37, 45}, to)}, {src, transposed}});
      expect_backends_agree(kernel, {{zeros({8, 10, 6}, to), every_other_row},
                                     {conversion_source(from, 6, 232).reshape({1, 6})}});
    }
  }
}

// NaN, infinities and floats beyond an integer type's range convert as on the
// CPU (backend::float_to_int: NaN -> 0, saturate), not as the GPU's own cast.
TEST(CudaCopyTest, FloatToIntegerEdgesMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Kernel kernel = [](const std::vector<Tensor>& x) { backend::copy(x[0], x[1]); };
  const Tensor edges = from_vector<float>({NAN, -NAN, INFINITY, -INFINITY, 3e9f, -3e9f, 2147483520.f, -2147483648.f,
                                          1e19f, -1e19f, 9.3e18f, -0.f, 2.99f, -2.99f});
  for (DType from : {kFloat32, kFloat16, kBFloat16}) {
    for (DType to : {kInt32, kInt64}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(to));
      expect_backends_agree(kernel, {{zeros({14}, to)}, {edges.to(from)}});
    }
  }
}

TEST(CudaCopyTest, ArangeEveryNumericDtype) {
  ENCORE_SKIP_WITHOUT_GPU();
  struct Case { double start, step; };
  for (DType t : kNumericTypes) {
    for (const Case& c : {Case{0, 1}, Case{-3, 0.37}, Case{5, -3}, Case{1e6, 0.1}}) {
      const Kernel kernel = [=](const std::vector<Tensor>& x) {
        backend::arange(x[0], c.start, c.step);
      };
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << name_of(t, n) << " start " << c.start << " step " << c.step);
        expect_backends_agree(kernel, {{zeros({n}, t)}});
      }
    }
  }
}

// ---- random ----

// Distance in f32 units in the last place (same-sign finite values).
int64_t ulps_apart(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

// Uniform draws equal the CPU's bit for bit (integer math and an exact scale).
// Normal draws go through logf/cosf: CUDA's are within 1-2 ulps of glibc's,
// so f32 may differ by a few ulps (<= 4 by CUDA's documented bounds; 8
// allowed) and f16/bf16 by one rounding step.
void expect_same_draws(const Tensor& gpu, const Tensor& cpu, RandomKind kind) {
  if (kind == RandomKind::kUniform) return expect_close(gpu.to(kCPU), cpu, {});
  if (cpu.dtype() != kFloat32) return expect_close(gpu.to(kCPU), cpu, libm_tol(cpu.dtype()));
  const std::vector<float> g = gpu.to(kCPU).to_vector<float>(), c = cpu.to_vector<float>();
  int bad = 0;
  for (size_t i = 0; i < c.size() && bad < 5; ++i) {
    if (g[i] == c[i] || (std::abs(c[i]) < 1e-6f && std::abs(g[i] - c[i]) < 1e-12f) || ulps_apart(g[i], c[i]) <= 8) {
      continue;
    }
    ADD_FAILURE() << "draw " << i << ": cuda " << g[i] << ", cpu " << c[i];
    ++bad;
  }
}

TEST(CudaRandomTest, SameSeedSameNumbersAsCpuAndOffsetAdvancesOnDevice) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (RandomKind kind : {RandomKind::kUniform, RandomKind::kNormal}) {
    for (DType t : kFloatTypes) {
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message() << (kind == RandomKind::kUniform ? "rand " : "randn ") << name_of(t, n));
        const uint64_t seed = 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(n);
        Generator cpu_gen(seed, kCPU), gpu_gen(seed, kGpu);
        auto draw = [&](Generator& g, Device d) {
          return kind == RandomKind::kUniform ? rand({n}, t, d, &g) : randn({n}, t, d, &g);
        };
        const Tensor c1 = draw(cpu_gen, kCPU), g1 = draw(gpu_gen, kGpu);
        const Tensor c2 = draw(cpu_gen, kCPU), g2 = draw(gpu_gen, kGpu);
        ASSERT_TRUE(g1.device().is_cuda());
        ASSERT_TRUE(gpu_gen.state().device().is_cuda());
        expect_same_draws(g1, c1, kind);
        expect_same_draws(g2, c2, kind);
        EXPECT_EQ(gpu_gen.offset(), static_cast<uint64_t>(2 * n));
        EXPECT_EQ(gpu_gen.offset(), cpu_gen.offset());
        EXPECT_EQ(gpu_gen.seed(), seed);
        // Two draws differ (the offset moved between them).
        const std::vector<double> a = g1.to(kCPU).to_vector<double>(), b = g2.to(kCPU).to_vector<double>();
        if (n >= 7) {
          EXPECT_NE(a, b);
        }
        if (kind == RandomKind::kUniform) {
          for (double v : a) ASSERT_TRUE(v >= 0.0 && v < 1.0) << v;
        }
      }
    }
  }
}

TEST(CudaRandomTest, DrawsThroughTheKernelFromANonzeroOffset) {
  ENCORE_SKIP_WITHOUT_GPU();
  // State set directly: a large offset that crosses the 32-bit boundary of the counter.
  const Tensor state_cpu = from_vector<int64_t>({12345, (int64_t{1} << 32) - 3}, {2});
  for (RandomKind kind : {RandomKind::kUniform, RandomKind::kNormal}) {
    Tensor cs = state_cpu.clone(), gs = state_cpu.to(kGpu);
    Tensor c = empty({1000}), g = empty({1000}, kGpu);
    backend::random(c, cs, kind);
    backend::random(g, gs, kind);
    expect_same_draws(g, c, kind);
    EXPECT_EQ(gs.to(kCPU).to_vector<int64_t>(), cs.to_vector<int64_t>());
  }
}

// ---- through the public ops ----

// The op layer picks these kernels for CUDA tensors (kernels_for): forward
// results equal the CPU's.
TEST(CudaElementwiseOpsTest, PublicOpsRouteToTheCudaKernels) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Tensor a = testing::random_tensor({37, 45}, 300), b = testing::random_tensor({45}, 301);
  const Tensor cond = values_of({37, 1}, kBool, 302);
  using In = const std::vector<Tensor>&;
  const std::vector<std::pair<const char*, testing::Fn>> exact = {
      {"add", [](In x) { return add(x[0], x[1]); }},
      {"div", [](In x) { return div(x[0], x[1]); }},
      {"rsub", [](In x) { return rsub(x[0], 2.0); }},
      {"relu", [](In x) { return relu(x[0]); }},
      {"clamp", [](In x) { return clamp(x[0], -0.5, 0.5); }},
      {"where", [](In x) { return where(x[2], x[0], x[1]); }},
      {"masked_fill", [](In x) { return masked_fill(x[0], x[2], -1.0); }},
      {"to f16", [](In x) { return x[0].to(kFloat16); }},
      {"transpose contiguous", [](In x) { return x[0].t().contiguous(); }},
  };
  for (const auto& [name, fn] : exact) {
    SCOPED_TRACE(name);
    testing::expect_cuda_matches_cpu(fn, {a, b, cond}, 0, 0);
  }
  const std::vector<std::pair<const char*, testing::Fn>> libm = {
      {"tanh", [](In x) { return tanh(x[0]); }},
      {"gelu", [](In x) { return gelu(x[0], GeluApprox::kNone); }},
      {"log", [](In x) { return log(add(abs(x[0]), 0.5)); }},
  };
  for (const auto& [name, fn] : libm) {
    SCOPED_TRACE(name);
    testing::expect_cuda_matches_cpu(fn, {a, b, cond}, 1e-6, 1e-5);
  }
}

// Backward through the ops: the fused unary backward kernels and masked_fill
// as the gradient of where. The comparison itself also runs mul and sum
// (reduce family) on the GPU.
TEST(CudaElementwiseOpsTest, GradientsThroughOpsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Tensor a = testing::random_tensor({37, 45}, 310), b = testing::random_tensor({37, 45}, 311);
  const Tensor cond = values_of({37, 45}, kBool, 312);
  using In = const std::vector<Tensor>&;
  const std::vector<std::pair<const char*, testing::Fn>> fns = {
      {"tanh", [](In x) { return tanh(x[0]); }},
      {"sigmoid", [](In x) { return sigmoid(x[0]); }},
      {"gelu", [](In x) { return gelu(x[0], GeluApprox::kTanh); }},
      {"gelu_erf", [](In x) { return gelu(x[0]); }},
      {"silu", [](In x) { return silu(x[0]); }},
      {"relu", [](In x) { return relu(x[0]); }},
      {"where", [](In x) { return where(x[2], x[0], x[1]); }},
      {"mul", [](In x) { return mul(x[0], x[1]); }},
  };
  for (const auto& [name, fn] : fns) {
    SCOPED_TRACE(name);
    testing::expect_cuda_matches_cpu(fn, {a, b, cond}, 1e-5, 1e-5, /*backward=*/true);
  }
}

}  // namespace
}  // namespace encore
