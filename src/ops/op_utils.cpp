#include "src/ops/op_utils.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "encore/autograd.h"
#include "src/core/stream.h"

namespace encore::ops {

namespace {
// The broadcast of a and b into *out; false when a dim pair is incompatible.
bool try_broadcast(absl::Span<const int64_t> a, absl::Span<const int64_t> b, Shape* out) {
  const size_t n = std::max(a.size(), b.size());
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    (*out)[i] = da == 1 ? db : da;
  }
  return true;
}
}  // namespace

Shape broadcast_shapes(const char* op, absl::Span<const int64_t> a, absl::Span<const int64_t> b) {
  Shape out;
  ENCORE_CHECK(try_broadcast(a, b, &out), "%s: shapes %s and %s cannot be broadcast together", op,
               shape_str(a), shape_str(b));
  return out;
}

Shape broadcast_shapes(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() == b.shape()) return a.shape();
  Shape out;
  ENCORE_CHECK(try_broadcast(a.shape(), b.shape(), &out),
               "%s: shapes %s (%s) and %s (%s) cannot be broadcast together", op, shape_str(a.shape()),
               dtype_name(a.dtype()), shape_str(b.shape()), dtype_name(b.dtype()));
  return out;
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  ENCORE_CHECK(t.defined(), "%s: %s is an undefined tensor", op, what);
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  ENCORE_CHECK(a.defined() && b.defined(), "%s: undefined tensor operand", op);
  ENCORE_CHECK(a.dtype() == b.dtype(),
               "%s: dtype mismatch: %s %s and %s %s (convert one with .to(dtype))", op,
               shape_str(a.shape()), dtype_name(a.dtype()), shape_str(b.shape()), dtype_name(b.dtype()));
  ENCORE_CHECK(a.device() == b.device(), "%s: device mismatch: %s on %s and %s on %s", op,
               shape_str(a.shape()), a.device().str(), shape_str(b.shape()), b.device().str());
}

void check_arithmetic(const char* op, const Tensor& t) {
  ENCORE_CHECK(t.dtype() != kBool, "%s: bool tensor %s does not support arithmetic", op, shape_str(t.shape()));
}

void check_float(const char* op, const Tensor& t) {
  ENCORE_CHECK(is_floating(t.dtype()), "%s: needs a float tensor (f32, f16, bf16), got %s %s", op,
               shape_str(t.shape()), dtype_name(t.dtype()));
}

void check_scalar_fits(const char* op, double value, DType dtype, const Shape& shape, bool truncates) {
  if (dtype != kInt32 && dtype != kInt64) return;
  const double lo = dtype == kInt32 ? -2147483648.0 : -9223372036854775808.0;   // exact
  const double hi = dtype == kInt32 ? 2147483648.0 : 9223372036854775808.0;     // one past the largest
  const double whole = std::trunc(value);
  ENCORE_CHECK(whole >= lo && whole < hi, "%s: value %g does not fit the %s tensor %s (out of its range)", op,
               value, dtype_name(dtype), shape_str(shape));   // NaN fails both comparisons
  ENCORE_CHECK(truncates || whole == value,
               "%s: value %g does not fit the %s tensor %s (not a whole number); convert the tensor with "
               ".to(kFloat32) first", op, value, dtype_name(dtype), shape_str(shape));
}

void check_float_fits(const char* op, double value, DType dtype, const Shape& shape) {
  double largest = 0;
  switch (dtype) {
    case kFloat32: largest = std::numeric_limits<float>::max(); break;
    case kFloat16: largest = 65504.0; break;
    case kBFloat16: largest = 3.3895313892515355e38; break;   // 0x7F7F
    default: return;
  }
  ENCORE_CHECK(!std::isfinite(value) || std::fabs(value) <= largest,
               "%s: value %g does not fit the %s tensor %s (beyond its largest finite value %g); pass "
               "+-infinity if that is meant", op, value, dtype_name(dtype), shape_str(shape), largest);
}

int64_t normalize_dim(const char* op, int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  ENCORE_CHECK(dim >= -n && dim < n, "%s: dim %d out of range for a %d-d tensor", op, dim, ndim);
  return dim < 0 ? dim + n : dim;
}

bool host_checks_allowed(const Tensor& t) {
  return t.device().is_cpu() && !current_stream(t.device()).observed_here();
}

void check_inplace(const char* op, const Tensor& t) {
  ENCORE_CHECK(!(GradMode::is_enabled() && t.requires_grad()),
               "%s: in-place write to a tensor that requires grad (shape %s, %s); autograd cannot "
               "track it. Wrap it in NoGradGuard (e.g. an optimizer update) or use the out-of-place op",
               op, shape_str(t.shape()), dtype_name(t.dtype()));
}

bool can_write_into(const Tensor& t, const Shape& shape) {
  // NOTE [ Writing into a dying temporary ] (op_utils.h).
  const bool sole = t.impl()->use_count() == 1 && t.storage()->use_count() == 1;
  return sole && !(t.requires_grad() && t.is_leaf()) && t.is_contiguous() && t.storage_offset() == 0 &&
         t.shape() == shape;
}

Tensor output_into(const Tensor& t, const Shape& shape) {
  if (can_write_into(t, shape)) return make_view("output_into", t, shape, t.strides(), 0);
  return empty(shape, t.dtype(), t.device());
}

}  // namespace encore::ops
