// Shared helpers for encore's tests: host references and gradient checks.
//
//   Tensor a = testing::random_tensor({2, 3}, 1);             // seeded N(0,1), f32
//   testing::expect_near(add(a, a), testing::values(a) * 2);   // elementwise vs host
//   testing::expect_gradients_match([](const auto& in) { return mul(in[0], in[1]); }, {a, b});
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "encore/encore.h"

namespace encore::testing {

// A seeded f32 tensor with N(0,1) entries (independent of the default generator).
Tensor random_tensor(Shape shape, uint64_t seed, DType dtype = kFloat32);
// Values of any tensor as doubles, row-major.
std::vector<double> values(const Tensor& t);
// A non-contiguous tensor with the same values as t: a transposed copy
// transposed back (t.dim() >= 2), or a strided slice of a larger buffer.
Tensor non_contiguous(const Tensor& t);

// |actual - expected| <= atol + rtol * |expected| for every element, and equal shapes.
void expect_near(const Tensor& actual, const std::vector<double>& expected, double atol = 1e-5,
                 double rtol = 1e-5);
void expect_near(const Tensor& actual, const Tensor& expected, double atol = 1e-5, double rtol = 1e-5);

// One rounding to dtype (f16/bf16; f32 gives 2^-24 and 0): the largest
// relative error, half an ulp (2^-11 for f16's 11-bit significand, 2^-8 for
// bf16's 8 bits), and the largest absolute error below the normal range,
// half the subnormal spacing (2^-25 for f16; bf16 has f32's exponent range,
// its subnormals far below any value a test compares: 0). Together they are
// the atol/rtol of expect_near for "the f32 result, rounded once", the
// contract of f16/bf16 ops (include/encore/ops.h).
double half_ulp(DType dtype);
double half_subnormal(DType dtype);

// A tensor of dtype `dtype` (f16/bf16) beside its f32 twin, named for messages.
struct HalfAndF32 {
  const char* name;
  Tensor half;
  Tensor f32;
};
// Each `half` has dtype `dtype` and is its f32 twin rounded once (the
// tolerances above): the f16/bf16 contract applied to a list of gradients.
void expect_f32_rounded_once(DType dtype, std::initializer_list<HalfAndF32> pairs);

// Index helpers for host references: the row-major multi-index of flat i.
std::vector<int64_t> unravel(int64_t i, absl::Span<const int64_t> shape);
// Flat index into `shape` of a multi-index of a broadcast shape (dims align right; size-1 dims pin to 0).
int64_t broadcast_index(absl::Span<const int64_t> index, absl::Span<const int64_t> shape);

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks every input's backward gradient against central finite differences
// of fn. Inputs must be f32; they are made leaves that require grad. The
// scalar checked is sum(fn(inputs) * w) for a fixed random w, so every output
// element counts. Tolerance: with f32 math and step eps = 1e-2 on smooth
// functions, truncation error is O(eps^2) ~ 1e-4 and rounding error about
// 1e-7 * |f| / eps ~ 1e-5 * |f|; atol/rtol of 5e-3 leaves a margin.
// Functions with kinks (relu, abs, max) need inputs away from the kink.
void expect_gradients_match(const Fn& fn, std::vector<Tensor> inputs, double eps = 1e-2, double atol = 5e-3,
                            double rtol = 5e-3);

// Runs fn, expects encore::Error with `code` whose message contains every
// string in `parts` (op name, shapes, dtypes).
void expect_error(const std::function<void()>& fn, absl::StatusCode code, const std::vector<std::string>& parts);
// `s` has `code` and its message contains every string in `parts`.
void expect_status(const absl::Status& s, absl::StatusCode code, const std::vector<std::string>& parts);

// A pid that no process has: a child that has exited and been reaped (for
// the stale-temporary tests of atomic writes).
int dead_pid();

// While it lives, files this process writes are capped at `bytes`
// (RLIMIT_FSIZE) and SIGXFSZ is ignored, so a write past the cap fails with
// EFBIG (OutOfRange), as one on a full disk fails with ENOSPC.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes);
  ~FileSizeLimit();
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  uint64_t old_cur_ = 0;
  void (*old_handler_)(int) = nullptr;
};

}  // namespace encore::testing
